//! Encapsulation and duplication of a forwarded packet.

use super::{Output, GTPU_PORT};
use crate::counters::Counters;
use crate::session::Target;
use upf_packet::Packet;
use upf_wire::encap::{encapsulate_gtpu_v4, encapsulate_gtpu_v6, EncapV4, EncapV6, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;
use upf_wire::ipv6;

/// What the outer header marks.
pub(super) struct Mark {
    pub qfi: Option<u8>,
    pub rqi: bool,
    pub ppi: Option<u8>,
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

/// Encapsulates `p[ds..de]` for `t` (or just trims to it) and sets the egress port.
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
    p.set_port(t.port);
    let Some(tun) = t.encap else {
        p.set_range(ds, de);
        return true;
    };
    // RFC 6040 normal mode: the outer ECN copies the inner.
    let ip = p.data_at(ds, de);
    let ecn = match ip.first().map(|v| v >> 4) {
        Some(4) => ip.get(1).copied().unwrap_or(0) & 3,
        Some(6) => ipv6::Packet::new_unchecked(ip).traffic_class() & 3,
        _ => 0,
    };
    // The common case: an IPv4 tunnel and a one-word container (no PPI).
    if let (Some([plain, with_psc]), None) = (&t.templates, m.ppi) {
        let (tmpl, octet) = match m.qfi {
            None => (plain, 0),
            Some(q) if t.to_access => (with_psc, (u8::from(m.rqi) << 6) | (q & 0x3f)),
            Some(q) => (with_psc, q & 0x3f),
        };
        *ident = ident.wrapping_add(1);
        return match tmpl.write(p.buffer_mut(), ds, de, *ident, ecn, octet, None) {
            Some(start) => {
                p.set_range(start, de);
                true
            }
            None => false,
        };
    }
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
