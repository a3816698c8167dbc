//! A floor model for what the pipeline's work on S0 costs (issue #4): every S0 packet's
//! required steps (session by TEID or UE address, PDR by precedence over its SDF filters and
//! QFI, the uplink ACL, the AMBR and flow MBR buckets, GBR octets, the URR's counts, the FAR's
//! decapsulation or encapsulation with the QFI, the routed hop, the port counters) written
//! for S0's session shape and nothing else: no rule lists, slots, flags or general paths,
//! one session's state in one struct, each packet's session looked up and prefetched for the
//! batch first as the pipeline does. Built from the sessions the pipeline installs, it
//! forwards every packet exactly as the pipeline does (tested). Where every session's state
//! stays in cache (1k sessions), its rate is what code written for S0 alone reaches on this
//! work: what a general pipeline is measured against (`memory --floor`). It is not laid out
//! for more sessions (no shared shapes, 472 octets a session), so past the cache it only shows
//! what the pipeline's layout is worth.

use std::net::IpAddr;
use std::time::Instant;
use upf_dataplane::acl::{Acl, AclAction};
use upf_dataplane::fast::{flow_v4, gpdu_v4, Template};
use upf_dataplane::meter::{TokenBucket, DEFAULT_WINDOW};
use upf_dataplane::{route_hop, Output, Packet, Port};
use upf_rules::sdf::Address;
use upf_rules::{OuterHeaderCreation, Pdr, Session};

/// S0's filters per PDR.
const FILTERS: usize = 4;

/// Parts of the work a measurement may leave out ([`Floor::without`]), to see what each
/// costs: the PDR choice (every packet takes the default PDR), the uplink ACL, the QER
/// buckets and GBR octets, the URR's counts. With all four left out, what remains is the
/// session lookup, the FAR and the counters.
pub const CLASSIFY: u8 = 1;
pub const ACL: u8 = 2;
pub const QER: u8 = 4;
pub const URR: u8 = 8;
pub const POLICY: u8 = CLASSIFY | ACL | QER | URR;

/// An SDF filter of S0's form, `permit out PROTO from NET/LEN PORTS to assigned`: the remote
/// side matched, the UE side is the session's address.
#[derive(Debug, Clone, Copy, Default)]
struct Remote {
    net: u32,
    mask: u32,
    ports: (u16, u16),
    /// `None`: any protocol.
    proto: Option<u8>,
}

impl Remote {
    #[inline(always)]
    fn matches(&self, addr: u32, port: u16, proto: u8) -> bool {
        addr & self.mask == self.net
            && self.ports.0 <= port
            && port <= self.ports.1
            && self.proto.is_none_or(|p| p == proto)
    }
}

/// One direction of a session: its filtered PDR (precedence first) and its default PDR.
#[derive(Debug, Clone)]
struct Direction {
    filters: [Remote; FILTERS],
    nfilters: usize,
    /// The filtered PDR's QFI condition (uplink).
    qfi: Option<u8>,
    /// The session AMBR's bucket, then the filtered and the default PDR's flow buckets.
    buckets: [TokenBucket; 3],
    /// The QFI each PDR marks (its flow QER's).
    mark: [u8; 2],
}

impl Direction {
    /// Whether the filtered PDR matches (else the default one does).
    #[inline(always)]
    fn first(&self, qfi: Option<u8>, addr: u32, port: u16, proto: u8) -> bool {
        (self.qfi.is_none() || qfi == self.qfi)
            && self.filters[..self.nfilters]
                .iter()
                .any(|f| f.matches(addr, port, proto))
    }

    /// Both buckets the PDR polices conform, and are taken.
    #[inline(always)]
    fn police(&mut self, now: u64, first: bool, bits: u64) -> bool {
        let [ambr, a, b] = &mut self.buckets;
        let flow = if first { a } else { b };
        if !ambr.conforms(now, bits) || !flow.conforms(now, bits) {
            return false;
        }
        ambr.take(bits);
        flow.take(bits);
        true
    }
}

/// One S0 session's state.
#[derive(Debug, Clone)]
struct Sess {
    teid: u32,
    ue: u32,
    ul: Direction,
    dl: Direction,
    gbr_bytes: u64,
    /// The URR's counts: uplink octets and packets, downlink octets and packets.
    urr: [u64; 4],
    first: u64,
    last: u64,
    budget: u64,
    template: Template,
}

impl Sess {
    /// Prefetches into L2 the lines a packet of one direction reads.
    #[inline(always)]
    fn prefetch(&self, downlink: bool) {
        use upf_prefetch::l2_ref;
        let d = if downlink { &self.dl } else { &self.ul };
        l2_ref(self);
        l2_ref(&d.filters);
        l2_ref(&d.buckets[0]);
        l2_ref(&d.buckets[2]);
        l2_ref(&self.urr);
        if downlink {
            l2_ref(&self.template);
        }
    }
}

/// The big-endian word at `d[i..i + 4]` (in bounds).
fn be32(d: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]])
}

/// Dense `u32 → u32` keys (TEIDs and UE addresses of S0 come in runs): one array from the
/// lowest key, `u32::MAX` for none.
#[derive(Debug, Default)]
struct Dense {
    base: u32,
    values: Vec<u32>,
}

impl Dense {
    fn new(pairs: &[(u32, u32)]) -> Self {
        let base = pairs.iter().map(|p| p.0).min().unwrap_or(0);
        let top = pairs
            .iter()
            .map(|p| p.0 - base)
            .max()
            .map_or(0, |m| m as usize + 1);
        let mut values = vec![u32::MAX; top];
        for &(k, v) in pairs {
            values[(k - base) as usize] = v;
        }
        Self { base, values }
    }

    #[inline(always)]
    fn get(&self, k: u32) -> Option<usize> {
        let v = *self.values.get(k.wrapping_sub(self.base) as usize)?;
        (v != u32::MAX).then_some(v as usize)
    }
}

/// The floor's worker: S0 sessions and what a packet reads besides them.
pub struct Floor {
    sessions: Vec<Sess>,
    by_teid: Dense,
    by_ue: Dense,
    acl: std::sync::Arc<Acl>,
    epoch: Instant,
    ident: u16,
    /// The parts left out ([`CLASSIFY`] …).
    without: u8,
    /// Per-batch scratch: each packet's session.
    slots: Vec<Option<usize>>,
    /// Packets and octets received and sent, by port.
    rx: [[u64; 2]; 3],
    tx: [[u64; 2]; 3],
}

/// The PDR's filters of S0's form.
fn remotes(p: &Pdr) -> Result<([Remote; FILTERS], usize), String> {
    let mut out = [Remote::default(); FILTERS];
    let n = p.pdi.sdf_filters.len();
    if n > FILTERS {
        return Err(format!("PDR {}: more than {FILTERS} filters", p.id.0));
    }
    for (o, f) in out.iter_mut().zip(p.pdi.sdf_filters.iter()) {
        let d = f
            .flow
            .as_ref()
            .ok_or("a filter without a flow description")?;
        let (net, len) = match d.from.address {
            Address::Prefix(IpAddr::V4(a), len) => (u32::from(a), len),
            Address::Any => (0, 0),
            _ => return Err("a filter not of S0's form".into()),
        };
        if d.to.address != Address::Assigned || !d.to.ports.is_empty() || d.from.ports.len() > 1 {
            return Err("a filter not of S0's form".into());
        }
        let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        *o = Remote {
            net: net & mask,
            mask,
            ports: d
                .from
                .ports
                .first()
                .map_or((0, u16::MAX), |r| (r.first, r.last)),
            proto: d.protocol,
        };
    }
    Ok((out, n))
}

fn direction(s: &Session, pdrs: &[&Pdr], uplink: bool, now: u64) -> Result<Direction, String> {
    let [first, default] = pdrs else {
        return Err("not two PDRs each way".into());
    };
    let (filters, nfilters) = remotes(first)?;
    let bucket = |q: &upf_rules::Qer| {
        let mbr = q.mbr.ok_or("a QER without an MBR")?;
        let kbps = if uplink {
            mbr.uplink_kbps
        } else {
            mbr.downlink_kbps
        };
        Ok::<_, String>(TokenBucket::new(now, kbps * 1000, DEFAULT_WINDOW))
    };
    let qers = |p: &Pdr| -> Result<Vec<&upf_rules::Qer>, String> {
        p.qers
            .iter()
            .map(|id| {
                s.qers
                    .iter()
                    .find(|q| q.id == *id)
                    .ok_or("no such QER".into())
            })
            .collect()
    };
    let (qf, qd) = (qers(first)?, qers(default)?);
    let ([ambr, fq], [ambr2, dq]) = (qf.as_slice(), qd.as_slice()) else {
        return Err("not an AMBR and a flow QER on every PDR".into());
    };
    if ambr.id != ambr2.id {
        return Err("two AMBRs".into());
    }
    let mark = |q: &upf_rules::Qer| q.qfi.map_or(0, |q| q.0);
    Ok(Direction {
        filters,
        nfilters,
        qfi: first.pdi.qfis.first().map(|q| q.0),
        buckets: [bucket(ambr)?, bucket(fq)?, bucket(dq)?],
        mark: [mark(fq), mark(dq)],
    })
}

fn sess(s: &Session, outer_ttl: u8, n3: std::net::Ipv4Addr) -> Result<Sess, String> {
    let mut pdrs: Vec<&Pdr> = s.pdrs.iter().collect();
    pdrs.sort_by_key(|p| p.precedence.0);
    let (ul, dl): (Vec<&Pdr>, Vec<&Pdr>) =
        pdrs.into_iter().partition(|p| p.pdi.local_f_teid.is_some());
    let teid = ul
        .first()
        .and_then(|p| p.pdi.local_f_teid)
        .ok_or("no F-TEID")?
        .teid
        .0;
    let ue = match ul.first().and_then(|p| p.pdi.ue_ip).and_then(|u| u.ipv4) {
        Some(a) => u32::from(a),
        None => return Err("no UE IPv4 address".into()),
    };
    let (peer, dl_teid) = s
        .fars
        .iter()
        .find_map(|f| match f.forwarding.as_ref()?.outer_header_creation {
            Some(OuterHeaderCreation::Gtpu {
                teid,
                peer: IpAddr::V4(peer),
            }) => Some((peer, teid.0)),
            _ => None,
        })
        .ok_or("no GTP-U tunnel")?;
    let template = Template::v4(n3, peer, dl_teid, 0, outer_ttl, Some(true)).ok_or("template")?;
    Ok(Sess {
        teid,
        ue,
        ul: direction(s, &ul, true, 0)?,
        dl: direction(s, &dl, false, 0)?,
        gbr_bytes: 0,
        urr: [0; 4],
        first: 0,
        last: 0,
        budget: u64::MAX / 2,
        template,
    })
}

impl Floor {
    /// From S0 sessions (an error names what is not of S0's shape).
    pub fn new(
        now: Instant,
        sessions: &[std::sync::Arc<Session>],
        acl: std::sync::Arc<Acl>,
        outer_ttl: u8,
        n3: std::net::Ipv4Addr,
    ) -> Result<Self, String> {
        let sessions = sessions
            .iter()
            .map(|s| sess(s, outer_ttl, n3))
            .collect::<Result<Vec<_>, _>>()?;
        let index = |key: fn(&Sess) -> u32| {
            let pairs: Vec<(u32, u32)> =
                (0u32..).zip(&sessions).map(|(i, s)| (key(s), i)).collect();
            Dense::new(&pairs)
        };
        Ok(Self {
            by_teid: index(|s| s.teid),
            by_ue: index(|s| s.ue),
            sessions,
            acl,
            epoch: now,
            ident: 0,
            without: 0,
            slots: Vec::new(),
            rx: [[0; 2]; 3],
            tx: [[0; 2]; 3],
        })
    }

    /// This model with the parts `without` ([`CLASSIFY`] …: one of them, or [`POLICY`])
    /// left out of every packet's work.
    pub fn without(mut self, without: u8) -> Result<Self, String> {
        match without {
            0 | CLASSIFY | ACL | QER | URR | POLICY => {
                self.without = without;
                Ok(self)
            }
            _ => Err("one part, or all of the policy".into()),
        }
    }

    /// Runs `rx` to completion as `Pipeline::process` does for S0's packets; anything else
    /// is dropped. (Each choice of parts left out is compiled apart: the full model checks
    /// nothing for them.)
    #[inline(never)]
    pub fn process(&mut self, now: Instant, rx: &mut Vec<Packet>, out: &mut Output) {
        match self.without {
            0 => self.run::<0>(now, rx, out),
            CLASSIFY => self.run::<CLASSIFY>(now, rx, out),
            ACL => self.run::<ACL>(now, rx, out),
            QER => self.run::<QER>(now, rx, out),
            URR => self.run::<URR>(now, rx, out),
            _ => self.run::<POLICY>(now, rx, out),
        }
    }

    #[inline(always)]
    fn run<const W: u8>(&mut self, now: Instant, rx: &mut Vec<Packet>, out: &mut Output) {
        let clock =
            u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(0);
        // Every packet's session first, its lines prefetched, as the pipeline does: the
        // misses of a batch overlap instead of stalling each packet.
        let mut slots = std::mem::take(&mut self.slots);
        slots.clear();
        slots.extend(rx.iter().map(|p| {
            let d = p.data();
            let i = match p.port() {
                Port::N3 | Port::N9 if d.len() >= 36 => self.by_teid.get(be32(d, 32)),
                Port::N6 if d.len() >= 20 => self.by_ue.get(be32(d, 16)),
                _ => None,
            };
            if let Some(s) = i.and_then(|i| self.sessions.get(i)) {
                s.prefetch(p.port() == Port::N6);
            }
            i
        }));
        for (mut p, &slot) in rx.drain(..).zip(&slots) {
            let port = p.port();
            self.rx[port as usize][0] += 1;
            self.rx[port as usize][1] += p.len() as u64;
            let ok = match (port, slot) {
                (_, None) => false,
                (Port::N3 | Port::N9, Some(i)) => self.uplink::<W>(clock, i, &mut p),
                (Port::N6, Some(i)) => self.downlink::<W>(clock, i, &mut p),
            };
            if ok {
                let port = p.port() as usize;
                self.tx[port][0] += 1;
                self.tx[port][1] += p.len() as u64;
                out.tx.push(p);
            } else {
                out.free.push(p);
            }
        }
        self.slots = slots;
    }

    #[inline(always)]
    fn uplink<const W: u8>(&mut self, clock: u64, slot: usize, p: &mut Packet) -> bool {
        let start = p.start();
        let d = p.data();
        let Some(g) = gpdu_v4(d) else { return false };
        let Some(s) = self.sessions.get_mut(slot) else {
            return false;
        };
        let Some(ip) = d.get(g.inner.clone()) else {
            return false;
        };
        let Some(f) = flow_v4(ip) else { return false };
        if s.teid != g.teid || f.src != s.ue {
            return false;
        }
        let len = usize::from(u16::from_be_bytes([ip[2], ip[3]])).min(ip.len());
        let first = W & CLASSIFY == 0 && s.ul.first(g.qfi, f.dst, f.dst_port, f.proto);
        if W & ACL == 0 && self.acl.check4(&f) == AclAction::Deny {
            return false;
        }
        if !s.charge::<W>(true, clock, first, len as u64) {
            return false;
        }
        let (is, ie) = (start + g.inner.start, start + g.inner.start + len);
        p.set_range(is, ie);
        p.set_port(Port::N6);
        route_hop(p.data_mut())
    }

    #[inline(always)]
    fn downlink<const W: u8>(&mut self, clock: u64, slot: usize, p: &mut Packet) -> bool {
        let d = p.data();
        let Some(f) = flow_v4(d) else { return false };
        let Some(s) = self.sessions.get_mut(slot) else {
            return false;
        };
        if f.dst != s.ue {
            return false;
        }
        let first = W & CLASSIFY == 0 && s.dl.first(None, f.src, f.src_port, f.proto);
        if !s.charge::<W>(false, clock, first, p.len() as u64) {
            return false;
        }
        let ecn = d[1] & 3;
        if !route_hop(p.data_mut()) {
            return false;
        }
        self.ident = self.ident.wrapping_add(1);
        let (ds, de) = (p.start(), p.start() + p.len());
        let qfi = s.dl.mark[usize::from(!first)];
        match s
            .template
            .write(p.buffer_mut(), ds, de, self.ident, ecn, qfi, None)
        {
            Some(start) => {
                p.set_range(start, de);
                p.set_port(Port::N3);
                true
            }
            None => false,
        }
    }
}

impl Sess {
    /// A packet of `bytes` octets on the PDR `first` names: its QER buckets and GBR octets,
    /// its URR counts (the parts not left out by `W`); false if a bucket does not conform.
    /// The URR's budget spent, the exact check would run (S0's threshold is never reached).
    #[inline(always)]
    fn charge<const W: u8>(&mut self, uplink: bool, clock: u64, first: bool, bytes: u64) -> bool {
        if W & QER == 0 {
            let d = if uplink { &mut self.ul } else { &mut self.dl };
            if !d.police(clock, first, bytes * 8) {
                return false;
            }
            if first {
                self.gbr_bytes += bytes;
            }
        }
        if W & URR == 0 {
            let at = if uplink { 0 } else { 2 };
            self.urr[at] += bytes;
            self.urr[at + 1] += 1;
            if self.first == 0 {
                self.first = clock + 1;
            }
            self.last = clock + 1;
            self.budget = self.budget.saturating_sub(bytes);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{self, Workload};
    use std::sync::Arc;
    use upf_dataplane::{LocalAddrs, Pipeline, PipelineConfig};
    use upf_rules::InstallFlags;

    /// The floor does the pipeline's work, no less: S0's packets (both ways, both bearers,
    /// small and large) come out of it octet for octet as out of the pipeline.
    #[test]
    fn the_floor_forwards_s0_as_the_pipeline_does() {
        let prof = crate::spec::load("s0").unwrap().0;
        let t = Workload::new(&prof, None, 300, None).unwrap();
        let acl = Arc::new(Acl::load(&profile::acl_rules(1000)).unwrap());
        let now = Instant::now();
        let cfg = PipelineConfig {
            n3: LocalAddrs {
                v4: Some(profile::UPF_N3),
                v6: None,
            },
            uplink_acl: acl.clone(),
            ..Default::default()
        };
        let mut pipeline = Pipeline::new(now, cfg);
        let sessions: Vec<_> = (0..300).map(|i| t.session(i)).collect();
        for s in &sessions {
            pipeline
                .install_shared(now, s.clone(), InstallFlags::default(), 1)
                .unwrap();
        }
        let ttl = pipeline.config().outer_ttl;
        let mut floor = Floor::new(now, &sessions, acl, ttl, profile::UPF_N3).unwrap();
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut draw = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n.max(1)
        };
        let batch: Vec<Packet> = (0..600)
            .map(|k| {
                let ue = u32::try_from(draw(300)).unwrap();
                let size = if k % 3 == 0 { 1400 } else { 64 };
                t.packet(&mut draw, ue, size, 42.5).0
            })
            .collect();
        let (mut a, mut b) = (batch.clone(), batch);
        let (mut out_a, mut out_b) = (Output::default(), Output::default());
        let later = now + std::time::Duration::from_millis(5);
        pipeline.process(later, &mut a, &mut out_a);
        floor.process(later, &mut b, &mut out_b);
        assert_eq!(out_a.tx.len(), 600, "{:?}", pipeline.counters());
        assert_eq!(out_b.tx.len(), 600);
        let uplink = out_a.tx.iter().filter(|p| p.port() == Port::N6).count();
        assert!(uplink > 150 && uplink < 450, "{uplink} uplink of 600");
        for (p, q) in out_a.tx.iter().zip(&out_b.tx) {
            assert_eq!(p.port(), q.port());
            assert_eq!(p.data(), q.data());
        }
    }
}
