//! SDF filters compiled for the fast path: addresses as masked integers, the UE side of each
//! rule resolved the way the reference matcher (`upf_rules::SdfFilter::matches`) resolves it,
//! which the property tests hold this code to.

use crate::flow::{Addr, Flow, Prefix};
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
    #[inline(always)]
    pub fn touch(&self) -> u64 {
        u64::from(self.flow.as_ref().is_some_and(|f| f.permit))
    }

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
