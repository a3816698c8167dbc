//! Traffic profiles as the seeds describe them, built into sessions and packets.
//!
//! A profile file (`profiles/*.toml`, parsed by `spec`) is compiled here into a [`Workload`]:
//! the session of UE i (bearers with their PDRs, QERs, URR) and the packets drawn for it.
//! S0 (SKT/Intel 2018, seed 000): every UE has two bearers, a GBR dedicated one and an MBR
//! default one, with four flows each; ACL, QoS and charging apply to every packet; sizes from
//! 64 to 1400 octets; four UL:DL throughput splits.

use crate::spec;
use anyhow::{bail, Context as _};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use upf_dataplane::{Packet, Port};
use upf_rules::sdf::FlowDescription;
use upf_rules::{
    ApplyAction, Bitrate, Far, FarId, Forwarding, Interface, LocalFTeid, OuterHeaderCreation,
    OuterHeaderRemoval, Pdi, Pdr, PdrId, Precedence, Qer, QerId, Qfi, ReportingTriggers, SdfFilter,
    Seid, Session, Teid, UeIp, Urr, UrrId, VolumeLimit,
};
use upf_wire::encap::{encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;
use upf_wire::{checksum, ip_proto};

pub const UPF_N3: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
#[cfg(test)]
pub const FLOWS_PER_BEARER: u16 = 4;

fn low8(v: u32) -> u8 {
    u8::try_from(v & 0xff).unwrap_or(0)
}

/// The i-th UE's address: 10.0.0.0/8 (room for 16M UEs).
pub fn ue_addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 | (i + 1))
}

/// The i-th UE's uplink TEID.
pub fn ue_teid(i: u32) -> u32 {
    0x1000_0000 + i
}

/// One of 160 gNBs (seed 003's count), by UE.
pub fn gnb_addr(i: u32) -> Ipv4Addr {
    gnb_of(i, 160)
}

/// Server side of flow `f` of a bearer (S0 reference): GBR flows go to 198.51.100.0/24 ports 5000+,
/// default-bearer traffic anywhere.
#[cfg(test)]
pub fn server(gbr: bool, f: u16) -> (Ipv4Addr, u16) {
    if gbr {
        (Ipv4Addr::new(198, 51, 100, 10 + low8(f.into())), 5000 + f)
    } else {
        (Ipv4Addr::new(203, 0, 113, 10 + low8(f.into())), 443)
    }
}

#[cfg(test)]
fn sdf(text: &str) -> SdfFilter {
    SdfFilter {
        flow: Some(FlowDescription::parse(text).expect("valid profile filter")),
        ..Default::default()
    }
}

#[cfg(test)]
fn pdr(id: u16, prec: u32, pdi: Pdi, far: u32, qers: &[u32], urr: u32, ohr: bool) -> Pdr {
    Pdr {
        id: PdrId(id),
        precedence: Precedence(prec),
        pdi,
        outer_header_removal: ohr.then_some(OuterHeaderRemoval::GtpuUdpIp {
            delete_pdu_session_container: false,
        }),
        far: Some(FarId(far)),
        qers: qers.iter().map(|&q| QerId(q)).collect(),
        urrs: [UrrId(urr)].into_iter().collect(),
    }
}

/// The S0 session of UE `i`, as issue #4 hard-coded it (the reference `profiles/s0.toml` is
/// checked against): 4 PDRs (GBR and default bearer, each way; the GBR PDRs carry
/// the bearer's 4 flows as SDF filters), 2 FARs, 3 QERs (session AMBR, GBR flow, default
/// flow), 1 URR (volume, with a threshold no test run reaches).
#[cfg(test)]
pub fn s0_session(i: u32) -> Arc<Session> {
    let ue = ue_addr(i);
    let mut s = Session::new(
        Seid(u64::from(i) + 1),
        Seid(u64::from(i) + 1),
        IpAddr::V4(UPF_N3),
    );
    let fteid = LocalFTeid {
        teid: Teid(ue_teid(i)),
        ipv4: Some(UPF_N3),
        ipv6: None,
    };
    let ue_ip = |dst| UeIp {
        ipv4: Some(ue),
        ipv6: None,
        is_destination: dst,
    };
    let gbr_filters: Vec<SdfFilter> = (0..FLOWS_PER_BEARER)
        .map(|f| {
            let (a, port) = server(true, f);
            sdf(&format!("permit out 17 from {a} {port} to assigned"))
        })
        .collect();
    let mut ul_gbr = Pdi::any(Interface::Access);
    ul_gbr.local_f_teid = Some(fteid);
    ul_gbr.ue_ip = Some(ue_ip(false));
    ul_gbr.qfis = [Qfi(1)].into_iter().collect();
    ul_gbr.sdf_filters = gbr_filters.clone().into_iter().collect();
    let mut ul_def = Pdi::any(Interface::Access);
    ul_def.local_f_teid = Some(fteid);
    ul_def.ue_ip = Some(ue_ip(false));
    let mut dl_gbr = Pdi::any(Interface::Core);
    dl_gbr.ue_ip = Some(ue_ip(true));
    dl_gbr.sdf_filters = gbr_filters.into_iter().collect();
    let mut dl_def = Pdi::any(Interface::Core);
    dl_def.ue_ip = Some(ue_ip(true));
    s.pdrs = vec![
        pdr(1, 10, ul_gbr, 1, &[1, 2], 1, true),
        pdr(2, 255, ul_def, 1, &[1, 3], 1, true),
        pdr(3, 10, dl_gbr, 2, &[1, 2], 1, false),
        pdr(4, 255, dl_def, 2, &[1, 3], 1, false),
    ];
    s.fars = vec![
        Far {
            id: FarId(1),
            action: ApplyAction::FORW,
            forwarding: Some(Forwarding::to(Interface::Core)),
            duplicating: Box::default(),
            bar: None,
        },
        Far {
            id: FarId(2),
            action: ApplyAction::FORW,
            forwarding: Some(Forwarding {
                outer_header_creation: Some(OuterHeaderCreation::Gtpu {
                    teid: Teid(0x2000_0000 + i),
                    peer: IpAddr::V4(gnb_addr(i)),
                }),
                ..Forwarding::to(Interface::Access)
            }),
            duplicating: Box::default(),
            bar: None,
        },
    ];
    // Rates high enough that the benchmark measures the work, not the policing.
    let rate = |kbps| Bitrate {
        uplink_kbps: kbps,
        downlink_kbps: kbps,
    };
    let mut ambr = Qer::open(QerId(1));
    ambr.mbr = Some(rate(100_000_000));
    let mut gbr = Qer::open(QerId(2));
    gbr.qfi = Some(Qfi(1));
    gbr.gbr = Some(rate(10_000));
    gbr.mbr = Some(rate(100_000_000));
    let mut def = Qer::open(QerId(3));
    def.qfi = Some(Qfi(9));
    def.mbr = Some(rate(100_000_000));
    s.qers = vec![ambr, gbr, def];
    let mut urr = Urr::new(UrrId(1));
    urr.triggers = ReportingTriggers::VOLTH;
    urr.volume_threshold = Some(VolumeLimit {
        total: Some(u64::MAX / 2),
        ..Default::default()
    });
    s.urrs = vec![urr];
    Arc::new(s)
}

/// IPv4/UDP packet of `size` octets in all.
pub fn udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, size: usize) -> Vec<u8> {
    udp4_tos(src, dst, sport, dport, size, 0)
}

/// IPv4/UDP packet of `size` octets in all with ToS octet `tos`.
pub fn udp4_tos(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    size: usize,
    tos: u8,
) -> Vec<u8> {
    let size = size.max(28);
    let mut v = vec![0u8; size];
    v[0] = 0x45;
    v[1] = tos;
    v[2..4].copy_from_slice(&u16::try_from(size).unwrap_or(u16::MAX).to_be_bytes());
    v[8] = 64;
    v[9] = ip_proto::UDP;
    v[12..16].copy_from_slice(&src.octets());
    v[16..20].copy_from_slice(&dst.octets());
    let c = checksum::checksum(&v[..20]);
    v[10..12].copy_from_slice(&c.to_be_bytes());
    v[20..22].copy_from_slice(&sport.to_be_bytes());
    v[22..24].copy_from_slice(&dport.to_be_bytes());
    v[24..26].copy_from_slice(&u16::try_from(size - 20).unwrap_or(u16::MAX).to_be_bytes());
    v
}

/// An S0 packet of UE `i`, flow `f` (0..8: the first 4 on the GBR bearer), `size` octets of
/// inner IP: a G-PDU on N3 for uplink, plain IP on N6 for downlink.
#[cfg(test)]
pub fn s0_packet(i: u32, f: u16, uplink: bool, size: usize) -> Packet {
    let gbr = f < FLOWS_PER_BEARER;
    let (srv, sport) = server(gbr, f % FLOWS_PER_BEARER);
    let ue = ue_addr(i);
    let ue_port = 40000 + f;
    if !uplink {
        return Packet::from_bytes(Port::N6, &udp4(srv, ue, sport, ue_port, size)).expect("fits");
    }
    let inner = udp4(ue, srv, ue_port, sport, size);
    let mut p = Packet::from_bytes(Port::N3, &inner).expect("fits");
    let (s, l) = (p.start(), p.len());
    let tunnel = GtpuTunnel {
        teid: ue_teid(i),
        src_port: 2152,
        dst_port: 2152,
        psc: Some(PduSessionContainer::ul(if gbr { 1 } else { 9 })),
        ttl: 64,
        dscp: 0,
        ecn: 0,
    };
    let params = EncapV4 {
        src: gnb_addr(i),
        dst: UPF_N3,
        ident: 0,
        dont_frag: false,
        tunnel,
    };
    let start = encapsulate_gtpu_v4(p.buffer_mut(), s, l, &params).expect("headroom");
    p.set_range(start, s + l);
    p
}

/// `n` uplink-validation rules in the IPFilterRule form operators write: deny rules for
/// destinations in 100.64.0.0/10 (never the profile's servers), with prefix lengths from /16
/// to /32 and a third of them for one protocol and port, so that every packet is checked
/// against all of them and passes.
pub fn acl_rules(n: usize) -> String {
    acl_rules_near(n, None)
}

/// [`acl_rules`], or with `near` their destinations in its /8 instead (none holding `near`
/// itself): packets to `near` then probe the tables (its /16 is reached), and pass.
pub fn acl_rules_near(n: usize, near: Option<Ipv4Addr>) -> String {
    let (base, free) = match near {
        Some(a) => (u32::from(a) & 0xff00_0000, 0x00ff_ffff),
        None => (0x6440_0000, 0x003f_ffff),
    };
    let mut text = String::new();
    let mut x: u32 = 0x2545_f491;
    let mut i = 0;
    while i < n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let len = 16 + x % 17;
        let mask = u32::MAX << (32 - len);
        let net = (base | (x >> 10) & free) & mask;
        if near.is_some_and(|a| u32::from(a) & mask == net) {
            continue;
        }
        let a = Ipv4Addr::from(net);
        let line = match i % 3 {
            0 => format!(
                "deny in udp from any to {a}/{len} {}\n",
                1024 + (x >> 4) % 60000
            ),
            1 => format!("deny in tcp from any to {a}/{len}\n"),
            _ => format!("deny in ip from any to {a}/{len}\n"),
        };
        text.push_str(&line);
        i += 1;
    }
    text
}

/// A draw from the caller's random source: a number below `n`.
pub type Draw<'a> = &'a mut dyn FnMut(u64) -> u64;

/// A mix entry compiled: cumulative weight, direction, size, bearer index.
#[derive(Debug, Clone, Copy)]
struct Kind {
    upto: f64,
    uplink: bool,
    size: usize,
    bearer: Option<usize>,
}

/// A profile compiled for the in-memory topology: sessions and packets of one point.
#[derive(Debug, Clone)]
pub struct Workload {
    bearers: Vec<spec::Bearer>,
    ambr_kbps: Option<u64>,
    /// Session `i`'s AMBR is `ambr_kbps + i` (see [`Workload::own_ambr`]).
    own_ambr: bool,
    urr: bool,
    gnbs: u32,
    /// Index of the first flow of each bearer among the session's flows.
    first_flow: Vec<u16>,
    flows: u16,
    mix: Option<(String, Vec<Kind>, f64)>,
    peak: Option<Peak>,
}

#[derive(Debug, Clone)]
struct Peak {
    ue: u32,
    session: Arc<Session>,
    /// Share of packets, in 1/10,000.
    share: u64,
}

impl Workload {
    /// The workload of profile `p` with `sessions` background sessions, measuring mix `mix`
    /// (else fixed sizes), with the first filtered bearer's flows set to `sdf_filters`.
    pub fn new(
        p: &spec::Profile,
        mix: Option<&str>,
        sessions: u32,
        sdf_filters: Option<u16>,
    ) -> anyhow::Result<Workload> {
        let mut bearers = p.bearers.clone();
        if let Some(n) = sdf_filters {
            let b = bearers
                .iter_mut()
                .find(|b| b.sdf_filters)
                .context("--sdf-filters: no bearer of the profile has sdf_filters")?;
            if n == 0 || n > 200 {
                bail!("--sdf-filters must be 1..=200");
            }
            b.flows = n;
        }
        let mut first_flow = Vec::new();
        let mut flows = 0u16;
        for b in &bearers {
            first_flow.push(flows);
            flows += b.flows;
        }
        let mix = match mix {
            None => None,
            Some(name) => {
                let m = p
                    .mixes
                    .iter()
                    .find(|m| m.name == name)
                    .with_context(|| format!("profile {} has no mix {name:?}", p.name))?;
                let mut upto = 0.0;
                let kinds = m
                    .packets
                    .iter()
                    .map(|e| {
                        upto += e.weight;
                        Kind {
                            upto,
                            uplink: e.dir == spec::Dir::Ul,
                            size: e.size,
                            bearer: e
                                .bearer
                                .as_ref()
                                .and_then(|n| bearers.iter().position(|b| &b.name == n)),
                        }
                    })
                    .collect();
                Some((m.name.clone(), kinds, upto))
            }
        };
        let mut w = Workload {
            bearers,
            ambr_kbps: p.sessions.ambr_kbps,
            own_ambr: false,
            urr: p.sessions.urr,
            gnbs: p.sessions.gnbs,
            first_flow,
            flows,
            mix,
            peak: None,
        };
        if let Some(pk) = &p.peak_ue {
            let mut b = p.bearers.last().cloned().context("no bearer")?;
            b.flows = pk.flows;
            let session = build_session(sessions, &[b], pk.mbr_kbps, w.urr, w.gnbs);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let share = (pk.packet_percent * 100.0).round() as u64;
            w.peak = Some(Peak {
                ue: sessions,
                session,
                share,
            });
        }
        Ok(w)
    }

    /// Gives each session an AMBR of its own value (the profile's plus its index, kbit/s),
    /// so that no two share a policy: the worst case for the pipeline's shared shapes.
    pub fn own_ambr(mut self, on: bool) -> Self {
        self.own_ambr = on;
        self
    }

    /// The session of background UE `i`.
    pub fn session(&self, i: u32) -> Arc<Session> {
        let own = if self.own_ambr { u64::from(i) } else { 0 };
        let ambr = self.ambr_kbps.map(|a| a + own);
        build_session(i, &self.bearers, ambr, self.urr, self.gnbs)
    }

    /// The peak UE and its session, installed on every worker.
    pub fn peak(&self) -> Option<(u32, Arc<Session>)> {
        self.peak.as_ref().map(|p| (p.ue, p.session.clone()))
    }

    /// Name and mean size of the mix measured, if any.
    pub fn mix(&self) -> Option<(&str, f64)> {
        self.mix.as_ref().map(|(n, kinds, total)| {
            let mut prev = 0.0;
            let bytes: f64 = kinds
                .iter()
                .map(|k| {
                    let w = k.upto - prev;
                    prev = k.upto;
                    w * k.size as f64
                })
                .sum();
            (n.as_str(), bytes / total)
        })
    }

    /// The UE the next packet of a round carries: the peak UE for its share, else one of
    /// `ues` at random.
    pub fn draw_ue(&self, r: Draw<'_>, ues: &[u32]) -> u32 {
        if let Some(p) = &self.peak {
            if r(10_000) < p.share {
                return p.ue;
            }
        }
        ues[usize::try_from(r(ues.len() as u64)).unwrap_or(0)]
    }

    /// A packet of UE `ue`: of the mix if there is one, else `size` octets, uplink for
    /// `uplink_percent` of the packets, on a flow drawn over all the session's flows.
    /// Returns the packet and whether it is uplink.
    pub fn packet(&self, r: Draw<'_>, ue: u32, size: usize, uplink_percent: f64) -> (Packet, bool) {
        let (bearer, flow, uplink, size) = match &self.mix {
            None => {
                let flow = u16::try_from(r(u64::from(self.flows))).unwrap_or(0);
                #[allow(clippy::cast_precision_loss)]
                let uplink = (r(10_000) as f64) < uplink_percent * 100.0;
                (self.bearer_of(flow), flow, uplink, size)
            }
            Some((_, kinds, total)) => {
                #[allow(clippy::cast_precision_loss)]
                let x = r(1 << 32) as f64 / (1u64 << 32) as f64 * total;
                let k = kinds
                    .iter()
                    .find(|k| x < k.upto)
                    .unwrap_or(&kinds[kinds.len() - 1]);
                let (b, flow) = match k.bearer {
                    Some(b) => {
                        let f = u16::try_from(r(u64::from(self.bearers[b].flows))).unwrap_or(0);
                        (b, self.first_flow[b] + f)
                    }
                    None => {
                        let flow = u16::try_from(r(u64::from(self.flows))).unwrap_or(0);
                        (self.bearer_of(flow), flow)
                    }
                };
                (b, flow, k.uplink, k.size)
            }
        };
        let b = &self.bearers[bearer];
        let f = flow - self.first_flow[bearer];
        let (srv, sport) = server_of(bearer, b, f);
        let tos = b.dscp.map_or(0, |d| d << 2);
        let p = ip_packet(
            ue,
            srv,
            sport,
            40000 + flow,
            uplink,
            size,
            tos,
            b.qfi,
            self.gnbs,
        );
        (p, uplink)
    }

    fn bearer_of(&self, flow: u16) -> usize {
        self.first_flow
            .iter()
            .rposition(|&f| f <= flow)
            .unwrap_or(0)
    }
}

/// Server side of flow `f` of bearer `k`: a filtered bearer's flows go to
/// 198.51.(100+k).(10+f) ports 5000+f; others to 203.0.113.(10+f) port 443.
fn server_of(k: usize, b: &spec::Bearer, f: u16) -> (Ipv4Addr, u16) {
    if b.sdf_filters {
        (
            Ipv4Addr::new(
                198,
                51,
                100 + low8(u32::try_from(k).unwrap_or(0)),
                10 + low8(f.into()),
            ),
            5000 + f,
        )
    } else {
        (Ipv4Addr::new(203, 0, 113, 10 + low8(f.into())), 443)
    }
}

/// The session of UE `i` with `bearers` (the last one the default bearer): per bearer an
/// uplink and a downlink PDR (uplink ones first), FAR 1 (to N6) and 2 (GTP-U to the UE's
/// gNB), QER 1 the session AMBR (if any) and QER 2+k bearer k's, URR 1 on every PDR (if any).
fn build_session(
    i: u32,
    bearers: &[spec::Bearer],
    ambr_kbps: Option<u64>,
    urr: bool,
    gnbs: u32,
) -> Arc<Session> {
    let ue = ue_addr(i);
    let mut s = Session::new(
        Seid(u64::from(i) + 1),
        Seid(u64::from(i) + 1),
        IpAddr::V4(UPF_N3),
    );
    let fteid = LocalFTeid {
        teid: Teid(ue_teid(i)),
        ipv4: Some(UPF_N3),
        ipv6: None,
    };
    let ue_ip = |dst| UeIp {
        ipv4: Some(ue),
        ipv6: None,
        is_destination: dst,
    };
    let n = bearers.len();
    // Bearers are few (the profile has a handful): their index fits every id type.
    let k32 = |k: usize| u32::try_from(k).unwrap_or(u32::MAX / 16);
    let mut ul = Vec::new();
    let mut dl = Vec::new();
    for (k, b) in bearers.iter().enumerate() {
        let default = k + 1 == n;
        let prec = if default { 255 } else { 10 + 10 * k32(k) };
        let tos = b.dscp.map(|d| (d << 2, 0xfc));
        let mut filters: Vec<SdfFilter> = Vec::new();
        if b.sdf_filters {
            for f in 0..b.flows {
                let (a, port) = server_of(k, b, f);
                filters.push(SdfFilter {
                    flow: Some(
                        FlowDescription::parse(&format!(
                            "permit out 17 from {a} {port} to assigned"
                        ))
                        .expect("valid profile filter"),
                    ),
                    ..Default::default()
                });
            }
        }
        let mut u = Pdi::any(Interface::Access);
        u.local_f_teid = Some(fteid);
        u.ue_ip = Some(ue_ip(false));
        if !default {
            u.qfis = [Qfi(b.qfi)].into_iter().collect();
        }
        u.sdf_filters = filters.clone().into_iter().collect();
        let mut d = Pdi::any(Interface::Core);
        d.ue_ip = Some(ue_ip(true));
        d.sdf_filters = match tos {
            None => filters.into_iter().collect(),
            Some(t) if filters.is_empty() => [SdfFilter {
                tos: Some(t),
                ..Default::default()
            }]
            .into_iter()
            .collect(),
            Some(t) => filters
                .into_iter()
                .map(|f| SdfFilter { tos: Some(t), ..f })
                .collect(),
        };
        let qer = 2 + k32(k);
        let qers: Vec<u32> = ambr_kbps.map(|_| 1).into_iter().chain([qer]).collect();
        let id = u16::try_from(k + 1).unwrap_or(u16::MAX);
        let urr_id = if urr { Some(1) } else { None };
        ul.push(pdr_of(id, prec, u, 1, &qers, urr_id, true));
        dl.push(pdr_of(
            id + u16::try_from(n).unwrap_or(0),
            prec,
            d,
            2,
            &qers,
            urr_id,
            false,
        ));
    }
    s.pdrs = ul.into_iter().chain(dl).collect();
    s.fars = vec![
        Far {
            id: FarId(1),
            action: ApplyAction::FORW,
            forwarding: Some(Forwarding::to(Interface::Core)),
            duplicating: Box::default(),
            bar: None,
        },
        Far {
            id: FarId(2),
            action: ApplyAction::FORW,
            forwarding: Some(Forwarding {
                outer_header_creation: Some(OuterHeaderCreation::Gtpu {
                    teid: Teid(0x2000_0000 + i),
                    peer: IpAddr::V4(gnb_of(i, gnbs)),
                }),
                ..Forwarding::to(Interface::Access)
            }),
            duplicating: Box::default(),
            bar: None,
        },
    ];
    let rate = |kbps| Bitrate {
        uplink_kbps: kbps,
        downlink_kbps: kbps,
    };
    let mut qers = Vec::new();
    if let Some(a) = ambr_kbps {
        let mut q = Qer::open(QerId(1));
        q.mbr = Some(rate(a));
        qers.push(q);
    }
    for (k, b) in bearers.iter().enumerate() {
        let mut q = Qer::open(QerId(2 + k32(k)));
        q.qfi = Some(Qfi(b.qfi));
        q.gbr = b.gbr_kbps.map(rate);
        q.mbr = b.mbr_kbps.map(rate);
        qers.push(q);
    }
    s.qers = qers;
    if urr {
        let mut u = Urr::new(UrrId(1));
        u.triggers = ReportingTriggers::VOLTH;
        u.volume_threshold = Some(VolumeLimit {
            total: Some(u64::MAX / 2),
            ..Default::default()
        });
        s.urrs = vec![u];
    }
    Arc::new(s)
}

fn pdr_of(
    id: u16,
    prec: u32,
    pdi: Pdi,
    far: u32,
    qers: &[u32],
    urr: Option<u32>,
    ohr: bool,
) -> Pdr {
    Pdr {
        id: PdrId(id),
        precedence: Precedence(prec),
        pdi,
        outer_header_removal: ohr.then_some(OuterHeaderRemoval::GtpuUdpIp {
            delete_pdu_session_container: false,
        }),
        far: Some(FarId(far)),
        qers: qers.iter().map(|&q| QerId(q)).collect(),
        urrs: urr.map(UrrId).into_iter().collect(),
    }
}

/// One of `gnbs` gNBs, by UE: 192.0.2.100 onwards (past 192.0.2.255 into 192.0.3.0; issue
/// #4's version wrapped around within the octet, onto the UPF's own 192.0.2.1 for UE 157).
pub fn gnb_of(i: u32, gnbs: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(192, 0, 2, 100)) + i % gnbs.max(1))
}

/// A packet of UE `i` to/from `srv`:`sport` from UE port `ue_port`, `size` octets of inner
/// IP with ToS `tos`: a G-PDU on N3 with an uplink PSC of QFI `qfi` for uplink, plain IP on
/// N6 for downlink.
#[allow(clippy::too_many_arguments)]
fn ip_packet(
    i: u32,
    srv: Ipv4Addr,
    sport: u16,
    ue_port: u16,
    uplink: bool,
    size: usize,
    tos: u8,
    qfi: u8,
    gnbs: u32,
) -> Packet {
    let ue = ue_addr(i);
    if !uplink {
        return Packet::from_bytes(Port::N6, &udp4_tos(srv, ue, sport, ue_port, size, tos))
            .expect("fits");
    }
    let inner = udp4(ue, srv, ue_port, sport, size);
    let mut p = Packet::from_bytes(Port::N3, &inner).expect("fits");
    let (s, l) = (p.start(), p.len());
    let tunnel = GtpuTunnel {
        teid: ue_teid(i),
        src_port: 2152,
        dst_port: 2152,
        psc: Some(PduSessionContainer::ul(qfi)),
        ttl: 64,
        dscp: 0,
        ecn: 0,
    };
    let params = EncapV4 {
        src: gnb_of(i, gnbs),
        dst: UPF_N3,
        ident: 0,
        dont_frag: false,
        tunnel,
    };
    let start = encapsulate_gtpu_v4(p.buffer_mut(), s, l, &params).expect("headroom");
    p.set_range(start, s + l);
    p
}
