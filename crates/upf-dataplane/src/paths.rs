//! GTP-U path management (TS 29.281 §7.2.1, §7.2.2): Echo Requests to every peer that live
//! tunnels lead to, and the peer declared unreachable when it leaves `retries` requests in
//! a row unanswered (the T3-RESPONSE / N3-REQUESTS scheme of TS 29.060 §7.6), restored when
//! it answers again. Sans-IO: every call takes `now`; the pipeline turns [`Probe`]s into
//! packets and the events go to the agent, which sends the PFCP Node Report (TS 29.244
//! §5.x, User Plane Path Failure / Recovery Report).
//!
//! Two parts, because their owners differ: [`Tunnels`] counts, per peer, the sessions with a
//! live tunnel to it (whoever sees every installation holds it: the runtime's control
//! side, or a pipeline used alone as a data path), and says when a peer gains its first or
//! loses its last; [`Paths`] probes the peers it is told of (one pipeline holds them all:
//! the one GTP-U signalling is steered to).
//!
//! The Recovery IE (TS 29.281 §8.2) is 0 in what we send and ignored in what we receive:
//! GTP-U has no restart counter, so only silence fails a path.

use crate::tables::FastMap;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use upf_packet::Port;
use upf_rules::{ApplyAction, DatapathEvent, Interface, OuterHeaderCreation, Seid, Session};

/// How peers are probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoConfig {
    /// Time from one round of Echo Requests to a peer to the next; zero turns path
    /// management off. TS 29.281 §7.2.1: not more often than every 60 s on a path.
    pub interval: Duration,
    /// T3-RESPONSE: how long a request waits for its answer before it is sent again (with
    /// the same sequence number, as §7.2.1 allows).
    pub timeout: Duration,
    /// N3-REQUESTS: requests of a round (the first and its retransmissions) that, all left
    /// unanswered, make the peer unreachable.
    pub retries: u32,
}

impl Default for EchoConfig {
    /// 60 s, the shortest interval §7.2.1 allows; T3 3 s and N3 3, like this UPF's PFCP
    /// T1/N1: a peer that dies is reported 9 to 69 s later.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(3),
            retries: 3,
        }
    }
}

/// A GTP-U peer and the interface its tunnels leave by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer {
    pub addr: IpAddr,
    pub port: Port,
}

/// The peers a session has live tunnels to: the outer header creation destinations of its
/// FARs that forward (FORW) or duplicate (DUPL) over GTP-U to Access (N3) or Core (N9). A
/// FAR that buffers or drops has no live tunnel. Each peer once.
pub fn tunnel_peers(s: &Session) -> Vec<Peer> {
    fn peer(dest: Interface, on_n9: bool, ohc: Option<OuterHeaderCreation>) -> Option<Peer> {
        let Some(OuterHeaderCreation::Gtpu { peer, .. }) = ohc else {
            return None;
        };
        let port = match (dest, on_n9) {
            (Interface::Access | Interface::Core, false) => Port::N3,
            (Interface::Access | Interface::Core, true) => Port::N9,
            _ => return None,
        };
        Some(Peer { addr: peer, port })
    }
    let mut v: Vec<Peer> = Vec::new();
    for f in &s.fars {
        let fwd = f
            .forwarding
            .as_ref()
            .filter(|_| f.action.contains(ApplyAction::FORW))
            .and_then(|fw| peer(fw.destination, fw.tunnels_on_n9(), fw.outer_header_creation));
        let dup = f
            .duplicating
            .iter()
            .filter(|_| f.action.contains(ApplyAction::DUPL))
            .filter_map(|d| {
                peer(
                    d.destination,
                    d.destination.tunnels_on_n9(None),
                    d.outer_header_creation,
                )
            });
        for p in fwd.into_iter().chain(dup) {
            if !v.iter().any(|q| q.addr == p.addr) {
                v.push(p);
            }
        }
    }
    v
}

/// A peer gained its first live tunnel, or lost its last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathChange {
    Up(Peer),
    Down(IpAddr),
}

/// Per peer, the sessions with a live tunnel to it.
#[derive(Debug, Default)]
pub struct Tunnels {
    sessions: FastMap<Seid, Vec<Peer>>,
    peers: FastMap<IpAddr, u32>,
}

impl Tunnels {
    /// The session `seid` now has live tunnels to `peers` (from [`tunnel_peers`]; empty when
    /// it is removed). Pushes the peers whose first tunnel this is or whose last this was.
    pub fn set(&mut self, seid: Seid, peers: Vec<Peer>, changes: &mut Vec<PathChange>) {
        let old = self.sessions.remove(&seid).unwrap_or_default();
        for p in &peers {
            if !old.iter().any(|o| o.addr == p.addr) {
                let n = self.peers.entry(p.addr).or_insert(0);
                *n += 1;
                if *n == 1 {
                    changes.push(PathChange::Up(*p));
                }
            }
        }
        for o in &old {
            if peers.iter().any(|p| p.addr == o.addr) {
                continue;
            }
            if let Some(n) = self.peers.get_mut(&o.addr) {
                *n -= 1;
                if *n == 0 {
                    self.peers.remove(&o.addr);
                    changes.push(PathChange::Down(o.addr));
                }
            }
        }
        if !peers.is_empty() {
            self.sessions.insert(seid, peers);
        }
    }

    /// Peers with at least one live tunnel.
    pub fn peers(&self) -> usize {
        self.peers.len()
    }
}

/// An Echo Request to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub peer: IpAddr,
    pub port: Port,
    pub seq: u16,
}

#[derive(Debug)]
struct Path {
    port: Port,
    /// Sequence number of this round's request.
    seq: u16,
    /// Requests of this round sent and not answered.
    sent: u32,
    /// A round is under way (its request unanswered).
    waiting: bool,
    /// When this round started, and when the next step is due (retransmission, failure or
    /// the next round).
    round: Instant,
    next: Instant,
    /// As last reported: a path starts reachable, and only a change is reported.
    reachable: bool,
}

/// The probing state of every peer this pipeline is told of.
#[derive(Debug)]
pub struct Paths {
    cfg: EchoConfig,
    peers: FastMap<IpAddr, Path>,
    seq: u16,
    /// No step of any peer is due before this (it may be early, never late).
    due: Option<Instant>,
    unreachable: usize,
}

impl Paths {
    pub fn new(cfg: EchoConfig) -> Self {
        Self {
            cfg,
            peers: FastMap::default(),
            seq: 0,
            due: None,
            unreachable: 0,
        }
    }

    /// Whether paths are probed at all (a non-zero interval).
    pub fn enabled(&self) -> bool {
        !self.cfg.interval.is_zero()
    }

    /// Peers probed, and those of them unreachable.
    pub fn peers(&self) -> usize {
        self.peers.len()
    }

    pub fn unreachable(&self) -> usize {
        self.unreachable
    }

    /// A peer to probe (its first request one interval from now), or one no longer to.
    pub fn change(&mut self, now: Instant, c: PathChange) {
        if !self.enabled() {
            return;
        }
        match c {
            PathChange::Up(p) => {
                let next = now + self.cfg.interval;
                self.peers.entry(p.addr).or_insert(Path {
                    port: p.port,
                    seq: 0,
                    sent: 0,
                    waiting: false,
                    round: now,
                    next,
                    reachable: true,
                });
                self.due = Some(self.due.map_or(next, |d| d.min(next)));
            }
            PathChange::Down(a) => {
                if self.peers.remove(&a).is_some_and(|p| !p.reachable) {
                    self.unreachable -= 1;
                }
            }
        }
    }

    /// When [`Paths::handle_timeout`] next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.due
    }

    /// Takes the steps that are due: a new round's request, a retransmission, or a round
    /// that failed (the peer unreachable: an event, once until it answers again).
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        probes: &mut Vec<Probe>,
        events: &mut VecDeque<DatapathEvent>,
    ) {
        if self.due.is_none_or(|d| d > now) {
            return;
        }
        let cfg = self.cfg;
        let mut due: Option<Instant> = None;
        for (&peer, p) in &mut self.peers {
            if p.next <= now && p.waiting && p.sent >= cfg.retries {
                p.waiting = false;
                p.next = p.round + cfg.interval;
                if p.reachable {
                    p.reachable = false;
                    self.unreachable += 1;
                    events.push_back(DatapathEvent::PeerUnreachable { peer });
                }
            }
            if p.next <= now {
                if !p.waiting {
                    self.seq = self.seq.wrapping_add(1);
                    p.seq = self.seq;
                    p.sent = 0;
                    p.waiting = true;
                    p.round = now;
                }
                p.sent += 1;
                p.next = now + cfg.timeout;
                probes.push(Probe {
                    peer,
                    port: p.port,
                    seq: p.seq,
                });
            }
            due = Some(due.map_or(p.next, |d| d.min(p.next)));
        }
        self.due = due;
    }

    /// An Echo Response from `peer` with `seq`: whether it answers the current round (or,
    /// late, the round that made the peer unreachable). A peer that was unreachable is
    /// restored (an event).
    pub fn answered(
        &mut self,
        peer: IpAddr,
        seq: u16,
        events: &mut VecDeque<DatapathEvent>,
    ) -> bool {
        let Some(p) = self.peers.get_mut(&peer) else {
            return false;
        };
        // Not this round's number, this round answered already, or a repeated answer of a
        // peer that is reachable.
        if p.seq != seq || p.sent == 0 || (!p.waiting && p.reachable) {
            return false;
        }
        if p.waiting {
            p.waiting = false;
            // Later than `due`, which stays as it is (early, at worst).
            p.next = p.round + self.cfg.interval;
        }
        p.sent = 0;
        if !p.reachable {
            p.reachable = true;
            self.unreachable -= 1;
            events.push_back(DatapathEvent::PeerRestored { peer });
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T3: Duration = Duration::from_secs(3);
    const MIN: Duration = Duration::from_secs(60);

    fn peer(i: u8) -> Peer {
        Peer {
            addr: IpAddr::from([192, 0, 2, i]),
            port: Port::N3,
        }
    }

    /// Steps the clock to `at` and returns the probes sent and events raised.
    fn at(p: &mut Paths, t0: Instant, at: Duration) -> (Vec<Probe>, Vec<DatapathEvent>) {
        let (mut probes, mut ev) = (Vec::new(), VecDeque::new());
        p.handle_timeout(t0 + at, &mut probes, &mut ev);
        (probes, ev.into())
    }

    #[test]
    fn tunnels_count_sessions_per_peer() {
        let mut t = Tunnels::default();
        let mut ch = Vec::new();
        t.set(Seid(1), vec![peer(1), peer(2)], &mut ch);
        assert_eq!(ch, [PathChange::Up(peer(1)), PathChange::Up(peer(2))]);
        ch.clear();
        t.set(Seid(2), vec![peer(1)], &mut ch);
        assert!(ch.is_empty());
        // Session 1 moves from peer 2 to peer 3 (a handover).
        t.set(Seid(1), vec![peer(1), peer(3)], &mut ch);
        assert_eq!(
            ch,
            [PathChange::Up(peer(3)), PathChange::Down(peer(2).addr)]
        );
        ch.clear();
        t.set(Seid(1), Vec::new(), &mut ch);
        assert_eq!(ch, [PathChange::Down(peer(3).addr)]);
        ch.clear();
        assert_eq!(t.peers(), 1);
        t.set(Seid(2), Vec::new(), &mut ch);
        assert_eq!(ch, [PathChange::Down(peer(1).addr)]);
        assert_eq!(t.peers(), 0);
        // Removing what is not there changes nothing.
        ch.clear();
        t.set(Seid(9), Vec::new(), &mut ch);
        assert!(ch.is_empty());
    }

    #[test]
    fn a_silent_peer_fails_once_after_its_retries_and_an_answer_restores_it() {
        let t0 = Instant::now();
        let mut p = Paths::new(EchoConfig::default());
        p.change(t0, PathChange::Up(peer(1)));
        assert_eq!(p.poll_timeout(), Some(t0 + MIN));
        assert!(at(&mut p, t0, MIN - Duration::from_millis(1)).0.is_empty());
        // The round: the request and two retransmissions with its sequence number, T3 apart.
        let (pr, _) = at(&mut p, t0, MIN);
        assert_eq!(pr.len(), 1);
        let seq = pr[0].seq;
        for k in 1..3 {
            assert_eq!(p.poll_timeout(), Some(t0 + MIN + T3 * k));
            let (pr, ev) = at(&mut p, t0, MIN + T3 * k);
            assert_eq!((pr.len(), pr[0].seq), (1, seq));
            assert!(ev.is_empty());
        }
        let (pr, ev) = at(&mut p, t0, MIN + T3 * 3);
        assert!(pr.is_empty());
        assert_eq!(ev, [DatapathEvent::PeerUnreachable { peer: peer(1).addr }]);
        assert_eq!(p.unreachable(), 1);
        // Still probed, once an interval; a second failed round says nothing more.
        let (pr, _) = at(&mut p, t0, MIN * 2);
        assert_eq!(pr.len(), 1);
        assert_ne!(pr[0].seq, seq);
        let seq2 = pr[0].seq;
        for k in 1..=3 {
            let (pr, ev) = at(&mut p, t0, MIN * 2 + T3 * k);
            assert_eq!(pr.len(), usize::from(k < 3));
            assert!(ev.is_empty());
        }
        // A late answer to that round restores it; a repeated answer does nothing.
        let mut ev = VecDeque::new();
        assert!(!p.answered(peer(1).addr, seq, &mut ev), "an older round");
        assert!(p.answered(peer(1).addr, seq2, &mut ev));
        assert!(!p.answered(peer(1).addr, seq2, &mut ev));
        assert_eq!(
            Vec::from(ev),
            [DatapathEvent::PeerRestored { peer: peer(1).addr }]
        );
        assert_eq!(p.unreachable(), 0);
    }

    #[test]
    fn an_answer_ends_the_round_and_the_next_comes_an_interval_after_it_began() {
        let t0 = Instant::now();
        let mut p = Paths::new(EchoConfig::default());
        p.change(t0, PathChange::Up(peer(1)));
        let (pr, _) = at(&mut p, t0, MIN);
        let mut ev = VecDeque::new();
        // From another address, or with another number: not an answer.
        assert!(!p.answered(peer(2).addr, pr[0].seq, &mut ev));
        assert!(!p.answered(peer(1).addr, pr[0].seq.wrapping_add(1), &mut ev));
        assert!(p.answered(peer(1).addr, pr[0].seq, &mut ev));
        assert!(ev.is_empty(), "reachable all along: nothing to report");
        for s in [4, 30, 59] {
            let (pr, ev) = at(&mut p, t0, MIN + Duration::from_secs(s));
            assert!(pr.is_empty() && ev.is_empty());
        }
        assert_eq!(at(&mut p, t0, MIN * 2).0.len(), 1);
    }

    #[test]
    fn a_peer_no_longer_used_is_no_longer_probed() {
        let t0 = Instant::now();
        let mut p = Paths::new(EchoConfig::default());
        p.change(t0, PathChange::Up(peer(1)));
        p.change(t0, PathChange::Up(peer(2)));
        assert_eq!(at(&mut p, t0, MIN).0.len(), 2);
        p.change(t0 + MIN, PathChange::Down(peer(2).addr));
        for k in 1..3 {
            let (pr, _) = at(&mut p, t0, MIN + T3 * k);
            assert_eq!(pr.len(), 1);
            assert_eq!(pr[0].peer, peer(1).addr);
        }
        let (pr, ev) = at(&mut p, t0, MIN + T3 * 3);
        assert!(pr.is_empty());
        assert_eq!(ev, [DatapathEvent::PeerUnreachable { peer: peer(1).addr }]);
        assert_eq!(p.unreachable(), 1);
        p.change(t0 + MIN * 2, PathChange::Down(peer(1).addr));
        assert_eq!((p.peers(), p.unreachable()), (0, 0));
        assert!(at(&mut p, t0, MIN * 3).0.is_empty());
    }

    #[test]
    fn interval_zero_turns_it_off() {
        let t0 = Instant::now();
        let mut p = Paths::new(EchoConfig {
            interval: Duration::ZERO,
            ..Default::default()
        });
        p.change(t0, PathChange::Up(peer(1)));
        assert_eq!((p.peers(), p.poll_timeout()), (0, None));
        assert!(at(&mut p, t0, MIN * 10).0.is_empty());
    }
}
