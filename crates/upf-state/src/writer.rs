//! The writer thread: ops queue in memory (coalesced by key), one thread commits all that is
//! pending in one durable transaction at a time, and keeps what a failed commit held until a
//! retry succeeds.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::error::Error;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redb::Database;

use crate::{
    begin_write, guarded, open_db, scan_rows, Rows, Store, ASSOCIATIONS, KEY_RECOVERY, META,
    SESSIONS, USAGE,
};

/// How much a [`Writer`] may hold in memory, and how it retries a failed commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// The bound on bytes submitted but not yet durable (keys + values, coalesced): past it
    /// [`Writer::submit`] refuses ops instead of growing without limit while the disk is slow
    /// or full. Default 64 MiB.
    pub queue_bytes: usize,
    /// The wait after a failed commit before the next attempt. Default 500 ms.
    pub retry: Duration,
    /// The least time between two commits: what changes meanwhile goes in the next one.
    /// Each commit costs the writer ~0.3 ms of CPU (page flushes, the allocator state) on
    /// top of its records, taken from the N4 thread when they share a core. Default 10 ms:
    /// a change is on disk at most ~10 ms plus a commit after it was made.
    pub commit_interval: Duration,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            queue_bytes: 64 << 20,
            retry: Duration::from_millis(500),
            commit_interval: Duration::from_millis(10),
        }
    }
}

/// One change to the state. Ops on the same key coalesce: only the latest reaches the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// The UPF's Recovery Time Stamp (`meta.recovery`).
    SetRecovery(u32),
    /// An association's record, by the peer's Node ID.
    PutAssociation(Vec<u8>, Vec<u8>),
    /// Removes an association's record.
    DeleteAssociation(Vec<u8>),
    /// A session's record, by UP SEID.
    PutSession(u64, Vec<u8>),
    /// Removes a session's record and its usage checkpoint.
    DeleteSession(u64),
    /// A session's usage checkpoint, by UP SEID.
    PutUsage(u64, Vec<u8>),
}

/// What a [`Writer`] has done, for the caller to export or log (this crate logs nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed.
    pub commits: u64,
    /// Rows written or deleted (after coalescing).
    pub ops_written: u64,
    /// Bytes of keys and values written.
    pub bytes_written: u64,
    /// Rows submitted and not yet durable (queued or being committed).
    pub pending_ops: u64,
    /// Their bytes: what [`WriterOptions::queue_bytes`] bounds.
    pub pending_bytes: u64,
    /// Ops refused by [`Writer::submit`] (queue full, or writer closed).
    pub dropped_ops: u64,
    /// Their bytes.
    pub dropped_bytes: u64,
    /// Commits (or reopens of the file after one) that failed.
    pub write_errors: u64,
    /// The last commit failed (e.g. disk full) and is being retried.
    pub failing: bool,
    /// The store stopped taking this writer's commits (another instance serves its shard):
    /// the writer has stopped, and what it held is dropped.
    pub fenced: bool,
}

impl WriterStats {
    /// Adds `o`'s (the writers of several shards, one figure): counts summed, `failing`
    /// and `fenced` if either is.
    pub fn add(&mut self, o: &WriterStats) {
        self.commits += o.commits;
        self.ops_written += o.ops_written;
        self.bytes_written += o.bytes_written;
        self.pending_ops += o.pending_ops;
        self.pending_bytes += o.pending_bytes;
        self.dropped_ops += o.dropped_ops;
        self.dropped_bytes += o.dropped_bytes;
        self.write_errors += o.write_errors;
        self.failing |= o.failing;
        self.fenced |= o.fenced;
    }
}

/// Where a [`Writer`] commits its batches: the redb file, or etcd (crate::etcd). A commit
/// writes the whole batch durably or fails; a failed one is retried with what was queued
/// since merged in.
pub(crate) trait Commit: Send + 'static {
    fn commit(&mut self, batch: &Pending) -> Result<(), CommitError>;
}

/// Why a commit did not happen.
#[derive(Debug)]
pub(crate) enum CommitError {
    /// Retried after `retry` (a full disk, etcd unreachable).
    Retry(Box<dyn Error>),
    /// The store is no longer ours to write (another instance serves the shard): what is
    /// pending and whatever comes later is dropped.
    Fenced,
}

impl<E: Into<Box<dyn Error>>> From<E> for CommitError {
    fn from(e: E) -> Self {
        CommitError::Retry(e.into())
    }
}

/// The redb file's commits.
struct FileCommit {
    db: Option<Database>,
    path: PathBuf,
    /// Each session's row as committed; read from the file at the first commit unless the
    /// store's load read it.
    rows: Option<Rows>,
}

impl Commit for FileCommit {
    fn commit(&mut self, batch: &Pending) -> Result<(), CommitError> {
        let r = write(&mut self.db, &self.path, &mut self.rows, batch);
        if r.is_err() {
            // redb fails every later operation of a handle whose I/O failed: the next
            // attempt reopens the file.
            self.db = None;
        }
        Ok(r?)
    }
}

/// The handle of the writer thread: clone it freely. The thread ends when [`Writer::close`] is
/// called or the last handle is dropped, after writing what is pending.
#[derive(Clone)]
pub struct Writer {
    handle: Arc<Handle>,
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("to", &self.handle.shared.to)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A failed commit while closing is retried this many times, then the thread gives up rather
/// than hold the process's exit forever on a full disk.
const CLOSE_ATTEMPTS: u32 = 3;

impl Writer {
    pub(crate) fn start(store: Store, opts: WriterOptions) -> Writer {
        let commit = FileCommit {
            db: Some(store.db),
            path: store.path.clone(),
            rows: store.rows.into_inner(),
        };
        Self::spawn(store.path.display().to_string(), Box::new(commit), opts)
    }

    /// A writer thread committing to `to` (`what` names it in Debug).
    pub(crate) fn spawn(what: String, mut to: Box<dyn Commit>, opts: WriterOptions) -> Writer {
        let shared = Arc::new(Shared {
            to: what,
            opts,
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("upf-state".into())
                .spawn(move || run(&shared, &mut *to))
                .expect("spawning the upf-state thread")
        };
        Writer {
            handle: Arc::new(Handle {
                shared,
                thread: Mutex::new(Some(thread)),
            }),
        }
    }

    /// Queues an op; never blocks on the disk. Ops on the same key coalesce (only the latest
    /// value of a key is written; a delete replaces a pending put). Returns false, and counts
    /// the op in `dropped_ops`/`dropped_bytes`, when the pending bytes would exceed
    /// `queue_bytes` (an op that shrinks the pending bytes, such as a delete replacing a put,
    /// is always taken), or when the writer is closed.
    pub fn submit(&self, op: Op) -> bool {
        let shared = &self.handle.shared;
        let mut st = shared.lock();
        let (old, new) = st.queued.cost_change(&op);
        let total = st.queued_bytes + st.inflight_bytes;
        let over = new > old && total - old + new > shared.opts.queue_bytes;
        if st.closing || over {
            st.stats.dropped_ops += 1;
            st.stats.dropped_bytes += op_bytes(&op) as u64;
            return false;
        }
        st.queued.apply(op);
        st.queued_bytes = st.queued_bytes - old + new;
        st.submitted += 1;
        let idle = std::mem::take(&mut st.idle);
        drop(st);
        if idle {
            shared.work.notify_one();
        }
        true
    }

    /// Blocks until everything submitted before the call is committed durably, or `timeout`;
    /// returns whether it was.
    pub fn flush(&self, timeout: Duration) -> bool {
        let shared = &self.handle.shared;
        let deadline = Instant::now().checked_add(timeout);
        let mut st = shared.lock();
        let target = st.submitted;
        while st.durable < target {
            if st.stopped {
                return false;
            }
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(w) if !w.is_zero() => w,
                    _ => return false,
                },
                None => Duration::from_secs(3600),
            };
            st = shared
                .done
                .wait_timeout(st, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// How many ops [`Writer::submit`] has accepted so far: a mark for [`Writer::durable`].
    pub fn submitted(&self) -> u64 {
        self.handle.shared.lock().submitted
    }

    /// How many of them are committed durably (after a failed commit, none of what it held
    /// until a retry succeeds). Everything submitted before [`Writer::submitted`] returned
    /// `n` is on disk once this is `>= n`: what a message the UPF sends may depend on.
    pub fn durable(&self) -> u64 {
        self.handle.shared.lock().durable
    }

    /// The counters, and what is pending now.
    pub fn stats(&self) -> WriterStats {
        let st = self.handle.shared.lock();
        WriterStats {
            pending_ops: (st.queued.len() + st.inflight_ops) as u64,
            pending_bytes: (st.queued_bytes + st.inflight_bytes) as u64,
            ..st.stats
        }
    }

    /// Why the last failed commit failed (the disk's or etcd's error), if one did.
    pub fn last_error(&self) -> Option<String> {
        self.handle.shared.lock().last_error.clone()
    }

    /// Tests: makes every commit fail (`true`) or not.
    #[cfg(test)]
    pub(crate) fn fail_commits(&self, fail: bool) {
        self.handle.shared.lock().fail_commits = fail;
        self.handle.shared.work.notify_all();
    }

    /// Flushes and stops the thread (also on drop of the last handle: the thread ends when every
    /// Writer is dropped, after writing what is pending). Other handles' submits then return
    /// false. On a disk that keeps failing the thread gives up after a few retries, and what it
    /// could not write is lost.
    pub fn close(self) {
        self.handle.stop();
    }
}

#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Handle {
    fn stop(&self) {
        self.shared.lock().closing = true;
        self.shared.work.notify_all();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            // A panic of the thread has nothing left for us to do; its pending ops are lost.
            let _ = thread.join();
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.stop();
    }
}

#[derive(Debug)]
struct Shared {
    /// What it writes to, for Debug.
    to: String,
    opts: WriterOptions,
    state: Mutex<State>,
    /// Signalled on submit and close: the thread waits on it for work.
    work: Condvar,
    /// Signalled after each commit and when the thread ends: flush waits on it.
    done: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug, Default)]
struct State {
    /// Ops submitted and not yet taken by the thread.
    queued: Pending,
    queued_bytes: usize,
    /// The batch the thread is committing.
    inflight_ops: usize,
    inflight_bytes: usize,
    /// Ops accepted by submit, ever; `durable` is how many of them are committed.
    submitted: u64,
    durable: u64,
    closing: bool,
    stopped: bool,
    /// The thread waits for work (not for its commit interval): a submit wakes it. Waking it
    /// on every submit cost the N4 thread a futex call and, on a shared core, a switch.
    idle: bool,
    stats: WriterStats,
    /// Why the last failed commit failed.
    last_error: Option<String>,
    /// Tests: every commit fails (as on a full disk), without root.
    #[cfg(test)]
    fail_commits: bool,
}

/// Ops coalesced by key: `None` is a delete.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub recovery: Option<u32>,
    pub associations: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    pub sessions: BTreeMap<u64, Option<Vec<u8>>>,
    pub usage: BTreeMap<u64, Option<Vec<u8>>>,
}

const SEID_BYTES: usize = 8;

fn row_bytes(key: usize, value: Option<&Vec<u8>>) -> usize {
    key + value.map_or(0, Vec::len)
}

fn op_bytes(op: &Op) -> usize {
    match op {
        Op::SetRecovery(_) => 4,
        Op::PutAssociation(k, v) => k.len() + v.len(),
        Op::DeleteAssociation(k) => k.len(),
        Op::PutSession(_, v) | Op::PutUsage(_, v) => SEID_BYTES + v.len(),
        Op::DeleteSession(_) => 2 * SEID_BYTES,
    }
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(self.recovery.is_some())
            + self.associations.len()
            + self.sessions.len()
            + self.usage.len()
    }

    /// The bytes of the rows `op` replaces here, and of the rows it leaves.
    fn cost_change(&self, op: &Op) -> (usize, usize) {
        let assoc = |k: &Vec<u8>| {
            self.associations
                .get(k)
                .map_or(0, |v| row_bytes(k.len(), v.as_ref()))
        };
        let seid = |m: &BTreeMap<u64, Option<Vec<u8>>>, s: &u64| {
            m.get(s).map_or(0, |v| row_bytes(SEID_BYTES, v.as_ref()))
        };
        let old = match op {
            Op::SetRecovery(_) => 4 * usize::from(self.recovery.is_some()),
            Op::PutAssociation(k, _) | Op::DeleteAssociation(k) => assoc(k),
            Op::PutSession(s, _) => seid(&self.sessions, s),
            Op::PutUsage(s, _) => seid(&self.usage, s),
            Op::DeleteSession(s) => seid(&self.sessions, s) + seid(&self.usage, s),
        };
        (old, op_bytes(op))
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::SetRecovery(r) => self.recovery = Some(r),
            Op::PutAssociation(k, v) => {
                self.associations.insert(k, Some(v));
            }
            Op::DeleteAssociation(k) => {
                self.associations.insert(k, None);
            }
            Op::PutSession(s, v) => {
                self.sessions.insert(s, Some(v));
            }
            Op::DeleteSession(s) => {
                self.sessions.insert(s, None);
                self.usage.insert(s, None);
            }
            Op::PutUsage(s, v) => {
                self.usage.insert(s, Some(v));
            }
        }
    }

    fn bytes(&self) -> usize {
        4 * usize::from(self.recovery.is_some())
            + self
                .associations
                .iter()
                .map(|(k, v)| row_bytes(k.len(), v.as_ref()))
                .sum::<usize>()
            + [&self.sessions, &self.usage]
                .iter()
                .flat_map(|m| m.values())
                .map(|v| row_bytes(SEID_BYTES, v.as_ref()))
                .sum::<usize>()
    }

    /// Puts back the rows of a batch that failed, under the newer ones queued since: returns the
    /// bytes added.
    fn merge_older(&mut self, older: Pending) -> usize {
        let mut added = 0;
        if self.recovery.is_none() && older.recovery.is_some() {
            self.recovery = older.recovery;
            added += 4;
        }
        for (k, v) in older.associations {
            if let Entry::Vacant(e) = self.associations.entry(k) {
                added += row_bytes(e.key().len(), v.as_ref());
                e.insert(v);
            }
        }
        for (mine, theirs) in [
            (&mut self.sessions, older.sessions),
            (&mut self.usage, older.usage),
        ] {
            for (s, v) in theirs {
                mine.entry(s).or_insert_with(|| {
                    added += row_bytes(SEID_BYTES, v.as_ref());
                    v
                });
            }
        }
        added
    }
}

fn run(shared: &Shared, to: &mut dyn Commit) {
    let mut close_failures = 0;
    loop {
        let (batch, upto) = {
            let mut st = shared.lock();
            while st.queued.is_empty() && !st.closing {
                st.idle = true;
                st = shared.work.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            st.idle = false;
            if st.queued.is_empty() {
                break;
            }
            let batch = std::mem::take(&mut st.queued);
            st.inflight_ops = batch.len();
            st.inflight_bytes = std::mem::take(&mut st.queued_bytes);
            (batch, st.submitted)
        };
        #[cfg(test)]
        let result = if shared.lock().fail_commits {
            Err(CommitError::Retry("injected failure".into()))
        } else {
            to.commit(&batch)
        };
        #[cfg(not(test))]
        let result = to.commit(&batch);
        let mut st = shared.lock();
        let bytes = std::mem::take(&mut st.inflight_bytes);
        let ops = std::mem::take(&mut st.inflight_ops);
        match result {
            Ok(()) => {
                st.stats.commits += 1;
                st.stats.ops_written += ops as u64;
                st.stats.bytes_written += bytes as u64;
                st.stats.failing = false;
                st.durable = upto;
                shared.done.notify_all();
                // Group commit: what arrives meanwhile waits for the next one, unless closing.
                drop(pause(shared, st, shared.opts.commit_interval, true));
            }
            Err(CommitError::Fenced) => {
                st.stats.fenced = true;
                st.stats.dropped_ops += (ops + st.queued.len()) as u64;
                st.stats.dropped_bytes += (bytes + st.queued_bytes) as u64;
                st.queued = Pending::default();
                st.queued_bytes = 0;
                st.closing = true;
                break;
            }
            Err(CommitError::Retry(e)) => {
                st.last_error = Some(e.to_string());
                st.stats.write_errors += 1;
                st.stats.failing = true;
                let added = st.queued.merge_older(batch);
                st.queued_bytes += added;
                debug_assert_eq!(st.queued_bytes, st.queued.bytes());
                if st.closing {
                    close_failures += 1;
                    if close_failures >= CLOSE_ATTEMPTS {
                        break;
                    }
                }
                drop(pause(shared, st, shared.opts.retry, false));
            }
        }
    }
    shared.lock().stopped = true;
    shared.done.notify_all();
}

/// Waits `d` (woken early only by a close, and then only if `end_on_close`): submits do
/// not wake the thread while it pauses.
fn pause<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    d: Duration,
    end_on_close: bool,
) -> MutexGuard<'a, State> {
    let until = Instant::now() + d;
    while let Some(wait) = until.checked_duration_since(Instant::now()) {
        if wait.is_zero() || (end_on_close && st.closing) {
            break;
        }
        st = shared
            .work
            .wait_timeout(st, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    st
}

/// Writes one batch in one durable transaction, reopening the file first if a failure closed it.
/// A panic inside redb counts as a failed commit.
fn write(
    db: &mut Option<Database>,
    path: &Path,
    rows: &mut Option<Rows>,
    batch: &Pending,
) -> Result<(), Box<dyn Error>> {
    let db = match db {
        Some(db) => db,
        None => db.insert(guarded(path, || open_db(path, false))?),
    };
    match panic::catch_unwind(AssertUnwindSafe(|| {
        let rows = match rows {
            Some(r) => r,
            None => rows.insert(scan_rows(db)?),
        };
        let placed = commit(db, rows, batch)?;
        // Only once committed: a failed batch comes back whole, to rows as they were.
        rows.apply(placed);
        Ok::<_, redb::Error>(())
    })) {
        Ok(result) => Ok(result?),
        Err(_) => Err("redb panicked committing".into()),
    }
}

/// Commits `batch`; returns where it placed or removed sessions, for [`Rows::apply`].
fn commit(
    db: &Database,
    rows: &Rows,
    batch: &Pending,
) -> Result<Vec<(u64, Option<u64>)>, redb::Error> {
    let tx = begin_write(db)?;
    let mut placed = Vec::new();
    {
        if let Some(r) = batch.recovery {
            let mut meta = tx.open_table(META)?;
            meta.insert(KEY_RECOVERY, r.to_le_bytes().as_slice())?;
        }
        if !batch.associations.is_empty() {
            let mut t = tx.open_table(ASSOCIATIONS)?;
            for (k, v) in &batch.associations {
                match v {
                    Some(v) => t.insert(k.as_slice(), crate::pack(v).as_slice())?,
                    None => t.remove(k.as_slice())?,
                };
            }
        }
        if !batch.sessions.is_empty() {
            let mut t = tx.open_table(SESSIONS)?;
            let mut next = rows.next();
            for (&s, v) in &batch.sessions {
                match (v, rows.get(s)) {
                    (Some(v), Some(row)) => {
                        t.insert(row, (s, crate::pack(v).as_slice()))?;
                    }
                    (Some(v), None) => {
                        t.insert(next, (s, crate::pack(v).as_slice()))?;
                        placed.push((s, Some(next)));
                        next += 1;
                    }
                    (None, Some(row)) => {
                        t.remove(row)?;
                        placed.push((s, None));
                    }
                    (None, None) => {}
                }
            }
        }
        if !batch.usage.is_empty() {
            let mut t = tx.open_table(USAGE)?;
            for (&s, v) in &batch.usage {
                match v {
                    Some(v) => t.insert(s, crate::pack(v).as_slice())?,
                    None => t.remove(s)?,
                };
            }
        }
    }
    tx.commit()?;
    Ok(placed)
}
