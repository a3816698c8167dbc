//! SDF filters compiled for the fast path: addresses as masked integers, the UE side of each
//! rule resolved the way the reference matcher (`upf_rules::SdfFilter::matches`) resolves it,
//! which the property tests hold this code to.

use crate::flow::{Addr, Flow, Flow4, Prefix};
use smallvec::SmallVec;
use upf_rules::sdf::{Action, Address, Direction, Endpoint};
use upf_rules::SdfFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddrMatch {
    Any,
    /// `assigned`: the UE's address.
    Assigned,
    /// A prefix; `None` when the text named an impossible prefix (matches nothing).
    Prefix(Option<Prefix>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Side {
    addr: AddrMatch,
    negated: bool,
    /// Inclusive ranges; empty: any port.
    ports: SmallVec<[(u16, u16); 1]>,
}

impl Side {
    fn compile(e: &Endpoint) -> Self {
        Self {
            addr: match e.address {
                Address::Any => AddrMatch::Any,
                Address::Assigned => AddrMatch::Assigned,
                Address::Prefix(net, len) => AddrMatch::Prefix(Prefix::new(net, len)),
            },
            negated: e.negated,
            ports: e.ports.iter().map(|r| (r.first, r.last)).collect(),
        }
    }

    /// Whether this side names the UE (`assigned`, or a plain prefix holding `ue`).
    #[inline(always)]
    fn is_ue(&self, ue: Option<Addr>) -> bool {
        match self.addr {
            AddrMatch::Assigned => true,
            AddrMatch::Prefix(p) => {
                !self.negated && ue.is_some_and(|a| p.is_some_and(|p| p.contains(a)))
            }
            AddrMatch::Any => false,
        }
    }

    #[inline(always)]
    fn matches(&self, a: Addr, port: u16, ue: Option<Addr>) -> bool {
        let hit = match self.addr {
            AddrMatch::Any => true,
            AddrMatch::Assigned => ue.is_none_or(|u| u == a),
            AddrMatch::Prefix(p) => p.is_some_and(|p| p.contains(a)),
        };
        hit != self.negated
            && (self.ports.is_empty() || self.ports.iter().any(|&(f, l)| f <= port && port <= l))
    }
}

/// One compiled SDF filter: every present part must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    tos: Option<(u8, u8)>,
    spi: Option<u32>,
    flow_label: Option<u32>,
    flow: Option<FlowMatch>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FlowMatch {
    /// `deny` rules never match (PFCP only uses `permit`).
    permit: bool,
    out: bool,
    proto: Option<u8>,
    from: Side,
    to: Side,
}

impl Filter {
    pub fn compile(f: &SdfFilter) -> Self {
        Self {
            tos: f.tos,
            spi: f.spi,
            flow_label: f.flow_label,
            flow: f.flow.as_ref().map(|d| FlowMatch {
                permit: d.action == Action::Permit,
                out: d.direction == Direction::Out,
                proto: d.protocol,
                from: Side::compile(&d.from),
                to: Side::compile(&d.to),
            }),
        }
    }

    /// `from_ue`: the packet travels from the UE; `ue`: its UE-side address when the PDI
    /// names a UE IP.
    #[inline]
    pub fn matches(&self, p: &Flow, from_ue: bool, ue: Option<Addr>) -> bool {
        if let Some((v, m)) = self.tos {
            if p.tos & m != v & m {
                return false;
            }
        }
        if self.spi.is_some() && p.spi != self.spi {
            return false;
        }
        if self.flow_label.is_some() && p.flow_label != self.flow_label {
            return false;
        }
        let Some(f) = &self.flow else { return true };
        if !f.permit || f.proto.is_some_and(|x| x != p.proto) {
            return false;
        }
        let ue_is_to = if f.to.is_ue(ue) {
            true
        } else if f.from.is_ue(ue) {
            false
        } else {
            f.out
        };
        let (ue_side, remote) = if ue_is_to {
            (&f.to, &f.from)
        } else {
            (&f.from, &f.to)
        };
        let ((ua, up), (ra, rp)) = if from_ue {
            ((p.src, p.src_port), (p.dst, p.dst_port))
        } else {
            ((p.dst, p.dst_port), (p.src, p.src_port))
        };
        ue_side.matches(ua, up, ue) && remote.matches(ra, rp, ue)
    }
}

/// The common case of an SDF filter in 32 octets: IPv4 prefixes (or any), one port range per
/// side, no negation, SPI or flow label, and which side is the UE's resolved at compile time
/// from the PDR's UE address. [`Filter::fast`] says whether a filter has this form; the PDR
/// falls back to the full [`Filter`]s when any of its filters does not.
///
/// Packed in four words so that a packet is matched by a few integer operations and no
/// branch: the addresses as one masked compare of both, the port and protocol ranges as one
/// subtraction each way over lanes with guard bits ([`FastFilter::matches4`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FastFilter {
    /// The UE side's IPv4 network (high half) and the remote side's (low half).
    net: u64,
    mask: u64,
    /// The ranges' lower bounds in lanes ([`lanes`]); the ToS value and mask in the top
    /// octets (above the lanes, so that they never reach a guard bit).
    lo: u64,
    /// The ranges' upper bounds in lanes, each lane's guard bit set; [`ANY_VERSION`].
    hi: u64,
}

/// Lanes of 17 bits, the top one a guard: the remote port's at bit 0, the UE port's at
/// [`UE_PORT`], the protocol's at [`PROTO`] (9 bits). `(x | GUARDS) - lo` keeps a lane's
/// guard bit exactly when its value is at least the bound and never borrows from the next
/// lane; `hi - x` likewise for the upper bound.
const UE_PORT: u32 = 17;
const PROTO: u32 = 34;
const GUARDS: u64 = 1 << 16 | 1 << (UE_PORT + 16) | 1 << (PROTO + 8);
const TOS_VALUE: u32 = 48;
const TOS_MASK: u32 = 56;
/// In `hi`: both addresses are "any", so the filter also matches IPv6 packets.
const ANY_VERSION: u64 = 1 << 63;

/// A packet's ports and protocol in the lanes of [`FastFilter::lo`].
#[inline(always)]
fn lanes(remote_port: u16, ue_port: u16, proto: u8) -> u64 {
    u64::from(remote_port) | u64::from(ue_port) << UE_PORT | u64::from(proto) << PROTO
}

/// The parts of a [`FastFilter`].
struct Parts {
    /// `None`: any protocol.
    proto: Option<u8>,
    tos: (u8, u8),
    ue: (u32, u32),
    remote: (u32, u32),
    any_version: bool,
    ue_ports: (u16, u16),
    remote_ports: (u16, u16),
}

impl FastFilter {
    fn new(p: &Parts) -> Self {
        let (proto_lo, proto_hi) = p.proto.map_or((0, u8::MAX), |v| (v, v));
        let (tos_value, tos_mask) = p.tos;
        Self {
            net: u64::from(p.ue.0) << 32 | u64::from(p.remote.0),
            mask: u64::from(p.ue.1) << 32 | u64::from(p.remote.1),
            lo: lanes(p.remote_ports.0, p.ue_ports.0, proto_lo)
                | u64::from(tos_value & tos_mask) << TOS_VALUE
                | u64::from(tos_mask) << TOS_MASK,
            hi: lanes(p.remote_ports.1, p.ue_ports.1, proto_hi)
                | GUARDS
                | if p.any_version { ANY_VERSION } else { 0 },
        }
    }

    /// Whether the ports, protocol and ToS match (`x`: the packet's [`lanes`]).
    #[inline(always)]
    fn ranges(&self, x: u64, tos: u8) -> bool {
        let inside = ((x | GUARDS).wrapping_sub(self.lo) & self.hi.wrapping_sub(x)) & GUARDS;
        let [.., tos_value, tos_mask] = self.lo.to_le_bytes();
        (inside == GUARDS) & (tos & tos_mask == tos_value)
    }

    #[inline(always)]
    pub fn matches(&self, p: &Flow, from_ue: bool) -> bool {
        let ((ua, up), (ra, rp)) = if from_ue {
            ((p.src, p.src_port), (p.dst, p.dst_port))
        } else {
            ((p.dst, p.dst_port), (p.src, p.src_port))
        };
        let addrs = if ua.v6 {
            self.hi & ANY_VERSION != 0
        } else {
            let a = u64::from(ua.low32()) << 32 | u64::from(ra.low32());
            a & self.mask == self.net
        };
        addrs && self.ranges(lanes(rp, up, p.proto), p.tos)
    }

    /// This filter for a PDR that matched the packet's UE-side address to `ue` already: a
    /// UE-side prefix that holds `ue` then always holds, as `assigned` does, and is left out.
    pub fn given_ue(&self, ue: u32) -> FastFilter {
        let mut f = *self;
        let ue = u64::from(ue) << 32;
        if (ue ^ f.net) & f.mask >> 32 << 32 == 0 {
            f.net &= u64::from(u32::MAX);
            f.mask &= u64::from(u32::MAX);
        }
        f
    }

    /// This filter for a key taken the other way round: `f.flipped()` matches a packet with
    /// `from_ue` turned round as `f` matches it (the UE and remote sides swap places), so a
    /// half can lay out all its PDRs' filters for one orientation of its packets' key.
    pub fn flipped(&self) -> FastFilter {
        const LANE: u64 = (1 << UE_PORT) - 1;
        let ports = |x: u64| {
            (x & !(LANE | LANE << UE_PORT)) | (x & LANE) << UE_PORT | (x >> UE_PORT) & LANE
        };
        Self {
            net: self.net.rotate_left(32),
            mask: self.mask.rotate_left(32),
            lo: ports(self.lo),
            hi: ports(self.hi),
        }
    }

    /// [`FastFilter::matches`] on the IPv4 key, every part compared without a branch: which
    /// of a PDR's filters a packet matches is what a predictor cannot learn.
    #[inline(always)]
    pub fn matches4(&self, p: &Flow4, from_ue: bool) -> bool {
        let ((u, up), (r, rp)) = if from_ue {
            ((p.src, p.src_port), (p.dst, p.dst_port))
        } else {
            ((p.dst, p.dst_port), (p.src, p.src_port))
        };
        let a = u64::from(u) << 32 | u64::from(r);
        (a & self.mask == self.net) & self.ranges(lanes(rp, up, p.proto), p.tos)
    }
}

impl Side {
    /// (net, mask) of an IPv4 or any address that needs no per-packet decision; `None`
    /// otherwise. `assigned` on the UE side always holds once the PDR's UE address matched.
    fn fast_addr(&self, ue_side: bool) -> Option<(u32, u32)> {
        if self.negated {
            return None;
        }
        match self.addr {
            AddrMatch::Any => Some((0, 0)),
            AddrMatch::Assigned if ue_side => Some((0, 0)),
            AddrMatch::Assigned => None,
            AddrMatch::Prefix(Some(p)) if !p.v6 => {
                Some((u32::try_from(p.net).ok()?, u32::try_from(p.mask).ok()?))
            }
            AddrMatch::Prefix(_) => None,
        }
    }

    fn port_ranges(&self) -> SmallVec<[(u16, u16); 1]> {
        if self.ports.is_empty() {
            smallvec::smallvec![(0, u16::MAX)]
        } else {
            self.ports.clone()
        }
    }
}

impl Filter {
    /// This filter as [`FastFilter`]s (one per combination of port ranges), for a PDR whose
    /// UE address is `ue` (IPv4 only, or none); `None` if it needs the full matcher.
    pub fn fast(&self, ue: Option<u32>) -> Option<SmallVec<[FastFilter; 2]>> {
        if self.spi.is_some() || self.flow_label.is_some() {
            return None;
        }
        let (tos_value, tos_mask) = self.tos.map_or((0, 0), |(v, m)| (v & m, m));
        let Some(f) = &self.flow else {
            return Some(smallvec::smallvec![FastFilter::new(&Parts {
                proto: None,
                tos: (tos_value, tos_mask),
                ue: (0, 0),
                remote: (0, 0),
                any_version: true,
                ue_ports: (0, u16::MAX),
                remote_ports: (0, u16::MAX),
            })]);
        };
        if !f.permit {
            return Some(SmallVec::new());
        }
        // Which endpoint is the UE's, decided as `matches` decides it per packet: with an
        // IPv4 UE address the packet's UE-side address is always that address.
        let ue_addr = ue.map(|v| Addr {
            v6: false,
            bits: v.into(),
        });
        let ue_is_to = if f.to.is_ue(ue_addr) {
            true
        } else if f.from.is_ue(ue_addr) {
            false
        } else {
            f.out
        };
        let (us, rs) = if ue_is_to {
            (&f.to, &f.from)
        } else {
            (&f.from, &f.to)
        };
        let (ue_net, ue_mask) = us.fast_addr(true)?;
        let (remote_net, remote_mask) = rs.fast_addr(false)?;
        let any_version = ue_mask == 0
            && remote_mask == 0
            && matches!(us.addr, AddrMatch::Any | AddrMatch::Assigned)
            && rs.addr == AddrMatch::Any;
        let mut v = SmallVec::new();
        for &ue_ports in &us.port_ranges() {
            for &remote_ports in &rs.port_ranges() {
                v.push(FastFilter::new(&Parts {
                    proto: f.proto,
                    tos: (tos_value, tos_mask),
                    ue: (ue_net, ue_mask),
                    remote: (remote_net, remote_mask),
                    any_version,
                    ue_ports,
                    remote_ports,
                }));
            }
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A prefix of `len` bits of `a` as (network, mask).
    fn prefix(a: u32, len: u32) -> (u32, u32) {
        let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
        (a & mask, mask)
    }

    fn range((a, b): (u16, u16)) -> (u16, u16) {
        (a.min(b), a.max(b))
    }

    /// Values near the edges a range check gets wrong, and any others.
    fn port() -> impl Strategy<Value = u16> {
        prop_oneof![
            Just(0u16),
            Just(1),
            Just(1000),
            Just(1001),
            Just(u16::MAX),
            any::<u16>()
        ]
    }

    proptest! {
        /// The packed words and their lanes decide as the parts compared one by one do.
        #[test]
        fn packed_filter_matches_as_its_parts_do(
            proto in proptest::option::of(prop_oneof![Just(0u8), Just(6), Just(17), Just(255), any::<u8>()]),
            tos in (any::<u8>(), prop_oneof![Just(0u8), Just(0xfc), Just(0xff), any::<u8>()]),
            ue in (any::<u32>(), 0u32..=32),
            remote in (any::<u32>(), 0u32..=32),
            ue_ports in (port(), port()),
            remote_ports in (port(), port()),
            src: u32, dst: u32,
            src_port in port(), dst_port in port(),
            pkt_proto in prop_oneof![Just(0u8), Just(6), Just(17), Just(255), any::<u8>()],
            pkt_tos: u8,
            from_ue: bool,
        ) {
            let parts = Parts {
                proto,
                tos: (tos.0 & tos.1, tos.1),
                ue: prefix(ue.0, ue.1),
                remote: prefix(remote.0, remote.1),
                any_version: false,
                ue_ports: range(ue_ports),
                remote_ports: range(remote_ports),
            };
            let f = FastFilter::new(&parts);
            // Now and then the packet's addresses are the filter's own.
            let (src, dst) = if src % 3 == 0 { (ue.0, remote.0) } else { (src, dst) };
            let (src, dst) = if from_ue { (src, dst) } else { (dst, src) };
            let p = Flow4 { src, dst, src_port, dst_port, proto: pkt_proto, tos: pkt_tos };
            let ((u, up), (r, rp)) = if from_ue {
                ((src, src_port), (dst, dst_port))
            } else {
                ((dst, dst_port), (src, src_port))
            };
            let inside = |x: u16, (lo, hi): (u16, u16)| lo <= x && x <= hi;
            let want = proto.is_none_or(|v| v == pkt_proto)
                && pkt_tos & parts.tos.1 == parts.tos.0
                && u & parts.ue.1 == parts.ue.0
                && r & parts.remote.1 == parts.remote.0
                && inside(up, parts.ue_ports)
                && inside(rp, parts.remote_ports);
            prop_assert_eq!(f.matches4(&p, from_ue), want);
            prop_assert_eq!(f.matches(&p.into(), from_ue), want);
            // Flipped, it matches with the sides turned round.
            prop_assert_eq!(f.flipped().matches4(&p, !from_ue), want);
            prop_assert_eq!(f.flipped().matches(&p.into(), !from_ue), want);
            prop_assert_eq!(f.flipped().flipped(), f);
            // Given a UE address its prefix holds, the filter no longer looks at it.
            if u & parts.ue.1 == parts.ue.0 {
                let g = f.given_ue(u);
                let moved = if from_ue { Flow4 { src: !src, ..p } } else { Flow4 { dst: !dst, ..p } };
                prop_assert_eq!(g.matches4(&moved, from_ue), want);
                prop_assert_eq!(g.matches4(&p, from_ue), want);
            }
        }
    }
}
