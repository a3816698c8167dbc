//! PDR selection through the real agent: precedence between an SDF filter and a catch-all on
//! one TEID, QFI in the PDI, ToS / Traffic Class filters, and packets no PDR matches. Each PDR
//! has its own FAR, so where a packet goes tells which PDR took it.

mod common;
use common::*;
use std::net::Ipv4Addr;
use upf_dataplane::{DropReason, Packet, Port};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_smf as smf;
use upf_wire::ext::PduSessionContainer;

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 9);
const PSA: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);
const FLOW: &str = "permit out 17 from 198.51.100.0/24 1000-2000 to assigned";

struct P {
    id: u16,
    precedence: u32,
    uplink: bool,
    sdf: Option<SdfFilter>,
    qfis: &'static [u8],
}

fn flow(text: &str) -> Option<SdfFilter> {
    Some(SdfFilter {
        flow_description: Some(text.into()),
        ..Default::default()
    })
}

/// PDR `id` forwards to tunnel `id`: uplink on N9 to the PSA, downlink on N3 to the gNB.
/// Uplink PDRs share one F-TEID (CHOOSE ID 1).
fn session(pdrs: &[P]) -> SessionEstablishmentRequest {
    let mut req = simple_session(UE, 0);
    req.create_pdrs = pdrs
        .iter()
        .map(|p| {
            let (src, teid) = if p.uplink {
                (SourceInterface::ACCESS, Some(smf::choose_teid(1)))
            } else {
                (SourceInterface::CORE, None)
            };
            let ue = smf::ue_ip(smf::UeAddr::Static(UE), !p.uplink);
            let mut pdi = smf::pdi(src, teid, Some(ue), None);
            pdi.sdf_filters = p.sdf.clone().into_iter().collect();
            pdi.qfis = p.qfis.iter().map(|&q| Qfi(q)).collect();
            smf::create_pdr(p.id, p.precedence, pdi, p.id.into(), &[1], &[], p.uplink)
        })
        .collect();
    req.create_fars = pdrs
        .iter()
        .map(|p| {
            let (dest, ohc) = if p.uplink {
                (
                    DestinationInterface::CORE,
                    OuterHeaderCreation::gtpu_ipv4(p.id.into(), PSA),
                )
            } else {
                (
                    DestinationInterface::ACCESS,
                    OuterHeaderCreation::gtpu_ipv4(p.id.into(), GNB),
                )
            };
            smf::create_far(
                p.id.into(),
                ApplyAction::FORW,
                Some(smf::forwarding(dest, Some(ohc))),
                None,
            )
        })
        .collect();
    req.create_urrs = Default::default();
    req
}

/// The PDR each packet went out by (its tunnel's TEID), `None` for each one dropped.
fn which(r: &mut Rig, pkts: Vec<Packet>) -> Vec<Option<u32>> {
    let n = pkts.len();
    let mut got = Vec::new();
    for p in pkts {
        let dropped = r.dp().counters().dropped_total();
        let out = r.send1(p);
        assert!(out.len() <= 1);
        match out.first() {
            Some(o) => {
                assert!(matches!(o.port(), Port::N3 | Port::N9));
                got.push(Some(open(o).0.gtpu.teid));
            }
            None => {
                assert_eq!(r.dp().counters().dropped_total(), dropped + 1);
                got.push(None);
            }
        }
    }
    assert_eq!(got.len(), n);
    assert_balanced(r);
    got
}

fn up_udp(dst: [u8; 4], dport: u16) -> Vec<u8> {
    udp4(UE, dst.into(), 4000, dport, 20, 0)
}

fn down_udp(src: [u8; 4], sport: u16) -> Vec<u8> {
    udp4(src.into(), UE, sport, 4000, 20, 0)
}

fn four(catch_all: u32, specific: u32) -> Vec<P> {
    vec![
        P {
            id: 1,
            precedence: catch_all,
            uplink: true,
            sdf: None,
            qfis: &[],
        },
        P {
            id: 2,
            precedence: catch_all,
            uplink: false,
            sdf: None,
            qfis: &[],
        },
        P {
            id: 5,
            precedence: specific,
            uplink: true,
            sdf: flow(FLOW),
            qfis: &[],
        },
        P {
            id: 6,
            precedence: specific,
            uplink: false,
            sdf: flow(FLOW),
            qfis: &[],
        },
    ]
}

#[test]
fn the_specific_filter_with_the_better_precedence_wins_over_the_catch_all() {
    let mut r = Rig::new();
    let (_, resp) = r.establish(session(&four(200, 100)));
    let teid = local_teid(&resp);
    let g = |inner: Vec<u8>| gpdu(teid, Some(9), &inner);
    let got = which(
        &mut r,
        vec![
            g(up_udp([198, 51, 100, 7], 1500)),
            g(up_udp([198, 51, 100, 200], 1000)),
            g(up_udp([198, 51, 100, 7], 2000)),
            g(up_udp([198, 51, 100, 7], 999)),
            g(up_udp([198, 51, 100, 7], 2001)),
            g(up_udp([198, 51, 101, 7], 1500)),
            g(tcp4(UE, Ipv4Addr::new(198, 51, 100, 7), 4000, 1500, 20)),
            n6(&down_udp([198, 51, 100, 7], 1500)),
            n6(&down_udp([198, 51, 100, 7], 2500)),
            n6(&down_udp([192, 0, 2, 7], 1500)),
        ],
    );
    let s = Some;
    assert_eq!(
        got,
        [s(5), s(5), s(5), s(1), s(1), s(1), s(1), s(6), s(2), s(2)]
    );
}

#[test]
fn a_catch_all_with_the_better_precedence_takes_everything() {
    let mut r = Rig::new();
    let (_, resp) = r.establish(session(&four(50, 100)));
    let teid = local_teid(&resp);
    let got = which(
        &mut r,
        vec![
            gpdu(teid, Some(9), &up_udp([198, 51, 100, 7], 1500)),
            n6(&down_udp([198, 51, 100, 7], 1500)),
        ],
    );
    assert_eq!(got, [Some(1), Some(2)]);
}

#[test]
fn a_qfi_in_the_pdi_matches_only_g_pdus_carrying_it() {
    let qfi_pdr = P {
        id: 5,
        precedence: 100,
        uplink: true,
        sdf: None,
        qfis: &[5],
    };
    let catch_all = P {
        id: 1,
        precedence: 200,
        uplink: true,
        sdf: None,
        qfis: &[],
    };
    let mut r = Rig::new();
    let (_, resp) = r.establish(session(&[catch_all, qfi_pdr]));
    let teid = local_teid(&resp);
    let inner = up_udp([198, 51, 100, 7], 53);
    let got = which(
        &mut r,
        vec![
            gpdu(teid, Some(5), &inner),
            gpdu(teid, Some(9), &inner),
            gpdu(teid, None, &inner),
            gpdu_over(
                Port::N3,
                GNB.into(),
                UPF.into(),
                teid,
                Some(PduSessionContainer::dl(5)),
                &inner,
            ),
        ],
    );
    assert_eq!(got, [Some(5), Some(1), Some(1), Some(5)]);

    // Alone, the QFI PDR leaves the others unmatched.
    let mut r = Rig::new();
    let (_, resp) = r.establish(session(&[P {
        id: 5,
        precedence: 100,
        uplink: true,
        sdf: None,
        qfis: &[5, 6],
    }]));
    let teid = local_teid(&resp);
    let got = which(
        &mut r,
        vec![
            gpdu(teid, Some(6), &inner),
            gpdu(teid, Some(9), &inner),
            gpdu(teid, None, &inner),
        ],
    );
    assert_eq!(got, [Some(5), None, None]);
    assert_eq!(r.dp().counters().dropped(DropReason::NoMatchingPdr), 2);
}

#[test]
fn tos_traffic_class_filter_matches_under_its_mask() {
    let tos = |uplink, id| P {
        id,
        precedence: 10,
        uplink,
        sdf: Some(SdfFilter {
            tos_traffic_class: Some(0xb8fc), // DSCP 46, ECN bits ignored
            ..Default::default()
        }),
        qfis: &[],
    };
    let mut pdrs = four(200, 100);
    pdrs.push(tos(true, 7));
    pdrs.push(tos(false, 8));
    let mut r = Rig::new();
    let (_, resp) = r.establish(session(&pdrs));
    let teid = local_teid(&resp);
    let u = |t: u8| gpdu(teid, Some(9), &with_tos(up_udp([198, 51, 100, 7], 53), t));
    let d = |t: u8| n6(&with_tos(down_udp([198, 51, 100, 7], 1500), t));
    let got = which(
        &mut r,
        vec![u(0xb8), u(0xbb), u(0xb4), u(0), d(0xb9), d(0x00)],
    );
    let s = Some;
    assert_eq!(got, [s(7), s(7), s(1), s(1), s(8), s(6)]);
}

#[test]
fn no_matching_pdr_is_dropped_and_counted() {
    let mut pdrs = four(200, 100);
    pdrs.retain(|p| p.sdf.is_some());
    let mut r = Rig::new();
    let (_, resp) = r.establish(session(&pdrs));
    let teid = local_teid(&resp);
    let got = which(
        &mut r,
        vec![
            gpdu(teid, Some(9), &up_udp([198, 51, 100, 7], 1500)),
            gpdu(teid, Some(9), &up_udp([198, 51, 100, 7], 80)),
            n6(&down_udp([198, 51, 100, 7], 1500)),
            n6(&down_udp([198, 51, 100, 7], 80)),
        ],
    );
    assert_eq!(got, [Some(5), None, Some(6), None]);
    assert_eq!(r.dp().counters().dropped(DropReason::NoMatchingPdr), 2);
}

/// An I-UPF's N9 downlink: a PDR on a GTP-U tunnel from the core, beside an uplink PDR on a
/// tunnel from the gNB. Its filter has the UE as the destination, the other way round from
/// the uplink PDR's on the same (GTP-U) list, and matches that way, hot or not.
#[test]
fn a_core_pdr_on_a_tunnel_matches_its_filter_with_the_ue_as_destination() {
    for hot in [true, false] {
        let mut pdrs = four(200, 100);
        pdrs.retain(|p| p.sdf.is_some());
        let mut req = session(&pdrs);
        let ue = smf::ue_ip(smf::UeAddr::Static(UE), true);
        let mut pdi = smf::pdi(
            SourceInterface::CORE,
            Some(smf::choose_teid(2)),
            Some(ue),
            None,
        );
        pdi.sdf_filters = flow(FLOW).into_iter().collect();
        pdi.qfis = Default::default();
        req.create_pdrs
            .push(smf::create_pdr(7, 100, pdi, 7, &[], &[], true));
        req.create_fars.push(smf::create_far(
            7,
            ApplyAction::FORW,
            Some(smf::forwarding(
                DestinationInterface::ACCESS,
                Some(OuterHeaderCreation::gtpu_ipv4(7, GNB)),
            )),
            None,
        ));
        let mut r = Rig::new();
        r.dp().set_hot_records(hot);
        let (_, resp) = r.establish(req);
        assert_eq!(r.dp().cold_sessions(), usize::from(!hot));
        let (access, core) = (pdr_teid(&resp, 5), pdr_teid(&resp, 7));
        let from_psa = |src: [u8; 4], sport: u16, dport: u16| {
            gpdu(core, None, &udp4(src.into(), UE, sport, dport, 20, 0))
        };
        let got = which(
            &mut r,
            vec![
                from_psa([198, 51, 100, 7], 1500, 4000),
                from_psa([198, 51, 100, 7], 4000, 1500),
                from_psa([198, 51, 101, 7], 1500, 4000),
                gpdu(access, Some(9), &up_udp([198, 51, 100, 7], 1500)),
                gpdu(access, Some(9), &up_udp([198, 51, 100, 7], 4000)),
            ],
        );
        assert_eq!(got, [Some(7), None, None, Some(5), None], "hot {hot}");
    }
}
