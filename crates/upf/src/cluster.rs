//! `[cluster]` in the daemon (#29): the membership thread (upf-state's [`Cluster`]) is
//! started before the interfaces; the N4 loop serves a shard once etcd says it is ours
//! (its own, or one taken over from an instance that died: its sessions loaded from etcd
//! and installed, its N4 address bound when it is on this host), and stops serving one
//! another instance took while this one was cut off from etcd.

use crate::checkpoint::{Checkpoints, Held};
use crate::config::FileConfig;
use crate::shards::{Hub, Shard};
use crate::state;
use anyhow::Context;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tracing::{error, info, warn};
use upf_n4::Agent;
use upf_state::{Cluster, ClusterEvent, EtcdOptions, WriterOptions};

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
    shards: &mut Vec<Shard>,
    checkpoints: &mut Option<Checkpoints>,
    reachable: &mut bool,
) -> anyhow::Result<()> {
    let now = Instant::now();
    match ev {
        ClusterEvent::Acquired { shard, from, state } => {
            let sc = c.for_shard(&shard)?;
            let cfg = crate::run::agent_config(&sc)?;
            let addr = crate::config::socket_addr(&sc.n4.address, 8805).context("n4")?;
            let node = cfg.node_id.clone();
            let mut agent = Agent::new(cfg, Hub::attach(hub), now, crate::run::ntp_now())?;
            let mut opts = WriterOptions::default();
            if let Some(cl) = &c.cluster {
                opts.queue_bytes = cl.queue_bytes;
            }
            let writer = cluster.writer(&shard, opts);
            let mut persist = state::restore(
                &mut agent,
                state,
                writer,
                &format!("etcd (shard {shard})"),
                now,
            );
            let held = checkpoints.as_mut().map(|k| {
                k.restore(&agent, &mut persist);
                Held::default()
            });
            match &from {
                Some(f) => warn!(
                    target: "upf::cluster",
                    "took over shard {shard} (Node ID {node}) from instance {f}, {} sessions, in {} ms",
                    agent.session_count(),
                    now.elapsed().as_millis()
                ),
                None => info!(
                    target: "upf::cluster",
                    "serving shard {shard} (Node ID {node}), {} sessions",
                    agent.session_count()
                ),
            }
            let mut s = Shard::new(shard, agent, addr, Some(persist));
            s.held = held;
            s.bind()
                .await
                .with_context(|| format!("n4 address {addr}"))?;
            shards.push(s);
        }
        ClusterEvent::Lost { shard, to } => {
            if let Some(i) = shards.iter().position(|s| s.name == shard) {
                let s = shards.remove(i);
                let me = s.agent.datapath().index();
                let n = hub.borrow_mut().forget(now, me);
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
                let n = hub.borrow_mut().forget(now, s.agent.datapath().index());
                info!(
                    target: "upf::cluster",
                    "handed shard {shard} back to instance {to} (its own), {n} sessions"
                );
                drop(s);
                cluster.release(&shard);
            }
        }
        ClusterEvent::Held { shard, by } => info!(
            target: "upf::cluster",
            "shard {shard} is served by instance {by}: this instance waits, and takes shards that become free"
        ),
        ClusterEvent::Unreachable(why) => {
            *reachable = false;
            warn!(
                target: "upf::cluster",
                "etcd unreachable ({why}): forwarding and PFCP go on, writes wait in memory, nothing is taken over"
            );
        }
        ClusterEvent::Reachable => {
            *reachable = true;
            info!(target: "upf::cluster", "etcd reachable again");
        }
    }
    Ok(())
}
