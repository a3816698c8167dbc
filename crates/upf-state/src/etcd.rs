//! The cluster store (#29): several instances share their state in etcd. Each shard (a UPF
//! identity: Node ID, addresses, TEID range, UE pools) keeps its records under
//! `{prefix}/shard/{name}/`, written by whichever instance serves it; who serves it is the
//! key `{prefix}/owner/{name}`, held by that instance's lease. When an instance dies its
//! lease expires, its owner keys go, and another instance takes the shard with a
//! transaction that succeeds only if nobody has it, then reads its records.
//!
//! Every write of a shard is a transaction that holds only while the owner key still names
//! the writer: an instance cut off from etcd long enough to lose its shards cannot overwrite
//! what the instance that took them over writes (it is fenced).
//!
//! etcd-client is async; the N4 thread must never wait on etcd. So the membership work runs
//! on a thread of its own ([`Cluster`]) and tells the N4 thread what happened through
//! [`Cluster::poll_event`], and each shard's [`Writer`] commits from its own thread.

use crate::writer::{Commit, CommitError, Pending, Writer, WriterOptions};
use crate::{pack, unpack, Loaded};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, Error, EventType, GetOptions, LeaseKeepAliveStream,
    LeaseKeeper, PutOptions, Txn, TxnOp, WatchOptions, WatchStream,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How an instance takes part in a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdOptions {
    /// `http://HOST:PORT`, one or more.
    pub endpoints: Vec<String>,
    /// Where the cluster's keys are (`/upf`).
    pub prefix: String,
    /// This instance's name, unique in the cluster: the value of the owner keys it holds.
    pub instance: String,
    /// The shards it may serve: its own first (taken at once), then those it takes over.
    pub shards: Vec<String>,
    /// Its lease's TTL: it loses its shards this long after it last reached etcd.
    pub lease_ttl: Duration,
    /// A shard nobody held while this instance watched (the whole cluster was down, or it
    /// was never started) is taken only after this long, so that its own instance, starting
    /// meanwhile, gets it. A shard whose owner key this instance saw go is taken at once.
    pub orphan_grace: Duration,
    /// The bound on each etcd request (and on connecting).
    pub timeout: Duration,
    /// A shard this instance took over is handed back when the instance whose own it is
    /// runs again ([`ClusterEvent::HandBack`]); without, it stays here.
    pub hand_back: bool,
    /// Shards another instance holds are mirrored here ([`ClusterEvent::Mirror`]): their
    /// records read once and then followed by an etcd watch, so that a takeover needs no
    /// read and, with the sessions kept installed, no restore.
    pub hot_standby: bool,
}

impl EtcdOptions {
    pub fn new(endpoints: Vec<String>, instance: &str, shards: Vec<String>) -> Self {
        Self {
            endpoints,
            prefix: "/upf".into(),
            instance: instance.into(),
            shards,
            lease_ttl: Duration::from_secs(2),
            orphan_grace: Duration::from_secs(20),
            timeout: Duration::from_secs(1),
            hand_back: true,
            hot_standby: true,
        }
    }
}

/// What the membership thread tells the N4 thread.
#[derive(Debug)]
pub enum ClusterEvent {
    /// This instance serves `shard` from now on: its state as etcd held it (empty for a
    /// shard never served before). `from` names the instance that held it last, when this
    /// is a takeover.
    Acquired {
        shard: String,
        from: Option<String>,
        state: Loaded,
        /// The shard was mirrored here: `state` is empty, its records are what the Mirror
        /// and MirrorChanges events said, all of them (the watch caught up first).
        mirrored: bool,
    },
    /// Another instance holds `shard`: its records now, to keep (a hot standby).
    Mirror {
        shard: String,
        state: Loaded,
    },
    /// What changed in a mirrored shard's records since, in order.
    MirrorChanges {
        shard: String,
        changes: Vec<Record>,
    },
    /// A mirror is no longer followed (its watch broke): drop it; it is mirrored afresh.
    Unmirror {
        shard: String,
    },
    /// Another instance serves `shard` now (this one's lease lapsed while it was cut off
    /// from etcd): stop serving it.
    Lost {
        shard: String,
        to: String,
    },
    /// This instance's own shard is served by another instance: it waits, and takes shards
    /// that become free.
    Held {
        shard: String,
        by: String,
    },
    /// The instance whose own shard `shard` is (`to`) runs again: once what this instance
    /// wrote of it is durable, it stops serving it and calls [`Cluster::release`], and `to`
    /// takes it at once.
    HandBack {
        shard: String,
        to: String,
    },
    /// etcd stopped answering (why), or answers again. Forwarding goes on either way.
    Unreachable(String),
    Reachable,
}

/// The membership thread: its lease, the shards it holds, the takeovers.
#[derive(Debug)]
pub struct Cluster {
    opts: EtcdOptions,
    events: mpsc::Receiver<ClusterEvent>,
    /// Shards to give up (after a hand-back), to the membership thread.
    release: mpsc::Sender<String>,
    stop: Arc<AtomicBool>,
    abandon: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Cluster {
    /// Starts the thread; it connects (and reconnects) on its own.
    pub fn start(opts: EtcdOptions) -> std::io::Result<Cluster> {
        let (tx, events) = mpsc::channel();
        let (release, released) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let abandon = Arc::new(AtomicBool::new(false));
        let thread = {
            let (opts, stop, abandon) = (opts.clone(), stop.clone(), abandon.clone());
            thread::Builder::new()
                .name("upf-etcd".into())
                .spawn(move || membership(&opts, &tx, &released, &stop, &abandon))?
        };
        Ok(Cluster {
            opts,
            events,
            release,
            stop,
            abandon,
            thread: Some(thread),
        })
    }

    /// The next thing that happened, if any (never waits).
    pub fn poll_event(&self) -> Option<ClusterEvent> {
        self.events.try_recv().ok()
    }

    /// Waits up to `timeout` for the next thing that happens.
    pub fn wait_event(&self, timeout: Duration) -> Option<ClusterEvent> {
        self.events.recv_timeout(timeout).ok()
    }

    /// Gives `shard` up (its owner key deleted, if still ours) so that the instance it was
    /// handed back to takes it: call once this instance stopped serving it and what it
    /// wrote of it is durable.
    pub fn release(&self, shard: &str) {
        let _ = self.release.send(shard.to_string());
    }

    /// The writer of `shard`'s records, fenced by this instance's ownership of it.
    pub fn writer(&self, shard: &str, opts: WriterOptions) -> Writer {
        let keys = Keys::new(&self.opts.prefix, shard);
        let commit = EtcdCommit {
            opts: self.opts.clone(),
            owner: keys.owner.clone(),
            keys,
            rt: None,
            client: None,
        };
        Writer::spawn(format!("etcd {}", commit.keys.base), Box::new(commit), opts)
    }

    /// Gives the shards up at once (revokes the lease: the others take them over without
    /// waiting for it to expire) and stops the thread.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Stops the thread without giving anything up, as a crash would: the shards go when
    /// the lease expires (tests).
    pub fn abandon(mut self) {
        self.abandon.store(true, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The keys of one shard.
#[derive(Debug, Clone)]
struct Keys {
    /// `{prefix}/shard/{name}/`
    base: String,
    owner: String,
}

impl Keys {
    fn new(prefix: &str, shard: &str) -> Self {
        let prefix = prefix.trim_end_matches('/');
        Self {
            base: format!("{prefix}/shard/{shard}/"),
            owner: format!("{prefix}/owner/{shard}"),
        }
    }
    fn recovery(&self) -> String {
        format!("{}recovery", self.base)
    }
    fn association(&self, node: &[u8]) -> String {
        format!("{}a/{}", self.base, hex(node))
    }
    fn session(&self, seid: u64) -> String {
        format!("{}s/{seid:016x}", self.base)
    }
    fn usage(&self, seid: u64) -> String {
        format!("{}u/{seid:016x}", self.base)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The smallest key after every key that starts with `p`.
fn prefix_end(p: &str) -> Vec<u8> {
    let mut end = p.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// etcd's limit on the operations of one transaction (`--max-txn-ops`, 128 by default),
/// less the owner check's.
const TXN_OPS: usize = 127;

/// Keys read per request while loading a shard (gRPC's default message limit is 4 MiB; a
/// record is ~0.3-1 KB packed).
const LOAD_PAGE: i64 = 2000;

async fn connect(o: &EtcdOptions) -> Result<Client, etcd_client::Error> {
    let c = ConnectOptions::new()
        .with_connect_timeout(o.timeout)
        .with_timeout(o.timeout);
    Client::connect(&o.endpoints, Some(c)).await
}

/// Reads a shard's records: what a takeover resumes.
async fn load(client: &mut Client, keys: &Keys) -> Result<Loaded, etcd_client::Error> {
    Ok(load_at(client, keys).await?.0)
}

/// [`load`], and the revision it read (every page at the same one).
async fn load_at(client: &mut Client, keys: &Keys) -> Result<(Loaded, i64), etcd_client::Error> {
    let mut out = Loaded::default();
    let end = prefix_end(&keys.base);
    let mut from = keys.base.as_bytes().to_vec();
    let mut revision = 0;
    loop {
        let mut o = GetOptions::new()
            .with_range(end.clone())
            .with_limit(LOAD_PAGE);
        if revision > 0 {
            o = o.with_revision(revision);
        }
        let r = client.get(from.clone(), Some(o)).await?;
        if revision == 0 {
            revision = r.header().map_or(0, |h| h.revision());
        }
        for kv in r.kvs() {
            match record(keys, kv.key(), Some(kv.value())) {
                Some(Record::Recovery(v)) => out.recovery = Some(v),
                Some(Record::Association(k, v)) => {
                    out.associations.push((k, v.unwrap_or_default()))
                }
                Some(Record::Session(s, v)) => out.sessions.push((s, v.unwrap_or_default())),
                Some(Record::Usage(s, v)) => out.usage.push((s, v.unwrap_or_default())),
                None => {}
            }
        }
        match r.kvs().last() {
            Some(last) if r.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => break,
        }
    }
    Ok((out, revision))
}

/// A change to one of a shard's records (`None`: deleted), as a hot standby receives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Recovery(u32),
    /// By the peer's Node ID key.
    Association(Vec<u8>, Option<Vec<u8>>),
    /// By UP SEID.
    Session(u64, Option<Vec<u8>>),
    Usage(u64, Option<Vec<u8>>),
}

/// The record a key of `keys`'s shard holds, `value` unpacked (None: a deletion). A value
/// that does not unpack is handed on empty: the agent reports its session lost (and
/// deletes it), as it does a record that does not read back.
fn record(keys: &Keys, key: &[u8], value: Option<&[u8]>) -> Option<Record> {
    let rest = std::str::from_utf8(key).ok()?.strip_prefix(&keys.base)?;
    if rest == "recovery" {
        return value?
            .try_into()
            .ok()
            .map(u32::from_le_bytes)
            .map(Record::Recovery);
    }
    let v = value.map(|v| unpack(v).unwrap_or_default());
    if let Some(n) = rest.strip_prefix("a/").and_then(unhex) {
        Some(Record::Association(n, v))
    } else if let Some(s) = rest.strip_prefix("s/").and_then(seid) {
        Some(Record::Session(s, v))
    } else {
        rest.strip_prefix("u/")
            .and_then(seid)
            .map(|s| Record::Usage(s, v))
    }
}

fn seid(hex: &str) -> Option<u64> {
    u64::from_str_radix(hex, 16).ok()
}

/// A shard's writes: each batch in transactions of at most [`TXN_OPS`] operations, each
/// holding only while this instance owns the shard.
struct EtcdCommit {
    opts: EtcdOptions,
    keys: Keys,
    owner: String,
    rt: Option<tokio::runtime::Runtime>,
    client: Option<Client>,
}

impl fmt::Debug for EtcdCommit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCommit")
            .field("keys", &self.keys)
            .finish()
    }
}

impl EtcdCommit {
    fn ops(&self, b: &Pending) -> Vec<TxnOp> {
        let mut ops = Vec::with_capacity(b.len());
        if let Some(r) = b.recovery {
            ops.push(TxnOp::put(self.keys.recovery(), r.to_le_bytes(), None));
        }
        for (k, v) in &b.associations {
            let key = self.keys.association(k);
            ops.push(match v {
                Some(v) => TxnOp::put(key, pack(v), None),
                None => TxnOp::delete(key, None),
            });
        }
        for (s, v) in &b.sessions {
            ops.push(match v {
                Some(v) => TxnOp::put(self.keys.session(*s), pack(v), None),
                None => TxnOp::delete(self.keys.session(*s), None),
            });
        }
        for (s, v) in &b.usage {
            ops.push(match v {
                Some(v) => TxnOp::put(self.keys.usage(*s), pack(v), None),
                None => TxnOp::delete(self.keys.usage(*s), None),
            });
        }
        ops
    }
}

impl Commit for EtcdCommit {
    fn commit(&mut self, batch: &Pending) -> Result<(), CommitError> {
        let ops = self.ops(batch);
        let rt = match &mut self.rt {
            Some(rt) => rt,
            None => self.rt.insert(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?,
            ),
        };
        let (opts, owner, client) = (&self.opts, &self.owner, &mut self.client);
        let r: Result<(), CommitError> = rt.block_on(async {
            let c = match client {
                Some(c) => c,
                None => client.insert(connect(opts).await?),
            };
            let mut ops = ops.into_iter().peekable();
            while ops.peek().is_some() {
                let chunk: Vec<TxnOp> = ops.by_ref().take(TXN_OPS).collect();
                let txn = Txn::new()
                    .when([Compare::value(
                        owner.as_str(),
                        CompareOp::Equal,
                        opts.instance.as_str(),
                    )])
                    .and_then(chunk);
                if !c.txn(txn).await?.succeeded() {
                    return Err(CommitError::Fenced);
                }
            }
            Ok(())
        });
        if matches!(r, Err(CommitError::Retry(_))) {
            // A new connection for the next attempt.
            self.client = None;
        }
        r
    }
}

/// What the membership thread knows.
struct Member {
    client: Option<Client>,
    lease: Option<Lease>,
    /// The shards this instance holds.
    ours: BTreeSet<String>,
    /// Shards seen held by another instance (their owner's name): taken at once if freed.
    held_by: HashMap<String, String>,
    /// Shards nobody held, since when.
    free_since: HashMap<String, Instant>,
    /// The Held event was sent for the home shard.
    said_held: bool,
    reachable: bool,
    /// This instance's member key is under the current lease.
    member: bool,
    /// Shards whose HandBack event was sent, until released.
    handing_back: BTreeSet<String>,
    /// The watches of the shards mirrored here.
    mirrors: HashMap<String, WatchStream>,
}

struct Lease {
    id: i64,
    /// The keep-alive stream, on the current connection (a new one after a reconnect).
    keeper: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    renewed: Instant,
}

/// The membership thread's body: a step every tick until stopped.
fn membership(
    opts: &EtcdOptions,
    tx: &mpsc::Sender<ClusterEvent>,
    released: &mpsc::Receiver<String>,
    stop: &AtomicBool,
    abandon: &AtomicBool,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = tx.send(ClusterEvent::Unreachable(format!("tokio: {e}")));
            return;
        }
    };
    let mut m = Member {
        client: None,
        lease: None,
        ours: BTreeSet::new(),
        held_by: HashMap::new(),
        free_since: HashMap::new(),
        said_held: false,
        reachable: true,
        member: false,
        handing_back: BTreeSet::new(),
        mirrors: HashMap::new(),
    };
    let tick = (opts.lease_ttl / 8).clamp(Duration::from_millis(50), Duration::from_millis(250));
    let mut to_release: Vec<String> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        to_release.extend(released.try_iter());
        let r = rt.block_on(async {
            // Kept until done: a shard nobody serves must not stay ours.
            while let Some(shard) = to_release.first() {
                release(opts, &mut m, shard).await?;
                to_release.remove(0);
            }
            step(opts, &mut m, tx).await
        });
        match r {
            Ok(()) if !m.reachable => {
                m.reachable = true;
                let _ = tx.send(ClusterEvent::Reachable);
            }
            Err(e) => {
                m.client = None;
                if let Some(l) = &mut m.lease {
                    l.keeper = None;
                }
                // The watches went with the connection: mirrored afresh once it is back.
                for shard in std::mem::take(&mut m.mirrors).into_keys() {
                    let _ = tx.send(ClusterEvent::Unmirror { shard });
                }
                if m.reachable {
                    m.reachable = false;
                    let _ = tx.send(ClusterEvent::Unreachable(e.to_string()));
                }
            }
            Ok(()) => {}
        }
        thread::sleep(tick);
    }
    // Stopping: the shards go to the others now rather than when the lease expires.
    if abandon.load(Ordering::Relaxed) {
        return;
    }
    if let (Some(c), Some(l)) = (m.client.as_mut(), m.lease.as_ref()) {
        let _ = rt.block_on(c.lease_revoke(l.id));
    }
}

/// One look at etcd: the lease renewed, the owner keys read, our shards checked, free ones
/// taken.
async fn step(
    o: &EtcdOptions,
    m: &mut Member,
    tx: &mpsc::Sender<ClusterEvent>,
) -> Result<(), etcd_client::Error> {
    let c = match &mut m.client {
        Some(c) => c,
        None => m.client.insert(connect(o).await?),
    };
    // The lease: renewed every third of its TTL; one that expired (we were cut off) is
    // replaced, and our owner keys went with it.
    let now = Instant::now();
    if let Some(l) = &mut m.lease {
        if now.duration_since(l.renewed) >= o.lease_ttl / 3 {
            let (keeper, stream) = match &mut l.keeper {
                Some(k) => k,
                None => l.keeper.insert(c.lease_keep_alive(l.id).await?),
            };
            // Bounded: a stream to an etcd that stopped answering would wait forever.
            let renewed = tokio::time::timeout(o.timeout, async {
                keeper.keep_alive().await?;
                stream.message().await
            })
            .await
            .map_err(|_| Error::LeaseKeepAliveError("no answer to a lease renewal".into()))??;
            match renewed {
                Some(r) if r.ttl() > 0 => l.renewed = now,
                _ => m.lease = None,
            }
        }
    }
    let lease = match &m.lease {
        Some(l) => l.id,
        None => {
            let ttl = i64::try_from(o.lease_ttl.as_secs())
                .unwrap_or(i64::MAX)
                .max(2);
            let id = c.lease_grant(ttl, None).await?.id();
            m.lease = Some(Lease {
                id,
                keeper: Some(c.lease_keep_alive(id).await?),
                renewed: now,
            });
            m.member = false;
            id
        }
    };
    // Our member key: who runs, and whose own shard it is (for hand-backs).
    let members_prefix = format!("{}/member/", o.prefix.trim_end_matches('/'));
    let home = o.shards.first().cloned().unwrap_or_default();
    if !m.member {
        let key = format!("{members_prefix}{}", o.instance);
        c.put(
            key,
            home.as_str(),
            Some(PutOptions::new().with_lease(lease)),
        )
        .await?;
        m.member = true;
    }
    let owners_prefix = Keys::new(&o.prefix, "").owner;
    let r = c
        .get(
            owners_prefix.as_str(),
            Some(GetOptions::new().with_prefix()),
        )
        .await?;
    let owners: BTreeMap<String, String> = r
        .kvs()
        .iter()
        .filter_map(|kv| {
            let shard = kv.key_str().ok()?.strip_prefix(&owners_prefix)?;
            Some((shard.to_string(), kv.value_str().ok()?.to_string()))
        })
        .collect();
    // Ours: still ours, or taken while we were cut off.
    for shard in m.ours.clone() {
        match owners.get(&shard) {
            Some(by) if *by == o.instance => {}
            Some(by) => {
                m.ours.remove(&shard);
                let _ = tx.send(ClusterEvent::Lost {
                    shard,
                    to: by.clone(),
                });
            }
            // Our lease expired and took the key: ours again if nobody took it.
            None => {
                if acquire(c, o, &shard, lease).await?.is_none() {
                    m.ours.remove(&shard);
                    let to = owner_of(c, o, &shard).await?.unwrap_or_default();
                    let _ = tx.send(ClusterEvent::Lost { shard, to });
                }
            }
        }
    }
    // Shards we took over whose own instance runs again: handed back.
    if o.hand_back {
        let r = c
            .get(
                members_prefix.as_str(),
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        for kv in r.kvs() {
            let (Ok(key), Ok(theirs)) = (kv.key_str(), kv.value_str()) else {
                continue;
            };
            let who = key.strip_prefix(&members_prefix).unwrap_or_default();
            if who != o.instance
                && theirs != home
                && m.ours.contains(theirs)
                && m.handing_back.insert(theirs.to_string())
            {
                let _ = tx.send(ClusterEvent::HandBack {
                    shard: theirs.to_string(),
                    to: who.to_string(),
                });
            }
        }
    }
    if o.hot_standby {
        mirror(c, o, (&m.ours, &mut m.mirrors), &owners, tx).await?;
    }
    // The others: taken when free, at once if we saw their owner go.
    for (i, shard) in o.shards.iter().enumerate() {
        if m.ours.contains(shard) {
            continue;
        }
        let home = i == 0;
        if let Some(by) = owners.get(shard) {
            if home && !m.said_held && *by != o.instance {
                m.said_held = true;
                let _ = tx.send(ClusterEvent::Held {
                    shard: shard.clone(),
                    by: by.clone(),
                });
            }
            m.held_by.insert(shard.clone(), by.clone());
            m.free_since.remove(shard);
            continue;
        }
        let from = m.held_by.get(shard).cloned();
        let since = *m.free_since.entry(shard.clone()).or_insert(now);
        let due = home || from.is_some() || now.duration_since(since) >= o.orphan_grace;
        if !due {
            continue;
        }
        let Some(at) = acquire(c, o, shard, lease).await? else {
            continue;
        };
        let keys = Keys::new(&o.prefix, shard);
        // Mirrored: what the watch has not said yet, up to the takeover's revision.
        let mirrored = match m.mirrors.remove(shard) {
            Some(mut w) => match catch_up(&mut w, &keys, at, o.timeout).await {
                Ok(changes) => {
                    if !changes.is_empty() {
                        let _ = tx.send(ClusterEvent::MirrorChanges {
                            shard: shard.clone(),
                            changes,
                        });
                    }
                    true
                }
                Err(_) => {
                    let _ = tx.send(ClusterEvent::Unmirror {
                        shard: shard.clone(),
                    });
                    false
                }
            },
            None => false,
        };
        let state = match mirrored {
            true => Loaded::default(),
            false => match load(c, &keys).await {
                Ok(s) => s,
                Err(e) => {
                    // Not served without its state: given back, tried again next step.
                    let _ = c.delete(keys.owner, None).await;
                    return Err(e);
                }
            },
        };
        m.ours.insert(shard.clone());
        m.held_by.remove(shard);
        m.free_since.remove(shard);
        let _ = tx.send(ClusterEvent::Acquired {
            shard: shard.clone(),
            from: from.filter(|f| *f != o.instance),
            state,
            mirrored,
        });
    }
    Ok(())
}

/// Gives up `shard` after a hand-back: its owner key deleted if it still names us.
async fn release(o: &EtcdOptions, m: &mut Member, shard: &str) -> Result<(), etcd_client::Error> {
    let c = match &mut m.client {
        Some(c) => c,
        None => m.client.insert(connect(o).await?),
    };
    let key = Keys::new(&o.prefix, shard).owner;
    let txn = Txn::new()
        .when([Compare::value(
            key.as_str(),
            CompareOp::Equal,
            o.instance.as_str(),
        )])
        .and_then([TxnOp::delete(key.as_str(), None)]);
    c.txn(txn).await?;
    m.ours.remove(shard);
    m.handing_back.remove(shard);
    // Not taken again before its own instance does (it saw us hold it: it takes it at
    // once); after the grace, if that instance went meanwhile.
    m.free_since.insert(shard.to_string(), Instant::now());
    Ok(())
}

/// Mirrors the shards another instance holds that are not mirrored yet (their records read
/// and a watch started from that revision), and hands on what every mirror's watch said
/// since the last step.
async fn mirror(
    c: &mut Client,
    o: &EtcdOptions,
    (ours, mirrors): (&BTreeSet<String>, &mut HashMap<String, WatchStream>),
    owners: &BTreeMap<String, String>,
    tx: &mpsc::Sender<ClusterEvent>,
) -> Result<(), etcd_client::Error> {
    for shard in &o.shards {
        let held = owners.get(shard).is_some_and(|by| *by != o.instance);
        if !held || ours.contains(shard) || mirrors.contains_key(shard) {
            continue;
        }
        let keys = Keys::new(&o.prefix, shard);
        let (state, revision) = load_at(c, &keys).await?;
        let w = c
            .watch(
                keys.base.as_str(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(revision + 1),
                ),
            )
            .await?;
        mirrors.insert(shard.clone(), w);
        let _ = tx.send(ClusterEvent::Mirror {
            shard: shard.clone(),
            state,
        });
    }
    let mut broken = Vec::new();
    for (shard, w) in mirrors.iter_mut() {
        let keys = Keys::new(&o.prefix, shard);
        let mut changes = Vec::new();
        loop {
            // What has arrived; a mirror waits for nothing.
            match tokio::time::timeout(Duration::from_millis(1), w.message()).await {
                Err(_) => break,
                Ok(Ok(Some(r))) if !r.canceled() => changes.extend(changes_of(&keys, &r)),
                Ok(_) => {
                    broken.push(shard.clone());
                    break;
                }
            }
        }
        if !changes.is_empty() {
            let _ = tx.send(ClusterEvent::MirrorChanges {
                shard: shard.clone(),
                changes,
            });
        }
    }
    for shard in broken {
        mirrors.remove(&shard);
        let _ = tx.send(ClusterEvent::Unmirror { shard });
    }
    Ok(())
}

/// The records a watch response changed.
fn changes_of(keys: &Keys, r: &etcd_client::WatchResponse) -> Vec<Record> {
    r.events()
        .iter()
        .filter_map(|e| {
            let kv = e.kv()?;
            let value = (e.event_type() == EventType::Put).then(|| kv.value());
            record(keys, kv.key(), value)
        })
        .collect()
}

/// The changes of a mirrored shard's watch up to revision `to` (the takeover's): a progress
/// request, then what arrives until a response at `to` or later (within `timeout`).
async fn catch_up(
    w: &mut WatchStream,
    keys: &Keys,
    to: i64,
    timeout: Duration,
) -> Result<Vec<Record>, etcd_client::Error> {
    w.request_progress().await?;
    let mut changes = Vec::new();
    tokio::time::timeout(timeout, async {
        loop {
            let Some(r) = w.message().await? else {
                return Err(Error::WatchError("the watch ended".into()));
            };
            changes.extend(changes_of(keys, &r));
            if r.canceled() {
                return Err(Error::WatchError("the watch was canceled".into()));
            }
            if r.header().is_some_and(|h| h.revision() >= to) {
                return Ok(());
            }
        }
    })
    .await
    .map_err(|_| Error::WatchError("no progress within the timeout".into()))??;
    Ok(changes)
}

/// Takes `shard` under `lease` if nobody holds it: the revision it took it at.
async fn acquire(
    c: &mut Client,
    o: &EtcdOptions,
    shard: &str,
    lease: i64,
) -> Result<Option<i64>, etcd_client::Error> {
    let key = Keys::new(&o.prefix, shard).owner;
    let txn = Txn::new()
        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key.as_str(),
            o.instance.as_str(),
            Some(PutOptions::new().with_lease(lease)),
        )]);
    let r = c.txn(txn).await?;
    Ok(r.succeeded()
        .then(|| r.header().map_or(0, |h| h.revision())))
}

async fn owner_of(
    c: &mut Client,
    o: &EtcdOptions,
    shard: &str,
) -> Result<Option<String>, etcd_client::Error> {
    let r = c.get(Keys::new(&o.prefix, shard).owner, None).await?;
    Ok(r.kvs()
        .first()
        .and_then(|kv| kv.value_str().ok())
        .map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_back() {
        let k = Keys::new("/upf/", "a");
        assert_eq!(k.session(0x1f), "/upf/shard/a/s/000000000000001f");
        assert_eq!(k.owner, "/upf/owner/a");
        assert_eq!(unhex(&hex(b"\x00\xffx")), Some(b"\x00\xffx".to_vec()));
        assert_eq!(prefix_end("/upf/shard/a/"), b"/upf/shard/a0".to_vec());
    }
}
