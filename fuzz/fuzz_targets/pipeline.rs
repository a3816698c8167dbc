//! Arbitrary packets through a pipeline holding two sessions with filters, QERs and a URR,
//! one with a buffering FAR (the general path) and one without (a hot record): never
//! panics, and every packet is accounted for.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_dataplane::{LocalAddrs, Output, Packet, Pipeline, PipelineConfig, Port};
use upf_rules::sdf::FlowDescription;
use upf_rules::*;
use upf_wire::encap::{encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;

const UPF: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

/// Session `n` (1 or 2): UE 10.0.0.n, uplink TEID n; session 1's filtered downlink PDR
/// buffers (so it takes the general path), session 2's forwards (a hot record).
fn session(n: u8) -> Arc<Session> {
    let mut s = Session::new(Seid(n.into()), Seid(n.into()), IpAddr::V4(UPF));
    let ue = |dst| UeIp { ipv4: Some(Ipv4Addr::new(10, 0, 0, n)), ipv6: None, is_destination: dst };
    let mut ul = Pdi::any(Interface::Access);
    ul.local_f_teid = Some(LocalFTeid { teid: Teid(n.into()), ipv4: Some(UPF), ipv6: None });
    ul.ue_ip = Some(ue(false));
    let mut ul2 = ul.clone();
    ul2.sdf_filters = vec![SdfFilter {
        flow: Some(FlowDescription::parse("permit out 17 from 198.51.100.0/24 1000-2000 to assigned").unwrap()),
        ..Default::default()
    }]
    .into();
    let mut dl = Pdi::any(Interface::Core);
    dl.ue_ip = Some(ue(true));
    let mut dl2 = dl.clone();
    dl2.sdf_filters = ul2.sdf_filters.clone();
    let pdr = |id, prec, pdi, far| Pdr {
        id: PdrId(id),
        precedence: Precedence(prec),
        pdi,
        outer_header_removal: (far == 1).then_some(OuterHeaderRemoval::GtpuUdpIp { delete_pdu_session_container: false }),
        far: Some(FarId(far)),
        qers: [QerId(1)].into_iter().collect(),
        urrs: [UrrId(1)].into_iter().collect(),
    };
    let dl2_far = if n == 1 { 3 } else { 2 };
    s.pdrs = vec![pdr(1, 100, ul, 1), pdr(2, 10, ul2, 1), pdr(3, 100, dl, 2), pdr(4, 10, dl2, dl2_far)];
    let far = |id, action, fw| Far { id: FarId(id), action, forwarding: fw, duplicating: Box::default(), bar: None };
    s.fars = vec![
        far(1, ApplyAction::FORW, Some(Forwarding::to(Interface::Core))),
        far(2, ApplyAction::FORW, Some(Forwarding {
            outer_header_creation: Some(OuterHeaderCreation::Gtpu { teid: Teid(9), peer: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 100)) }),
            ..Forwarding::to(Interface::Access)
        })),
        far(3, ApplyAction::BUFF.union(ApplyAction::NOCP), None),
    ];
    let mut q = Qer::open(QerId(1));
    q.mbr = Some(Bitrate { uplink_kbps: 1000, downlink_kbps: 1000 });
    q.qfi = Some(Qfi(9));
    s.qers = vec![q];
    let mut u = Urr::new(UrrId(1));
    u.triggers = ReportingTriggers::VOLTH;
    u.volume_threshold = Some(VolumeLimit { total: Some(5000), ..Default::default() });
    s.urrs = vec![u];
    Arc::new(s)
}

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let cfg = PipelineConfig { n3: LocalAddrs { v4: Some(UPF), v6: None }, ..Default::default() };
    let mut dp = Pipeline::new(t0, cfg);
    dp.install(t0, session(1), InstallFlags::default()).unwrap();
    dp.install(t0, session(2), InstallFlags::default()).unwrap();
    assert_eq!(dp.cold_sessions(), 1);
    let mut rx = Vec::new();
    // Chunks: [kind, len, bytes…]: kind bit 0 N6 or N3; bit 1: wrap as a G-PDU for TEID 1
    // (2 if `len` is odd), bits 2-7 its QFI.
    let mut rest = data;
    while let [kind, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (chunk, next) = tail.split_at(n);
        rest = next;
        let port = if kind & 1 == 0 { Port::N3 } else { Port::N6 };
        let Some(mut p) = Packet::from_bytes(port, chunk) else { continue };
        if kind & 2 != 0 && port == Port::N3 {
            let (s, l) = (p.start(), p.len());
            let e = EncapV4 {
                src: Ipv4Addr::new(192, 0, 2, 100),
                dst: UPF,
                ident: 0,
                dont_frag: false,
                tunnel: GtpuTunnel { teid: 1 + u32::from(*len & 1), src_port: 2152, dst_port: 2152, psc: Some(PduSessionContainer::ul(kind >> 2 & 0x3f)), ttl: 64, dscp: 0, ecn: 0 },
            };
            if let Ok(start) = encapsulate_gtpu_v4(p.buffer_mut(), s, l, &e) {
                p.set_range(start, s + l);
            }
        }
        rx.push(p);
    }
    let mut out = Output::default();
    dp.process(t0, &mut rx, &mut out);
    assert!(dp.counters().balanced(), "{:?}", dp.counters());
    dp.handle_timeout(t0 + Duration::from_secs(5));
    while dp.poll_event().is_some() {}
    dp.remove(t0, Seid(1)).unwrap();
    dp.remove(t0, Seid(2)).unwrap();
    assert!(dp.counters().balanced(), "{:?}", dp.counters());
});
