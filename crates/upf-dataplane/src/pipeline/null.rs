//! The null forward: the ceiling a pipeline is measured against.

use super::Output;
use crate::parse::{flow_of, route_hop};
use upf_packet::{Packet, Port};
use upf_wire::encap::{decapsulate, EncapV4};

/// The ceiling a pipeline is measured against: the same parse and rewrite work per packet,
/// by the same fast paths (GTP-U decapsulation and a routed hop uplink; parse, hop and
/// encapsulation into `tunnel` downlink) with no lookups, no rules and no state.
pub fn null_forward(rx: &mut Vec<Packet>, out: &mut Output, tunnel: &EncapV4) {
    let t = &tunnel.tunnel;
    let template = crate::fast::Template::v4(
        tunnel.src,
        tunnel.dst,
        t.teid,
        t.dscp,
        t.ttl,
        t.psc.map(|c| c.pdu_type == upf_wire::ext::PduType::Dl),
    );
    let qfi = t.psc.map_or(0, |c| c.qfi);
    let mut ident = 0u16;
    for mut p in rx.drain(..) {
        let ok = match p.port() {
            Port::N3 | Port::N9 => {
                let inner = crate::fast::gpdu_v4(p.data())
                    .map(|g| g.inner)
                    .or_else(|| decapsulate(p.data()).ok().map(|d| d.inner));
                match inner {
                    Some(r) => {
                        let (s, e) = (p.start() + r.start, p.start() + r.end);
                        p.set_range(s, e);
                        p.set_port(Port::N6);
                        route_hop(p.data_mut())
                    }
                    None => false,
                }
            }
            Port::N6 => {
                let (s, l) = (p.start(), p.len());
                let ecn = p.data().get(1).copied().unwrap_or(0) & 3;
                ident = ident.wrapping_add(1);
                flow_of(p.data()).is_some()
                    && route_hop(p.data_mut())
                    && match template
                        .and_then(|t| t.write(p.buffer_mut(), s, s + l, ident, ecn, qfi, None))
                    {
                        Some(start) => {
                            p.set_range(start, s + l);
                            p.set_port(Port::N3);
                            true
                        }
                        None => false,
                    }
            }
        };
        if ok {
            out.tx.push(p);
        } else {
            out.free.push(p);
        }
    }
}
