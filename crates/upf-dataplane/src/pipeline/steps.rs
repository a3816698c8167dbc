//! The steps of a matched PDR's rules, FAR → QER → URR → encapsulation, written once for
//! both paths: the general one over a compiled session and the hot one over a record and
//! its shape, each of which shows its rules through [`Rules`].

use super::{drop_to, Output, GTPU_PORT};
use crate::acl::AclAction;
use crate::counters::{Counters, DropReason};
use crate::fast::{Template, Tunnel};
use crate::parse::route_hop;
use crate::session::{QerState, Target};
use upf_packet::{Packet, Port};
use upf_wire::encap::{encapsulate_gtpu_v4, encapsulate_gtpu_v6, EncapV4, EncapV6, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;
use upf_wire::ipv6;

/// What the outer header marks.
pub(super) struct Mark {
    pub qfi: Option<u8>,
    pub rqi: bool,
    pub ppi: Option<u8>,
}

/// A yes-or-no fact of a matched PDR and its FAR, asked by [`Rules::is`].
#[derive(Clone, Copy)]
pub(super) enum Is {
    /// The FAR sends towards the UE (Access): the outer QFI is the QERs' before the
    /// packet's, and the container a downlink one with RQI.
    ToAccess,
    /// The PDR's Outer Header Removal strips GTP-U: the inner packet is what is forwarded.
    Stripping,
    /// The PDR's packets come from the UE (uplink).
    Uplink,
}

/// The rules of a matched PDR whose FAR forwards, as one path holds them. Each method is
/// one step's question or action; [`forward`] asks them in the order that makes the
/// semantics.
pub(super) trait Rules {
    /// The FAR's egress port and (on N6) network instance; `None`: it has no forwarding
    /// target.
    fn egress(&self) -> Option<(Port, u8)>;
    /// A yes-or-no fact of the PDR and its FAR.
    fn is(&self, what: Is) -> bool;
    /// A QER of the PDR has its gate closed in the packet's direction.
    fn gate_shut(&self) -> bool;
    /// Every MBR bucket of the PDR's QERs in the packet's direction has room for `bits`.
    fn conforms(&mut self, clock: u64, bits: u64) -> bool;
    /// A URR of the PDR has exhausted its quota.
    fn exhausted(&self) -> bool;
    /// Takes one packet from every packet-rate bucket of the PDR's QERs in the packet's
    /// direction, and `bits` from every shared bucket they draw on, if each has room;
    /// nothing taken, and why, if one has none. A PDR without a packet rate or a shared
    /// bucket answers `Ok` at the cost of one test.
    fn take_packet(&mut self, clock: u64, bits: u64) -> Result<(), DropReason>;
    /// Takes `bits` from every MBR bucket and adds `octets` to every GBR count.
    fn charge(&mut self, bits: u64, octets: u64);
    /// Counts the packet in every URR of the PDR (a report, or the exact check, as each
    /// path has it).
    fn count(&mut self, octets: u64, uplink: bool);
    /// The packet is dropped by a QER (gate, MBR, packet rate): counted in the URRs that
    /// measure before QoS enforcement (MBQE). Only the general path has such URRs.
    #[inline(always)]
    fn qos_dropped(&mut self, _octets: u64) {}
    /// What the PDR's QERs mark: the first QFI, RQI if any sets it, the first PPI.
    fn marks(&self) -> Mark;
    /// The FAR's duplication targets.
    fn dups(&self) -> &[Target];
    /// Encapsulates `p[ds..de]` for the FAR's target, or trims the packet to it; `false`
    /// when the header does not fit.
    fn encap(&self, p: &mut Packet, ds: usize, de: usize, m: &Mark, ttl: u8, id: &mut u16) -> bool;
}

/// What [`forward`] writes besides the packet.
pub(super) struct Sink<'a> {
    pub out: &'a mut Output,
    pub counters: &'a mut Counters,
    /// The IPv4 identification of the headers this worker writes.
    pub ident: &'a mut u16,
    /// TTL / Hop Limit of outer headers.
    pub ttl: u8,
    /// The meters' clock ([`super::Pipeline::clock`]).
    pub clock: u64,
}

/// Uplink traffic validation: a packet matched to a PDR whose packets come from the UE must
/// pass the uplink ACL (`check`, asked only then).
#[inline(always)]
pub(super) fn admit(from_ue: bool, check: impl FnOnce() -> AclAction) -> Result<(), DropReason> {
    if from_ue && check() == AclAction::Deny {
        Err(DropReason::AclDenied)
    } else {
        Ok(())
    }
}

/// The rules `r` of a packet's matched PDR, whose FAR forwards, applied to it: the routed
/// hop, QERs, URRs, duplication, encapsulation. `inner`: the inner IP packet's place in the
/// buffer (what URRs count); `qfi_in`: the QFI it arrived with. Returns it to send (counted
/// as sent), or `None` with the drop counted.
#[inline(always)]
pub(super) fn forward<R: Rules>(
    r: &mut R,
    mut p: Packet,
    inner: (usize, usize),
    qfi_in: Option<u8>,
    k: Sink<'_>,
) -> Option<Packet> {
    // Where it goes and the routed hop come before QER and URR: a packet dropped for
    // want of a target or for its TTL must neither take MBR tokens nor be charged.
    let Some((egress, instance)) = r.egress() else {
        return drop_to(k.out, k.counters, p, DropReason::NoForwardingTarget);
    };
    let (ds, de) = if r.is(Is::Stripping) {
        inner
    } else {
        (p.start(), p.start() + p.len())
    };
    // A routed hop when the packet enters or leaves N6.
    if (egress == Port::N6 || p.port() == Port::N6)
        && !route_hop(p.buffer_mut().get_mut(ds..de).unwrap_or(&mut []))
    {
        return drop_to(k.out, k.counters, p, DropReason::TtlExpired);
    }
    let octets = (inner.1 - inner.0) as u64;
    let bits = octets * 8;
    // Every gate before any MBR: a closed gate drops the packet whatever the rates.
    if r.gate_shut() {
        r.qos_dropped(octets);
        return drop_to(k.out, k.counters, p, DropReason::GateClosed);
    }
    // Every bucket conforms, and no quota is exhausted, before any is charged.
    if !r.conforms(k.clock, bits) {
        r.qos_dropped(octets);
        return drop_to(k.out, k.counters, p, DropReason::MbrExceeded);
    }
    if r.exhausted() {
        return drop_to(k.out, k.counters, p, DropReason::QuotaExhausted);
    }
    // The packet rates and shared buckets last, as they take the packet at once: a packet
    // dropped for the MBR or the quota counts against no packet rate, and one dropped here
    // takes no MBR.
    if let Err(why) = r.take_packet(k.clock, bits) {
        r.qos_dropped(octets);
        return drop_to(k.out, k.counters, p, why);
    }
    r.charge(bits, octets);
    r.count(octets, r.is(Is::Uplink));
    let marks = r.marks();
    let mark = Mark {
        qfi: if r.is(Is::ToAccess) {
            marks.qfi.or(qfi_in)
        } else {
            qfi_in.or(marks.qfi)
        },
        ..marks
    };
    let dups = r.dups();
    if !dups.is_empty() {
        let data = p.data_at(ds, de);
        duplicate(k.out, k.counters, data, dups, &mark, k.ttl, k.ident);
    }
    p.set_egress(egress, instance);
    if !r.encap(&mut p, ds, de, &mark, k.ttl, k.ident) {
        return drop_to(k.out, k.counters, p, DropReason::EncapFailed);
    }
    k.counters.tx(p.port(), p.len());
    Some(p)
}

/// [`Rules::take_packet`] over the QERs `which` (slots in `qers`) of a PDR with a packet
/// rate or a shared bucket, in direction `uplink`: every bucket is asked before any is
/// taken. Out of line: a packet rate is at most 65,535 packets a minute, so the packets that
/// come here for one are few; those of a session drawing on shared buckets (on several
/// workers, or with a QER Correlation ID) pay the call.
#[inline(never)]
pub(super) fn take_packets(
    qers: &mut [QerState],
    which: &[u16],
    uplink: bool,
    clock: u64,
    bits: u64,
) -> Result<(), DropReason> {
    for &q in which {
        let Some(q) = qers.get_mut(usize::from(q)) else {
            continue;
        };
        if let Some(b) = q.packets(uplink) {
            if !b.conforms(clock) {
                return Err(DropReason::PacketRateExceeded);
            }
        }
        if let Some(d) = q.draws.as_deref_mut() {
            if !d.conforms(clock, uplink, bits) {
                return Err(DropReason::MbrExceeded);
            }
            if let Some(p) = d.packets(uplink) {
                if !p.conforms(clock, 1) {
                    return Err(DropReason::PacketRateExceeded);
                }
            }
        }
    }
    for &q in which {
        let Some(q) = qers.get_mut(usize::from(q)) else {
            continue;
        };
        if let Some(b) = q.packets(uplink) {
            b.take();
        }
        if let Some(d) = q.draws.as_deref_mut() {
            d.take(uplink, bits);
            if let Some(p) = d.packets(uplink) {
                p.take(1);
            }
        }
    }
    Ok(())
}

/// The outer ECN of a tunnel around the IP packet `ip`: RFC 6040 normal mode copies the
/// inner.
#[inline(always)]
fn ecn_of(ip: &[u8]) -> u8 {
    match ip.first().map(|v| v >> 4) {
        Some(4) => ip.get(1).copied().unwrap_or(0) & 3,
        Some(6) => ipv6::Packet::new_unchecked(ip).traffic_class() & 3,
        _ => 0,
    }
}

/// The octet of a one-word PDU Session Container marking QFI `q`: RQI too towards the UE.
#[inline(always)]
pub(super) fn psc_octet(q: u8, rqi: bool, to_access: bool) -> u8 {
    if to_access {
        (u8::from(rqi) << 6) | (q & 0x3f)
    } else {
        q & 0x3f
    }
}

/// Writes the IPv4 GTP-U header `t` (its peer and TEID from `tunnel` when the template is a
/// shape's) in front of `p[ds..de]`, with the container octet `octet` if `t` has one.
#[inline(always)]
pub(super) fn write_v4(
    p: &mut Packet,
    (ds, de): (usize, usize),
    t: &Template,
    octet: u8,
    tunnel: Option<&Tunnel>,
    ident: &mut u16,
) -> bool {
    let ecn = ecn_of(p.data_at(ds, de));
    *ident = ident.wrapping_add(1);
    match t.write(p.buffer_mut(), ds, de, *ident, ecn, octet, tunnel) {
        Some(start) => {
            p.set_range(start, de);
            true
        }
        None => false,
    }
}

/// Sends a copy of `data` (an IP packet) to each duplication target.
pub(super) fn duplicate(
    out: &mut Output,
    counters: &mut Counters,
    data: &[u8],
    dups: &[Target],
    mark: &Mark,
    ttl: u8,
    ident: &mut u16,
) {
    for d in dups {
        let mut c = out.free.pop().unwrap_or_else(|| Packet::new(d.port));
        if c.load(d.port, data) {
            let (cs, ce) = (c.start(), c.start() + c.len());
            if emit(&mut c, cs, ce, d, mark, ttl, ident) {
                counters.created += 1;
                counters.tx(c.port(), c.len());
                out.tx.push(c);
                continue;
            }
        }
        out.free.push(c);
    }
}

/// Encapsulates `p[ds..de]` for `t` (or just trims to it).
#[inline]
pub(super) fn emit(
    p: &mut Packet,
    ds: usize,
    de: usize,
    t: &Target,
    m: &Mark,
    ttl: u8,
    ident: &mut u16,
) -> bool {
    let Some(tun) = t.encap else {
        p.set_range(ds, de);
        return true;
    };
    // The common case: an IPv4 tunnel and a one-word container (no PPI).
    if let (Some([plain, with_psc]), None) = (&t.templates, m.ppi) {
        return match m.qfi {
            None => write_v4(p, (ds, de), plain, 0, None, ident),
            Some(q) => write_v4(
                p,
                (ds, de),
                with_psc,
                psc_octet(q, m.rqi, t.to_access),
                None,
                ident,
            ),
        };
    }
    let ecn = ecn_of(p.data_at(ds, de));
    let psc = m.qfi.map(|q| {
        if t.to_access {
            PduSessionContainer {
                rqi: m.rqi,
                ppi: m.ppi,
                ..PduSessionContainer::dl(q & 0x3f)
            }
        } else {
            PduSessionContainer::ul(q & 0x3f)
        }
    });
    let tunnel = GtpuTunnel {
        teid: tun.teid,
        src_port: GTPU_PORT,
        dst_port: GTPU_PORT,
        psc,
        ttl,
        dscp: t.tos.map_or(0, |tos| tos >> 2),
        ecn,
    };
    let buf = p.buffer_mut();
    let start = if tun.dst.v6 {
        encapsulate_gtpu_v6(
            buf,
            ds,
            de - ds,
            &EncapV6 {
                src: tun.src.to_ip6(),
                dst: tun.dst.to_ip6(),
                flow_label: 0,
                tunnel,
            },
        )
    } else {
        *ident = ident.wrapping_add(1);
        encapsulate_gtpu_v4(
            buf,
            ds,
            de - ds,
            &EncapV4 {
                src: tun.src.to_ip4(),
                dst: tun.dst.to_ip4(),
                ident: *ident,
                dont_frag: false,
                tunnel,
            },
        )
    };
    match start {
        Ok(s) => {
            p.set_range(s, de);
            true
        }
        Err(_) => false,
    }
}
