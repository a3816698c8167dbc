//! `[state]` in the daemon: the store (upf-state) is opened before anything else starts, so
//! that a store the UPF cannot use stops it with the reason; what it holds is restored into
//! the agent before the first PFCP message is read; the agent's changes are written after
//! each turn of the N4 loop, off the packet path and batched by the store's writer thread.

use crate::config::StateCfg;
use anyhow::Context;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tracing::{info, warn};
use upf_n4::Agent;
use upf_pfcp::ie::NodeId;
use upf_rules::Datapath;
use upf_state::{Loaded, Op, Store, Writer, WriterOptions, WriterStats};

/// A store opened and read, not yet restored.
#[derive(Debug)]
pub struct Opened {
    store: Store,
    loaded: Loaded,
    path: PathBuf,
    queue_bytes: Option<usize>,
}

/// Opens the store of `[state]` (after moving it aside, with `--discard-state`) and reads it.
pub fn open(c: &StateCfg, node_id: &NodeId, discard: bool) -> anyhow::Result<Opened> {
    let path = c.path();
    if discard {
        if let Some(aside) = Store::discard(&path)? {
            warn!(
                target: "upf::state",
                "--discard-state: {} moved aside to {}; starting without sessions",
                path.display(),
                aside.display()
            );
        }
    }
    let t0 = Instant::now();
    let store = Store::open(&path, &node_id.to_string())?;
    let t1 = Instant::now();
    let loaded = store
        .load()
        .with_context(|| format!("state.path {}", path.display()))?;
    info!(
        target: "upf::state",
        "{}: checked in {} ms, {} sessions read in {} ms",
        path.display(),
        t1.duration_since(t0).as_millis(),
        loaded.sessions.len(),
        t1.elapsed().as_millis()
    );
    Ok(Opened {
        store,
        loaded,
        path,
        queue_bytes: c.queue_bytes,
    })
}

/// The store being written.
#[derive(Debug)]
pub struct Persist {
    writer: Writer,
    /// What the log last said of the store: failing or not, and the drops it reported.
    said_failing: bool,
    said_dropped: u64,
    /// The usage checkpoints read with the sessions, until `crate::checkpoint` takes them.
    usage: Vec<(u64, Vec<u8>)>,
}

/// Restores what the store held into the agent (our Recovery Time Stamp, associations,
/// sessions, installed in the data path) and starts recording the agent's changes.
pub fn resume<D: Datapath>(agent: &mut Agent<D>, o: Opened, now: Instant) -> Persist {
    let mut opts = WriterOptions::default();
    if let Some(b) = o.queue_bytes {
        opts.queue_bytes = b;
    }
    let writer = o.store.into_writer(opts);
    restore(agent, o.loaded, writer, &o.path.display().to_string(), now)
}

/// [`resume`] from what a store (`from`: the file, or a shard in etcd) held, recorded
/// from now on by `writer`.
pub fn restore<D: Datapath>(
    agent: &mut Agent<D>,
    loaded: Loaded,
    writer: Writer,
    from: &str,
    now: Instant,
) -> Persist {
    let Loaded {
        recovery,
        associations,
        sessions,
        mut usage,
    } = loaded;
    if let Some(rts) = recovery {
        let t0 = Instant::now();
        let r = agent.restore(now, rts, associations, sessions);
        info!(
            target: "upf::state",
            "restored {} associations and {} sessions from {from} in {} ms; Recovery Time Stamp {rts} kept",
            r.associations,
            r.sessions,
            t0.elapsed().as_millis()
        );
        for (key, why) in &r.failed {
            warn!(target: "upf::state", "{key} not restored: {why}");
        }
    } else {
        info!(target: "upf::state", "new store {from}");
        usage.clear();
    }
    record(agent, writer, usage)
}

/// Records the agent's changes with `writer` from now on (its state restored already, as a
/// mirror's is), `usage` the checkpoints to carry in.
pub fn record<D: Datapath>(
    agent: &mut Agent<D>,
    writer: Writer,
    usage: Vec<(u64, Vec<u8>)>,
) -> Persist {
    agent.track_changes();
    writer.submit(Op::SetRecovery(agent.recovery_time_stamp()));
    Persist {
        writer,
        said_failing: false,
        said_dropped: 0,
        usage,
    }
}

impl Persist {
    /// Hands what the agent changed to the writer.
    pub fn save<D: Datapath>(&self, agent: &mut Agent<D>) {
        let c = agent.take_changes();
        for (k, v) in c.associations {
            self.submit(match v {
                Some(v) => Op::PutAssociation(k, v),
                None => Op::DeleteAssociation(k),
            });
        }
        for (k, v) in c.sessions {
            self.submit(match v {
                Some(v) => Op::PutSession(k, v),
                None => Op::DeleteSession(k),
            });
        }
    }

    /// A write refused (the queue is full) is counted by the writer and said by [`watch`].
    ///
    /// [`watch`]: Persist::watch
    fn submit(&self, op: Op) {
        let _ = self.writer.submit(op);
    }

    /// Says in the log when the store starts or stops failing, and writes dropped since it
    /// last said so: a line per change, however many writes it concerns (the counts are in
    /// /metrics). Forwarding and PFCP go on meanwhile.
    pub fn watch(&mut self) {
        let st = self.writer.stats();
        if st.failing != self.said_failing {
            self.said_failing = st.failing;
            if st.failing {
                warn!(
                    target: "upf::state",
                    "writes failing ({}): {} records wait in memory, retried every 500 ms; sessions go on",
                    self.writer.last_error().unwrap_or_default(),
                    st.pending_ops
                );
            } else {
                info!(target: "upf::state", "writes succeed again; nothing waiting was lost");
            }
        }
        if st.dropped_ops > self.said_dropped {
            warn!(
                target: "upf::state",
                "{} writes dropped: state.queue_bytes was full; the store misses those records until their sessions change again",
                st.dropped_ops - self.said_dropped
            );
            self.said_dropped = st.dropped_ops;
        }
    }

    pub fn stats(&self) -> WriterStats {
        self.writer.stats()
    }

    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// The usage checkpoints the store held (once).
    pub fn take_usage(&mut self) -> Vec<(u64, Vec<u8>)> {
        std::mem::take(&mut self.usage)
    }

    /// Before stopping: what is queued, written (for at most `timeout`).
    pub fn close(self, timeout: Duration) {
        if !self.writer.flush(timeout) {
            warn!(target: "upf::state", "stopping with writes not on disk after {timeout:?}");
        }
        self.writer.close();
    }
}
