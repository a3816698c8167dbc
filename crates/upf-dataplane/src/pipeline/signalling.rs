//! GTP-U signalling: Echo Requests (path management) and Responses, Error Indications sent
//! and received, Supported Extension Headers Notifications, and the UDP/IP headers around
//! them.

use super::{drop_to, Output, Pipeline, GTPU_PORT};
use crate::counters::DropReason;
use crate::flow::Addr;
use crate::paths::{PathChange, Probe};
use std::net::IpAddr;
use std::time::Instant;
use upf_packet::{Packet, Port, HEADROOM};
use upf_rules::{DatapathEvent, Teid};
use upf_wire::encap::Decapsulated;
use upf_wire::{ext, gtpu_msg, ip_proto, ipv4, ipv6, udp};

impl Pipeline {
    /// A GTP-U peer for this pipeline to probe (its first live tunnel), or no longer to (its
    /// last gone): see [`crate::paths`]. The runtime calls this on the worker that GTP-U
    /// signalling is steered to; a pipeline used alone as a data path calls it itself.
    pub fn path_change(&mut self, now: Instant, c: PathChange) {
        self.paths.change(now, c);
        self.path_gauges();
    }

    fn path_gauges(&mut self) {
        self.counters.gtpu_peers = self.paths.peers() as u64;
        self.counters.gtpu_peers_unreachable = self.paths.unreachable() as u64;
    }

    /// The path management steps that are due: Echo Requests queued (sent with the next
    /// batch, see [`Pipeline::has_queued`]), unreachable peers reported.
    pub(crate) fn probe_paths(&mut self, now: Instant) {
        if self.paths.poll_timeout().is_none_or(|t| t > now) {
            return;
        }
        let mut probes = Vec::new();
        self.paths
            .handle_timeout(now, &mut probes, &mut self.events);
        for pr in probes {
            self.echo_request(pr);
        }
        self.path_gauges();
    }

    /// TS 29.281 §7.2.1: an Echo Request from our address on the peer's interface, to its
    /// GTP-U port (§4.4.2.1).
    fn echo_request(&mut self, pr: Probe) {
        let local = if pr.port == Port::N9 {
            self.cfg.n9
        } else {
            self.cfg.n3
        };
        let src = match pr.peer {
            IpAddr::V4(_) => local.v4.map(IpAddr::V4),
            IpAddr::V6(_) => local.v6.map(IpAddr::V6),
        };
        let Some(src) = src else {
            return;
        };
        let mut p = Packet::new(pr.port);
        let start = HEADROOM;
        let Some(buf) = p.buffer_mut().get_mut(start..) else {
            return;
        };
        let Ok(n) = gtpu_msg::emit_echo_request(pr.seq, buf) else {
            return;
        };
        let (src, dst) = (Addr::from_ip(src), Addr::from_ip(pr.peer));
        if wrap_for_peer(&mut p, start, n, src, dst, self.cfg.outer_ttl).is_some() {
            p.set_port(pr.port);
            self.counters.echo_requests += 1;
            self.pending.push(p);
        }
    }

    /// An Echo Response: matched against the request of its sender's path (its Recovery IE
    /// is ignored, TS 29.281 §8.2); consumed either way.
    pub(super) fn echo_response(&mut self, d: &Decapsulated) {
        let Some(seq) = d.gtpu.seq_number else {
            return;
        };
        if self.paths.answered(d.outer_src, seq, &mut self.events) {
            self.counters.echo_responses += 1;
            self.path_gauges();
        }
    }

    /// TS 29.281 §5.2.1, §7.2.3: a GTP-U message with an extension header we must
    /// understand and do not is answered with the list of those we do, to the address and
    /// UDP port it came from (rate-limited).
    pub(super) fn send_ext_notification(&mut self, now: Instant, p: &Packet, out: &mut Output) {
        let Ok(o) = upf_wire::encap::outer(p.data()) else {
            return;
        };
        if !self.ext_notifications.allow(now) {
            self.counters.ext_header_notifications_suppressed += 1;
            return;
        }
        let mut e = out.free.pop().unwrap_or_else(|| Packet::new(p.port()));
        e.set_port(p.port());
        let start = HEADROOM;
        let buf = e.buffer_mut().get_mut(start..).unwrap_or(&mut []);
        let n = gtpu_msg::emit_supported_ext_headers_notification(0, &ext::SUPPORTED, buf);
        let ok = n.ok().and_then(|n| {
            wrap_udp_ip(
                &mut e,
                start,
                n,
                Addr::from_ip(o.dst),
                Addr::from_ip(o.src),
                (GTPU_PORT, o.src_port),
                self.cfg.outer_ttl,
            )
        });
        if ok.is_some() {
            self.counters.created += 1;
            self.counters.tx(e.port(), e.len());
            out.tx.push(e);
        } else {
            out.free.push(e);
        }
    }

    pub(super) fn echo(&mut self, mut p: Packet, d: &Decapsulated, out: &mut Output) {
        // TS 29.281 §7.2.2: the response copies the sequence number; Recovery is 0.
        let seq = d.gtpu.seq_number.unwrap_or(0);
        let start = HEADROOM;
        let n = gtpu_msg::emit_echo_response(
            0,
            seq,
            p.buffer_mut().get_mut(start..).unwrap_or(&mut []),
        );
        let sent = n.ok().and_then(|n| {
            wrap_udp_ip(
                &mut p,
                start,
                n,
                Addr::from_ip(d.outer_dst),
                Addr::from_ip(d.outer_src),
                (d.dst_port, d.src_port),
                self.cfg.outer_ttl,
            )
        });
        match sent {
            Some(()) => {
                self.counters.tx(p.port(), p.len());
                out.tx.push(p);
            }
            None => {
                drop_to(out, &mut self.counters, p, DropReason::MalformedOuter);
            }
        }
    }

    /// TS 29.281 §7.3.1: a G-PDU for an unknown TEID is answered with an Error Indication to
    /// its sender (rate-limited).
    pub(super) fn send_error_indication(
        &mut self,
        now: Instant,
        port: Port,
        d: &Decapsulated,
        out: &mut Output,
    ) {
        let teid = d.gtpu.teid;
        if self
            .cfg
            .silent_teids
            .iter()
            .any(|&(a, b)| (a..=b).contains(&teid))
            || !self.error_indications.allow(now)
        {
            self.counters.error_indications_suppressed += 1;
            return;
        }
        let mut e = out.free.pop().unwrap_or_else(|| Packet::new(port));
        // Back by the G-PDU's ingress port (a reused buffer keeps its last port).
        e.set_port(port);
        let start = HEADROOM;
        let buf = e.buffer_mut().get_mut(start..).unwrap_or(&mut []);
        let n = if d.src_port == GTPU_PORT {
            gtpu_msg::emit_error_indication(d.gtpu.teid, d.outer_dst, buf)
        } else {
            gtpu_msg::emit_error_indication_with_udp_port(d.gtpu.teid, d.outer_dst, d.src_port, buf)
        };
        let ok = n.ok().and_then(|n| {
            wrap_udp_ip(
                &mut e,
                start,
                n,
                Addr::from_ip(d.outer_dst),
                Addr::from_ip(d.outer_src),
                (GTPU_PORT, GTPU_PORT),
                self.cfg.outer_ttl,
            )
        });
        if ok.is_some() {
            self.counters.created += 1;
            self.counters.tx(e.port(), e.len());
            out.tx.push(e);
        } else {
            out.free.push(e);
        }
    }

    /// TS 29.281 §7.3.1: a peer tells us it has no context for a tunnel we send into; the
    /// agent reports it to the SMF (TS 29.244 §5.12).
    pub(super) fn error_indication_received(&mut self, p: &Packet, d: &Decapsulated) {
        let (mut teid, mut peer) = (None, None);
        for ie in gtpu_msg::IeIter::new(p.data().get(d.inner.clone()).unwrap_or(&[])) {
            match ie {
                Ok(gtpu_msg::Ie::TeidDataI(t)) => teid = Some(t),
                Ok(gtpu_msg::Ie::PeerAddress(a)) => peer = Some(a),
                Ok(_) => {}
                Err(_) => return,
            }
        }
        let (Some(teid), Some(peer)) = (teid, peer) else {
            return;
        };
        let owner = self.remote.get(&(teid, Addr::from_ip(peer)));
        if let Some(s) = owner.and_then(|&s| self.slots.get_mut(s as usize)?.as_mut()) {
            if s.error_indication_reported {
                self.counters.error_indications_repeated += 1;
                return;
            }
            s.error_indication_reported = true;
            self.events.push_back(DatapathEvent::ErrorIndication {
                seid: s.seid,
                teid: Teid(teid),
                peer,
            });
        }
    }
}

/// A GTP-U signalling message at `p[start..start+len]` wrapped for the GTP-U port of `dst`.
pub(crate) fn wrap_for_peer(
    p: &mut Packet,
    start: usize,
    len: usize,
    src: Addr,
    dst: Addr,
    ttl: u8,
) -> Option<()> {
    wrap_udp_ip(p, start, len, src, dst, (GTPU_PORT, GTPU_PORT), ttl)
}

/// Puts UDP and IP headers in front of `p[start..start+len]` (a GTP-U signalling message).
fn wrap_udp_ip(
    p: &mut Packet,
    start: usize,
    len: usize,
    src: Addr,
    dst: Addr,
    ports: (u16, u16),
    ttl: u8,
) -> Option<()> {
    let ip_len = if src.v6 {
        ipv6::HEADER_LEN
    } else {
        ipv4::HEADER_LEN
    };
    let u_start = start.checked_sub(udp::HEADER_LEN)?;
    let ip_start = u_start.checked_sub(ip_len)?;
    let end = start + len;
    let buf = p.buffer_mut();
    let urepr = udp::Repr {
        src_port: ports.0,
        dst_port: ports.1,
        payload_len: len,
    };
    let mut u = udp::Packet::new_unchecked(buf.get_mut(u_start..end)?);
    urepr.emit(&mut u).ok()?;
    if src.v6 {
        u.fill_checksum_v6(&src.to_ip6(), &dst.to_ip6());
        let r = ipv6::Repr {
            src: src.to_ip6(),
            dst: dst.to_ip6(),
            next_header: ip_proto::UDP,
            payload_len: udp::HEADER_LEN + len,
            hop_limit: ttl,
            traffic_class: 0,
            flow_label: 0,
        };
        r.emit(&mut ipv6::Packet::new_unchecked(
            buf.get_mut(ip_start..end)?,
        ))
        .ok()?;
    } else {
        u.fill_checksum_v4(src.to_ip4(), dst.to_ip4());
        let r = ipv4::Repr {
            src: src.to_ip4(),
            dst: dst.to_ip4(),
            protocol: ip_proto::UDP,
            payload_len: udp::HEADER_LEN + len,
            ttl,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
        };
        r.emit(&mut ipv4::Packet::new_unchecked(
            buf.get_mut(ip_start..end)?,
        ))
        .ok()?;
    }
    p.set_range(ip_start, end);
    Some(())
}
