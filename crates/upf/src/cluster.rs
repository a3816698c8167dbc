//! `[cluster]` in the daemon (#29): the membership thread (upf-state's [`Cluster`]) is
//! started before the interfaces; the N4 loop serves a shard once etcd says it is ours
//! (its own, or one taken over from an instance that died: its sessions loaded from etcd
//! and installed, its N4 address bound when it is on this host), and stops serving one
//! another instance took while this one was cut off from etcd.

use crate::checkpoint::Checkpoints;
use crate::config::FileConfig;
use crate::shards::{Hub, Shard, ShardPath};
use crate::state;
use anyhow::Context;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tracing::{error, info, warn};
use upf_n4::Agent;
use upf_state::{Cluster, ClusterEvent, EtcdOptions, Record, WriterOptions};

/// Starts taking part in the cluster: its own shard first, then any it may take over.
pub fn start(c: &FileConfig) -> anyhow::Result<Cluster> {
    let cl = c.cluster.as_ref().context("no [cluster]")?;
    let home = cl.home_shard();
    let mut shards = vec![home.clone()];
    shards.extend(cl.shards.keys().filter(|s| **s != home).cloned());
    let mut o = EtcdOptions::new(cl.etcd.clone(), &cl.instance(), shards);
    o.prefix = cl.prefix.clone();
    o.lease_ttl = Duration::from_secs(cl.lease_ttl_s);
    o.hand_back = cl.hand_back;
    o.hot_standby = cl.hot_standby;
    info!(
        target: "upf::cluster",
        "instance {} of the cluster at {} ({}): serving shard {home} once etcd confirms it",
        o.instance,
        o.endpoints.join(", "),
        o.prefix
    );
    Cluster::start(o).context("cluster thread")
}

/// What the N4 loop does with an event of the membership thread: a shard to serve, one to
/// stop serving, or a line in the log.
pub async fn apply(
    ev: ClusterEvent,
    c: &FileConfig,
    cluster: &Cluster,
    hub: &Rc<RefCell<Hub>>,
    served: &mut Served,
) -> anyhow::Result<()> {
    let now = Instant::now();
    let Served {
        shards,
        mirrors,
        checkpoints,
        etcd_reachable,
    } = served;
    match ev {
        ClusterEvent::Acquired {
            shard,
            from,
            state,
            mirrored,
        } => {
            let mut opts = WriterOptions::default();
            if let Some(cl) = &c.cluster {
                opts.queue_bytes = cl.queue_bytes;
            }
            let writer = cluster.writer(&shard, opts);
            let taken = mirrored
                .then(|| mirrors.iter().position(|m| m.shard.name == shard))
                .flatten()
                .map(|i| mirrors.remove(i));
            let hot = taken.is_some();
            let (agent, addr, persist) = match taken {
                // Its sessions are installed already: it only starts recording.
                Some(m) => {
                    let Mirror { shard: s, usage } = m;
                    let mut agent = s.agent;
                    let persist = state::record(&mut agent, writer, usage.into_iter().collect());
                    (agent, s.addr, persist)
                }
                None => {
                    let (mut agent, addr) = new_agent(c, hub, &shard, now)?;
                    let from = format!("etcd (shard {shard})");
                    let persist = state::restore(&mut agent, state, writer, &from, now);
                    (agent, addr, persist)
                }
            };
            let node = agent.config().node_id.clone();
            match &from {
                Some(f) => warn!(
                    target: "upf::cluster",
                    "took over shard {shard} (Node ID {node}) from instance {f}, {} sessions, in {} ms{}",
                    agent.session_count(),
                    now.elapsed().as_millis(),
                    if hot { " (hot standby: installed already)" } else { "" }
                ),
                None => info!(
                    target: "upf::cluster",
                    "serving shard {shard} (Node ID {node}), {} sessions",
                    agent.session_count()
                ),
            }
            let mut s = Shard::new(shard, agent, addr, Some(persist));
            s.resume_usage(checkpoints.as_mut());
            s.bind()
                .await
                .with_context(|| format!("n4 address {addr}"))?;
            shards.push(s);
        }
        ClusterEvent::Mirror { shard, state } => {
            // Mirrored afresh: the old mirror's sessions go first.
            if let Some(i) = mirrors.iter().position(|m| m.shard.name == shard) {
                mirrors.remove(i).shard.forget(now);
            }
            let (mut agent, addr) = new_agent(c, hub, &shard, now)?;
            if let Some(rts) = state.recovery {
                let r = agent.restore(now, rts, state.associations, state.sessions);
                for (key, why) in &r.failed {
                    warn!(target: "upf::cluster", "mirror of shard {shard}: {key} not installed: {why}");
                }
            }
            info!(
                target: "upf::cluster",
                "standing by for shard {shard}: {} sessions installed in {} ms, followed from etcd",
                agent.session_count(),
                now.elapsed().as_millis()
            );
            mirrors.push(Mirror {
                shard: Shard::new(shard, agent, addr, None),
                usage: state.usage.into_iter().collect(),
            });
        }
        ClusterEvent::MirrorChanges { shard, changes } => {
            if let Some(m) = mirrors.iter_mut().find(|m| m.shard.name == shard) {
                m.apply(now, changes);
            }
        }
        ClusterEvent::Unmirror { shard } => {
            if let Some(i) = mirrors.iter().position(|m| m.shard.name == shard) {
                mirrors.remove(i).shard.forget(now);
            }
        }
        ClusterEvent::Lost { shard, to } => {
            if let Some(i) = shards.iter().position(|s| s.name == shard) {
                let n = shards.remove(i).forget(now);
                error!(
                    target: "upf::cluster",
                    "shard {shard} is served by instance {to} now (this one was cut off from etcd past its lease): its {n} sessions removed here, nobody told"
                );
            }
        }
        ClusterEvent::HandBack { shard, to } => {
            if let Some(i) = shards.iter().position(|s| s.name == shard) {
                let mut s = shards.remove(i);
                // Everything it changed durable before the other instance reads it.
                if let Some(p) = &s.persist {
                    p.save(&mut s.agent);
                    if !p.writer().flush(Duration::from_secs(5)) {
                        warn!(target: "upf::cluster", "handing shard {shard} back with writes not in etcd after 5 s");
                    }
                }
                s.transmit(Instant::now()).await;
                let n = s.forget(now);
                info!(
                    target: "upf::cluster",
                    "handed shard {shard} back to instance {to} (its own), {n} sessions"
                );
                cluster.release(&shard);
            }
        }
        ClusterEvent::Held { shard, by } => info!(
            target: "upf::cluster",
            "shard {shard} is served by instance {by}: this instance waits, and takes shards that become free"
        ),
        ClusterEvent::Unreachable(why) => {
            *etcd_reachable = false;
            warn!(
                target: "upf::cluster",
                "etcd unreachable ({why}): forwarding and PFCP go on, writes wait in memory, nothing is taken over"
            );
        }
        ClusterEvent::Reachable => {
            *etcd_reachable = true;
            info!(target: "upf::cluster", "etcd reachable again");
        }
    }
    Ok(())
}

/// What an instance serves and keeps, as the membership thread's events change it.
#[derive(Debug)]
pub struct Served {
    /// The shards it serves (one, unnamed, without `[cluster]`).
    pub shards: Vec<Shard>,
    /// The shards other instances serve, kept installed here (`cluster.hot_standby`).
    pub mirrors: Vec<Mirror>,
    pub checkpoints: Option<Checkpoints>,
    pub etcd_reachable: bool,
}

/// The agent of shard `shard` (its keys in place of the file's), over the hub, and its N4
/// address.
fn new_agent(
    c: &FileConfig,
    hub: &Rc<RefCell<Hub>>,
    shard: &str,
    now: Instant,
) -> anyhow::Result<(Agent<ShardPath>, std::net::SocketAddr)> {
    let sc = c.for_shard(shard)?;
    let cfg = crate::run::agent_config(&sc)?;
    let addr = crate::config::socket_addr(&sc.n4.address, 8805).context("n4")?;
    Ok((
        Agent::new(cfg, Hub::attach(hub), now, crate::run::ntp_now())?,
        addr,
    ))
}

/// A shard another instance serves, kept here as that instance writes it (a hot standby):
/// its agent answers nothing and runs no timers, its sessions are installed, so that a
/// takeover only starts recording and binds the N4 address.
#[derive(Debug)]
pub struct Mirror {
    shard: Shard,
    /// Its usage checkpoints, carried in at a takeover.
    usage: std::collections::BTreeMap<u64, Vec<u8>>,
}

impl Mirror {
    /// What the serving instance changed, in order.
    fn apply(&mut self, now: Instant, changes: Vec<Record>) {
        let agent = &mut self.shard.agent;
        for c in changes {
            let rts = agent.recovery_time_stamp();
            match c {
                Record::Recovery(r) => {
                    agent.restore(now, r, [], []);
                }
                Record::Association(k, Some(v)) => {
                    agent.restore(now, rts, [(k, v)], []);
                }
                Record::Association(k, None) => agent.forget_association(&k),
                Record::Session(seid, v) => {
                    // A modification replaces it whole.
                    agent.forget_session(now, upf_rules::Seid(seid));
                    if let Some(v) = v {
                        agent.restore(now, rts, [], [(seid, v)]);
                    }
                }
                Record::Usage(seid, Some(v)) => {
                    self.usage.insert(seid, v);
                }
                Record::Usage(seid, None) => {
                    self.usage.remove(&seid);
                }
            }
        }
    }

    /// Drops the data path's events about its sessions: their reports are the serving
    /// instance's to send (a mirror's sessions count no traffic; their timers still fire).
    pub fn drain_events(&mut self) {
        use upf_rules::Datapath;
        while self.shard.agent.datapath_mut().poll_event().is_some() {}
    }
}
