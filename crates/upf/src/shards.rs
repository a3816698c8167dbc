//! One data path for the agents of every shard this instance serves (#29): after a takeover
//! an instance runs one N4 agent per shard (each its own Node ID, Recovery Time Stamp, N4
//! socket, TEIDs and UE pools) over the same workers. Each agent sees a [`ShardPath`]; the
//! [`Hub`] behind them knows which shard installed which SEID and hands each the data
//! path's events about its own sessions.
//!
//! All agents run on the N4 thread, so the hub is shared by `Rc<RefCell>`: a borrow lasts
//! one call.

use crate::datapath::Observed;
use std::cell::{Ref, RefCell, RefMut};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use upf_rules::{
    Datapath, DatapathError, DatapathEvent, InstallFlags, Installed, Seid, Session, UrrId,
    UsageReport,
};
use upf_runtime::Engines;

/// The shared data path and who owns each session in it.
#[derive(Debug)]
pub struct Hub {
    dp: Observed<Engines>,
    /// The shard (its index) that installed each SEID.
    owner: HashMap<Seid, usize>,
    /// Events waiting for their shard's agent, by shard index. Each agent drains its own at
    /// every turn of the N4 loop, so they hold at most one turn's events.
    events: Vec<VecDeque<DatapathEvent>>,
}

/// A shard's view of the hub: the `Datapath` its agent drives.
#[derive(Debug)]
pub struct ShardPath {
    hub: Rc<RefCell<Hub>>,
    me: usize,
}

impl Hub {
    pub fn new(dp: Observed<Engines>) -> Rc<RefCell<Hub>> {
        Rc::new(RefCell::new(Hub {
            dp,
            owner: HashMap::new(),
            events: Vec::new(),
        }))
    }

    /// A view for a new shard.
    pub fn attach(hub: &Rc<RefCell<Hub>>) -> ShardPath {
        let mut h = hub.borrow_mut();
        h.events.push(VecDeque::new());
        ShardPath {
            hub: hub.clone(),
            me: h.events.len() - 1,
        }
    }

    pub fn datapath(&self) -> &Observed<Engines> {
        &self.dp
    }

    pub fn datapath_mut(&mut self) -> &mut Observed<Engines> {
        &mut self.dp
    }

    /// Removes every session of shard `shard` from the data path, telling nobody: another
    /// instance serves them now. Returns how many.
    pub fn forget(&mut self, now: Instant, shard: usize) -> usize {
        let seids: Vec<Seid> = self
            .owner
            .iter()
            .filter(|(_, &o)| o == shard)
            .map(|(&s, _)| s)
            .collect();
        for s in &seids {
            self.owner.remove(s);
            let _ = self.dp.remove(now, *s);
        }
        if let Some(q) = self.events.get_mut(shard) {
            q.clear();
        }
        seids.len()
    }

    /// Moves the data path's events to the queues of the shards they concern: a session's
    /// to its owner's, a GTP-U peer's to every shard's.
    fn route(&mut self) {
        while let Some(e) = self.dp.poll_event() {
            let seid = match &e {
                DatapathEvent::Usage(u) => Some(u.seid),
                DatapathEvent::DownlinkData { seid, .. }
                | DatapathEvent::ErrorIndication { seid, .. }
                | DatapathEvent::Inactive { seid } => Some(*seid),
                DatapathEvent::PeerUnreachable { .. } | DatapathEvent::PeerRestored { .. } => None,
            };
            match seid {
                // A session removed meanwhile: nobody to tell.
                Some(s) => {
                    if let Some(&o) = self.owner.get(&s) {
                        self.events[o].push_back(e);
                    }
                }
                None => {
                    for q in &mut self.events {
                        q.push_back(e.clone());
                    }
                }
            }
        }
    }
}

impl ShardPath {
    pub fn hub(&self) -> Ref<'_, Hub> {
        self.hub.borrow()
    }

    pub fn hub_mut(&self) -> RefMut<'_, Hub> {
        self.hub.borrow_mut()
    }

    /// This shard's index in the hub.
    pub fn index(&self) -> usize {
        self.me
    }

    /// A SEID another shard's agent installed (two agents' random SEIDs colliding).
    fn others(h: &Hub, me: usize, seid: Seid) -> bool {
        h.owner.get(&seid).is_some_and(|&o| o != me)
    }
}

const HELD_BY_ANOTHER_SHARD: DatapathError =
    DatapathError::NoResources("SEID held by another shard's session");

impl Datapath for ShardPath {
    fn install(
        &mut self,
        now: Instant,
        session: Arc<Session>,
        flags: InstallFlags,
    ) -> Result<Installed, DatapathError> {
        let mut h = self.hub.borrow_mut();
        let seid = session.seid;
        if Self::others(&h, self.me, seid) {
            return Err(HELD_BY_ANOTHER_SHARD);
        }
        let r = h.dp.install(now, session, flags);
        if r.is_ok() {
            h.owner.insert(seid, self.me);
        }
        r
    }

    fn install_new(
        &mut self,
        now: Instant,
        sessions: Vec<Arc<Session>>,
    ) -> Vec<Result<Installed, DatapathError>> {
        let mut h = self.hub.borrow_mut();
        let me = self.me;
        let (mine, clash): (Vec<_>, Vec<_>) = sessions
            .into_iter()
            .enumerate()
            .partition(|(_, s)| !Self::others(&h, me, s.seid));
        let seids: Vec<(usize, Seid)> = mine.iter().map(|(i, s)| (*i, s.seid)).collect();
        let results =
            h.dp.install_new(now, mine.into_iter().map(|(_, s)| s).collect());
        let mut out: Vec<Option<Result<Installed, DatapathError>>> =
            (0..seids.len() + clash.len()).map(|_| None).collect();
        for ((i, seid), r) in seids.into_iter().zip(results) {
            if r.is_ok() {
                h.owner.insert(seid, me);
            }
            out[i] = Some(r);
        }
        for (i, _) in clash {
            out[i] = Some(Err(HELD_BY_ANOTHER_SHARD));
        }
        out.into_iter().flatten().collect()
    }

    fn remove(&mut self, now: Instant, seid: Seid) -> Result<Vec<UsageReport>, DatapathError> {
        let mut h = self.hub.borrow_mut();
        if Self::others(&h, self.me, seid) {
            return Err(DatapathError::UnknownSession(seid));
        }
        let r = h.dp.remove(now, seid);
        h.owner.remove(&seid);
        r
    }

    fn query_usage(
        &mut self,
        now: Instant,
        seid: Seid,
        urrs: &[UrrId],
    ) -> Result<Vec<UsageReport>, DatapathError> {
        let mut h = self.hub.borrow_mut();
        if Self::others(&h, self.me, seid) {
            return Err(DatapathError::UnknownSession(seid));
        }
        h.dp.query_usage(now, seid, urrs)
    }

    fn poll_event(&mut self) -> Option<DatapathEvent> {
        let mut h = self.hub.borrow_mut();
        if h.events[self.me].is_empty() {
            h.route();
        }
        h.events[self.me].pop_front()
    }
}

/// A shard this instance serves: its agent, its N4 socket and its store. Without
/// `[cluster]` the one shard is the UPF itself.
#[derive(Debug)]
pub struct Shard {
    /// Its name in `[cluster]` ("" without).
    pub name: String,
    pub agent: upf_n4::Agent<ShardPath>,
    pub addr: std::net::SocketAddr,
    /// None until its N4 address is on this host: after a takeover, until the environment
    /// moves it here. Its sessions forward meanwhile.
    pub sock: Option<Arc<tokio::net::UdpSocket>>,
    pub persist: Option<crate::state::Persist>,
    /// Its messages with Usage Reports waiting for its store, with usage checkpoints.
    pub held: Option<crate::checkpoint::Held>,
    /// The log said it waits for its address.
    said_waiting: bool,
}

impl Shard {
    pub fn new(
        name: String,
        agent: upf_n4::Agent<ShardPath>,
        addr: std::net::SocketAddr,
        persist: Option<crate::state::Persist>,
    ) -> Self {
        Self {
            name,
            agent,
            addr,
            sock: None,
            persist,
            held: None,
            said_waiting: false,
        }
    }

    /// Stops serving it: its sessions removed from the data path, telling nobody (another
    /// instance serves them, or will); how many.
    pub fn forget(self, now: std::time::Instant) -> usize {
        let path = self.agent.datapath();
        let n = path.hub_mut().forget(now, path.index());
        n
    }

    /// With usage checkpoints and a store: the checkpoints its store held carried into its
    /// sessions, and its messages with Usage Reports held for the store from now on.
    pub fn resume_usage(&mut self, checkpoints: Option<&mut crate::checkpoint::Checkpoints>) {
        if let (Some(k), Some(p)) = (checkpoints, &mut self.persist) {
            k.restore(&self.agent, p);
            self.held = Some(crate::checkpoint::Held::default());
        }
    }

    /// Binds its N4 socket if it has none yet. For a cluster's shard a failure (its address
    /// not moved here yet, most often) is said once and tried again at the next call: its
    /// sessions forward meanwhile, and the instance serves its other shards. Without
    /// `[cluster]` a failure is the caller's.
    pub async fn bind(&mut self) -> std::io::Result<()> {
        if self.sock.is_some() {
            return Ok(());
        }
        match tokio::net::UdpSocket::bind(self.addr).await {
            Ok(s) => {
                // An SMF may send hundreds of requests at once (establishment bursts, a
                // restart's re-establishments): 4 MiB holds them, where the kernel's default
                // buffer would leave the rest to the SMF's retransmission timer.
                upf_io::udp::set_socket_buffers(std::os::fd::AsRawFd::as_raw_fd(&s), 4 << 20);
                tracing::info!(
                    target: "upf",
                    "N4 listening on {}{}",
                    s.local_addr().unwrap_or(self.addr),
                    self.of()
                );
                self.sock = Some(Arc::new(s));
                Ok(())
            }
            Err(e) if self.name.is_empty() => Err(e),
            Err(e) => {
                if !std::mem::replace(&mut self.said_waiting, true) {
                    if e.kind() == std::io::ErrorKind::AddrNotAvailable {
                        tracing::warn!(
                            target: "upf",
                            "N4 address {} is not on this host yet{}: PFCP waits for it to be moved here; its sessions forward meanwhile",
                            self.addr,
                            self.of()
                        );
                    } else {
                        tracing::error!(
                            target: "upf",
                            "N4 address {}{}: {e}; tried again every 20 ms, its sessions forward meanwhile",
                            self.addr,
                            self.of()
                        );
                    }
                }
                Ok(())
            }
        }
    }

    /// Sends what its agent has to send, holding back (with usage checkpoints) what carries
    /// Usage Reports until its store has the UR-SEQNs they took; and what the store has
    /// caught up with since. Without its socket yet, messages wait in the agent (requests
    /// are sent again by their timers).
    pub async fn transmit(&mut self, now: std::time::Instant) {
        let Some(sock) = self.sock.clone() else {
            return;
        };
        let mut out = Vec::new();
        while let Some(t) = self.agent.poll_transmit() {
            match (&mut self.held, &self.persist) {
                // The writer's progress (two locks) only for what may wait on it.
                (Some(h), Some(p)) if t.usage => {
                    out.extend(h.send_or_hold(t, crate::checkpoint::Progress::of(p), now))
                }
                _ => out.push(t),
            }
        }
        if let (Some(h), Some(p)) = (&mut self.held, &self.persist) {
            out.extend(h.release(p.writer().durable(), now));
        }
        for t in out {
            if let Err(e) = sock.send_to(&t.payload, t.dest).await {
                tracing::warn!(target: "upf::n4", "send to {}: {e}", t.dest);
            }
        }
    }

    /// " (shard NAME)", for log lines; empty without `[cluster]`.
    pub fn of(&self) -> String {
        if self.name.is_empty() {
            String::new()
        } else {
            format!(" (shard {})", self.name)
        }
    }
}
