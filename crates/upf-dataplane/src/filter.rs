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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FastFilter {
    /// Protocol, or 0x100 for any.
    proto: u16,
    tos_value: u8,
    tos_mask: u8,
    ue_net: u32,
    ue_mask: u32,
    remote_net: u32,
    remote_mask: u32,
    /// Both addresses are "any": the filter also matches IPv6 packets.
    any_version: bool,
    ue_ports: (u16, u16),
    remote_ports: (u16, u16),
}

impl FastFilter {
    #[inline(always)]
    pub fn matches(&self, p: &Flow, from_ue: bool) -> bool {
        if self.proto != 0x100 && self.proto != u16::from(p.proto) {
            return false;
        }
        if p.tos & self.tos_mask != self.tos_value {
            return false;
        }
        let ((ua, up), (ra, rp)) = if from_ue {
            ((p.src, p.src_port), (p.dst, p.dst_port))
        } else {
            ((p.dst, p.dst_port), (p.src, p.src_port))
        };
        if ua.v6 {
            if !self.any_version {
                return false;
            }
        } else {
            let (u, r) = (ua.low32(), ra.low32());
            if u & self.ue_mask != self.ue_net || r & self.remote_mask != self.remote_net {
                return false;
            }
        }
        self.ue_ports.0 <= up
            && up <= self.ue_ports.1
            && self.remote_ports.0 <= rp
            && rp <= self.remote_ports.1
    }

    /// This filter for a PDR that matched the packet's UE-side address to `ue` already: a
    /// UE-side prefix that holds `ue` then always holds, as `assigned` does, and is left out.
    pub fn given_ue(&self, ue: u32) -> FastFilter {
        let mut f = *self;
        if ue & f.ue_mask == f.ue_net {
            (f.ue_net, f.ue_mask) = (0, 0);
        }
        f
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
        let proto = (self.proto == 0x100) | (self.proto == u16::from(p.proto));
        let tos = p.tos & self.tos_mask == self.tos_value;
        let addrs = ((u & self.ue_mask) ^ self.ue_net) | ((r & self.remote_mask) ^ self.remote_net);
        let ports = (self.ue_ports.0 <= up)
            & (up <= self.ue_ports.1)
            & (self.remote_ports.0 <= rp)
            & (rp <= self.remote_ports.1);
        proto & tos & (addrs == 0) & ports
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
            return Some(smallvec::smallvec![FastFilter {
                proto: 0x100,
                tos_value,
                tos_mask,
                ue_net: 0,
                ue_mask: 0,
                remote_net: 0,
                remote_mask: 0,
                any_version: true,
                ue_ports: (0, u16::MAX),
                remote_ports: (0, u16::MAX),
            }]);
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
                v.push(FastFilter {
                    proto: f.proto.map_or(0x100, u16::from),
                    tos_value,
                    tos_mask,
                    ue_net,
                    ue_mask,
                    remote_net,
                    remote_mask,
                    any_version,
                    ue_ports,
                    remote_ports,
                });
            }
        }
        Some(v)
    }
}
