//! The UPF's persisted state: PFCP associations, sessions and URR usage checkpoints, kept in one
//! embedded [redb] file so that a restarted UPF can keep its Recovery Time Stamp and its
//! sessions. The crate stores opaque bytes by key and knows nothing of PFCP: the caller encodes
//! its records, this crate makes them durable.
//!
//! One thread ([`Writer`]) owns the write side: callers queue ops that never wait on the disk,
//! ops on one key coalesce, and the thread commits everything pending in one transaction (group
//! commit), so a burst of N updates costs far fewer than N fsyncs.
//!
//! # The file (schema 3)
//!
//! | table | key | value |
//! |---|---|---|
//! | `meta` | `&str` | `"schema"` (u32 LE), `"node_id"` (UTF-8), `"recovery"` (u32 LE) |
//! | `associations` | peer's Node ID bytes | opaque record |
//! | `session_rows` | row (`u64`, in the order sessions were first written) | (UP SEID, opaque record) |
//! | `usage` | UP SEID (`u64`) | opaque usage checkpoint |
//!
//! Schemas 1 and 2 kept sessions by UP SEID (`sessions`); 2 also marked the records of
//! upf-n4's second format (postcard, not JSON). An older file is raised to 3 when opened, its
//! sessions moved to rows: this build reads it, an older one could not read what it writes
//! from then on.
#![forbid(unsafe_code)]

pub mod etcd;
mod writer;

pub use etcd::{Cluster, ClusterEvent, EtcdOptions, Record};
pub use writer::{Op, Writer, WriterOptions, WriterStats};

use std::any::Any;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{
    Builder, Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition, TableError, TableHandle, WriteTransaction,
};

/// The version of the file's layout this build writes; a file with a larger one is refused,
/// one with a smaller one is raised to it.
pub const SCHEMA: u32 = 3;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const ASSOCIATIONS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("associations");
/// Sessions by row: UP SEIDs are random, so records keyed by them landed each in a random
/// leaf of the B-tree, which every commit copied and wrote whole (4 KiB for a ~250-octet
/// record). Rows in the order sessions were first written put a commit's new records in the
/// last leaves; [`Rows`] finds a session's row.
const SESSIONS: TableDefinition<u64, (u64, &[u8])> = TableDefinition::new("session_rows");
/// Schemas 1 and 2: sessions by UP SEID.
const SESSIONS_BY_SEID: TableDefinition<u64, &[u8]> = TableDefinition::new("sessions");
const USAGE: TableDefinition<u64, &[u8]> = TableDefinition::new("usage");

const KEY_SCHEMA: &str = "schema";
const KEY_NODE_ID: &str = "node_id";
const KEY_RECOVERY: &str = "recovery";

/// redb's page cache. Its default (1 GiB) is more than a UPF should give its state file; the
/// load reads the file once, the writer touches the pages of the rows it updates.
const CACHE_BYTES: usize = 64 << 20;

/// An open state file. Holds redb's lock on it: a second UPF on the same file gets
/// [`OpenError::InUse`].
#[derive(Debug)]
pub struct Store {
    db: Database,
    path: PathBuf,
    /// Where each session is, once [`Store::load`] read them.
    rows: OnceLock<Rows>,
}

/// Each session's row in `session_rows`, and the next row free.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Rows {
    by_seid: HashMap<u64, u64>,
    next: u64,
}

impl Rows {
    pub(crate) fn get(&self, seid: u64) -> Option<u64> {
        self.by_seid.get(&seid).copied()
    }

    pub(crate) fn next(&self) -> u64 {
        self.next
    }

    /// Session `seid` is in `row`.
    fn place(&mut self, seid: u64, row: u64) {
        self.by_seid.insert(seid, row);
        self.next = self.next.max(row + 1);
    }

    /// What a commit did: `Some(row)` placed a session, `None` removed it.
    pub(crate) fn apply(&mut self, changes: Vec<(u64, Option<u64>)>) {
        for (seid, row) in changes {
            match row {
                Some(r) => self.place(seid, r),
                None => {
                    self.by_seid.remove(&seid);
                }
            }
        }
    }
}

/// Everything the file holds, read in one transaction (a consistent snapshot).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The Recovery Time Stamp last written, if any.
    pub recovery: Option<u32>,
    /// (peer's Node ID, record), sorted by Node ID.
    pub associations: Vec<(Vec<u8>, Vec<u8>)>,
    /// (UP SEID, record), sorted by SEID.
    pub sessions: Vec<(u64, Vec<u8>)>,
    /// (UP SEID, usage checkpoint), sorted by SEID.
    pub usage: Vec<(u64, Vec<u8>)>,
}

/// Why the state file cannot be used. Each message names the file and ends with what the
/// operator can do.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// redb says the file is damaged or is not a redb file.
    #[error(
        "state file {} is damaged or is not a upf state file ({detail}); \
         start with --discard-state to move it aside and start empty",
        path.display()
    )]
    Corrupt { path: PathBuf, detail: String },
    /// The file was written by a newer upf (a schema this build does not know).
    #[error(
        "state file {} has schema {found}, newer than this upf's {SCHEMA}; \
         run the newer upf, or start with --discard-state to move it aside and start empty",
        path.display()
    )]
    NewerSchema { path: PathBuf, found: u32 },
    /// The file holds the state of another Node ID: using it would resurrect another UPF's
    /// sessions under ours.
    #[error(
        "state file {} belongs to node {found:?}, not to this node {ours:?}; \
         point --state at this node's file, or start with --discard-state to move it aside \
         and start empty",
        path.display()
    )]
    OtherNode {
        path: PathBuf,
        found: String,
        ours: String,
    },
    /// Another process (or another Store in this one) has the file open.
    #[error(
        "state file {} is in use by another process (another upf running?); \
         stop it, or give this one another --state file",
        path.display()
    )]
    InUse { path: PathBuf },
    /// The file or its directory could not be read or written.
    #[error(
        "state file {}: {source}; check the path, its permissions and free space",
        path.display()
    )]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl Store {
    /// Opens or creates the file (parent directories created). A new file gets schema and
    /// node_id. An existing one is checked: schema > [`SCHEMA`] → NewerSchema, node_id ≠ ours →
    /// OtherNode; a smaller schema is raised to [`SCHEMA`].
    ///
    /// The open verifies the checksum of every page (redb's integrity check): a plain redb open
    /// trusts the file, may panic on one damaged outside redb and returns a damaged value as if
    /// it were good. It costs a read of the file, as much again as [`Store::load`] (about 0.5 s
    /// for 100,000 sessions of 2 KB), after a crash as after a clean close. Commits also record
    /// redb's allocator state (quick repair): the writer's reopen after a failed commit, which
    /// skips the check, needs no walk of the file (and an unchecked open after a crash takes
    /// ~10 ms instead of a repair).
    pub fn open(path: &Path, node_id: &str) -> Result<Store, OpenError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|source| io_error(path, source))?;
        }
        let db = guarded(path, || open_db(path, true))?;
        let store = Store {
            db,
            path: path.to_path_buf(),
            rows: OnceLock::new(),
        };
        guarded(path, || store.check_or_init(node_id))?;
        Ok(store)
    }

    /// Moves an existing file aside to `<path>.discarded-<unix seconds>` (returns that path,
    /// None if there was no file), for --discard-state: the old state stays for a post-mortem.
    /// Refuses ([`OpenError::InUse`]) a file another process holds open.
    pub fn discard(path: &Path) -> Result<Option<PathBuf>, OpenError> {
        let file = match fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(path, e)),
        };
        // redb's exclusive writer holds flock(2) on the whole file (on Linux, beside its range
        // locks); renaming a live database away would split it from its writer.
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(OpenError::InUse {
                    path: path.to_path_buf(),
                })
            }
            Err(fs::TryLockError::Error(e)) => return Err(io_error(path, e)),
        }
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".discarded-{secs}"));
        let mut target = PathBuf::from(&name);
        let mut n = 1;
        while target.exists() {
            let mut again = name.clone();
            again.push(format!(".{n}"));
            target = PathBuf::from(again);
            n += 1;
        }
        fs::rename(path, &target).map_err(|e| io_error(path, e))?;
        drop(file);
        Ok(Some(target))
    }

    /// Reads everything in one read transaction. A damaged page found on the way is
    /// [`OpenError::Corrupt`].
    pub fn load(&self) -> Result<Loaded, OpenError> {
        guarded(&self.path, || self.load_inner())
    }

    /// The file this store has open.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts the writer thread ("upf-state") and hands the store to it.
    pub fn into_writer(self, opts: WriterOptions) -> Writer {
        Writer::start(self, opts)
    }

    fn check_or_init(&self, node_id: &str) -> Result<(), OpenError> {
        let read = self.db.begin_read().map_err(|e| self.err(e))?;
        let (schema, node) = match read.open_table(META) {
            Ok(meta) => {
                let schema = match meta.get(KEY_SCHEMA).map_err(|e| self.err(e))? {
                    Some(v) => Some(
                        u32_le(v.value())
                            .ok_or_else(|| self.corrupt("meta schema is not a u32"))?,
                    ),
                    None => None,
                };
                let node = meta
                    .get(KEY_NODE_ID)
                    .map_err(|e| self.err(e))?
                    .map(|v| String::from_utf8_lossy(v.value()).into_owned());
                (schema, node)
            }
            Err(TableError::TableDoesNotExist(_)) => {
                // Claim an empty file only: a redb file with tables of its own is someone
                // else's.
                if read
                    .list_tables()
                    .map_err(|e| self.err(e))?
                    .next()
                    .is_some()
                {
                    return Err(self.corrupt("a redb file without upf's meta table"));
                }
                (None, None)
            }
            Err(e) => return Err(self.err(e)),
        };
        drop(read);
        if let Some(found) = schema.filter(|&s| s > SCHEMA) {
            return Err(OpenError::NewerSchema {
                path: self.path.clone(),
                found,
            });
        }
        match node {
            Some(found) if found != node_id => Err(OpenError::OtherNode {
                path: self.path.clone(),
                found,
                ours: node_id.to_owned(),
            }),
            Some(_) if schema == Some(SCHEMA) => Ok(()),
            // A new file (or one whose first commit never completed, or of an older schema):
            // claim it, its sessions moved to rows.
            _ => self.init(node_id),
        }
    }

    fn init(&self, node_id: &str) -> Result<(), OpenError> {
        let tx = begin_write(&self.db).map_err(|e| self.err(e))?;
        let by_seid = (tx.list_tables().map_err(|e| self.err(e))?)
            .any(|t| t.name() == SESSIONS_BY_SEID.name());
        {
            let mut meta = tx.open_table(META).map_err(|e| self.err(e))?;
            meta.insert(KEY_SCHEMA, SCHEMA.to_le_bytes().as_slice())
                .map_err(|e| self.err(e))?;
            meta.insert(KEY_NODE_ID, node_id.as_bytes())
                .map_err(|e| self.err(e))?;
            tx.open_table(ASSOCIATIONS).map_err(|e| self.err(e))?;
            let mut rows = tx.open_table(SESSIONS).map_err(|e| self.err(e))?;
            tx.open_table(USAGE).map_err(|e| self.err(e))?;
            if by_seid {
                let old = tx.open_table(SESSIONS_BY_SEID).map_err(|e| self.err(e))?;
                for (row, r) in (0u64..).zip(old.iter().map_err(|e| self.err(e))?) {
                    let (seid, v) = r.map_err(|e| self.err(e))?;
                    (rows.insert(row, (seid.value(), v.value()))).map_err(|e| self.err(e))?;
                }
            }
        }
        if by_seid {
            tx.delete_table(SESSIONS_BY_SEID).map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    fn load_inner(&self) -> Result<Loaded, OpenError> {
        let read = self.db.begin_read().map_err(|e| self.err(e))?;
        let mut loaded = Loaded::default();
        match read.open_table(META) {
            Ok(meta) => {
                if let Some(v) = meta.get(KEY_RECOVERY).map_err(|e| self.err(e))? {
                    let v = u32_le(v.value())
                        .ok_or_else(|| self.corrupt("meta recovery is not a u32"))?;
                    loaded.recovery = Some(v);
                }
            }
            Err(TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(self.err(e)),
        }
        match read.open_table(ASSOCIATIONS) {
            Ok(t) => {
                for row in t.iter().map_err(|e| self.err(e))? {
                    let (k, v) = row.map_err(|e| self.err(e))?;
                    let v = unpack(v.value())
                        .ok_or_else(|| self.corrupt("a record does not decompress"))?;
                    loaded.associations.push((k.value().to_vec(), v));
                }
            }
            Err(TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(self.err(e)),
        }
        let mut rows = Rows::default();
        match read.open_table(SESSIONS) {
            Ok(t) => {
                loaded
                    .sessions
                    .reserve(usize::try_from(t.len().unwrap_or(0)).unwrap_or(0));
                for r in t.iter().map_err(|e| self.err(e))? {
                    let (row, v) = r.map_err(|e| self.err(e))?;
                    let (seid, v) = v.value();
                    let v =
                        unpack(v).ok_or_else(|| self.corrupt("a record does not decompress"))?;
                    rows.place(seid, row.value());
                    loaded.sessions.push((seid, v));
                }
            }
            Err(TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(self.err(e)),
        }
        loaded.sessions.sort_unstable_by_key(|&(seid, _)| seid);
        let _ = self.rows.set(rows);
        match read.open_table(USAGE) {
            Ok(t) => {
                for r in t.iter().map_err(|e| self.err(e))? {
                    let (k, v) = r.map_err(|e| self.err(e))?;
                    let v = unpack(v.value())
                        .ok_or_else(|| self.corrupt("a record does not decompress"))?;
                    loaded.usage.push((k.value(), v));
                }
            }
            Err(TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(self.err(e)),
        }
        Ok(loaded)
    }

    fn err(&self, e: impl Into<redb::Error>) -> OpenError {
        from_redb(&self.path, e.into())
    }

    fn corrupt(&self, detail: &str) -> OpenError {
        OpenError::Corrupt {
            path: self.path.clone(),
            detail: detail.to_owned(),
        }
    }
}

/// Opens the database the way every open of this crate does (also the writer's reopen after a
/// failed commit).
pub(crate) fn open_db(path: &Path, verify: bool) -> Result<Database, OpenError> {
    let mut builder = Builder::new();
    builder.set_cache_size(CACHE_BYTES);
    // `verify` checks every page's checksum on open: a plain open trusts the file and may panic
    // on, or silently return, bytes damaged outside redb. Store::open verifies (the load reads
    // the whole file anyway); the writer's reopen after a failed commit does not (this process
    // verified the file and has been its only writer since).
    builder.set_check_integrity_on_open(verify);
    builder.create(path).map_err(|e| from_redb(path, e.into()))
}

/// A write transaction as every commit of this crate makes it: durable when commit returns, and
/// recording the allocator state so that a crash needs no full repair.
pub(crate) fn begin_write(db: &Database) -> Result<WriteTransaction, redb::Error> {
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Immediate)?;
    tx.set_quick_repair(true);
    Ok(tx)
}

/// Each session's row in `db` (the writer's, when no [`Store::load`] read them first).
pub(crate) fn scan_rows(db: &Database) -> Result<Rows, redb::Error> {
    let read = db.begin_read()?;
    let mut rows = Rows::default();
    match read.open_table(SESSIONS) {
        Ok(t) => {
            for r in t.iter()? {
                let (row, v) = r?;
                rows.place(v.value().0, row.value());
            }
        }
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(rows)
}

fn u32_le(b: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

fn io_error(path: &Path, source: io::Error) -> OpenError {
    OpenError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Sorts redb's errors into what the operator can act on.
pub(crate) fn from_redb(path: &Path, e: redb::Error) -> OpenError {
    let path = path.to_path_buf();
    match e {
        redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => {
            OpenError::InUse { path }
        }
        // Not a redb file at all (bad magic, short header) comes as InvalidData; a file cut
        // short as UnexpectedEof.
        redb::Error::Io(source)
            if matches!(
                source.kind(),
                io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
            ) =>
        {
            OpenError::Corrupt {
                path,
                detail: source.to_string(),
            }
        }
        redb::Error::Io(source) => OpenError::Io { path, source },
        other => OpenError::Corrupt {
            path,
            detail: other.to_string(),
        },
    }
}

/// Runs `f`, turning a panic inside redb (which a file damaged outside redb can cause) into
/// [`OpenError::Corrupt`]: no file content may take the UPF down.
pub(crate) fn guarded<T>(
    path: &Path,
    f: impl FnOnce() -> Result<T, OpenError>,
) -> Result<T, OpenError> {
    panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        Err(OpenError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("redb failed reading it: {}", panic_message(&*payload)),
        })
    })
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_owned()
    }
}

#[cfg(test)]
mod tests;

/// The most a record may decompress to: a length beyond it is damage, not a record.
const MAX_RECORD: usize = 16 << 20;

/// A record as stored: its length (u32 LE), then its LZ4 block. JSON records of sessions of
/// one shape repeat their keys, and shrink 4-5 times: the file, its check at open and the
/// load at start shrink with them.
pub(crate) fn pack(v: &[u8]) -> Vec<u8> {
    let n = u32::try_from(v.len()).unwrap_or(u32::MAX);
    let mut out = n.to_le_bytes().to_vec();
    out.extend_from_slice(&lz4_flex::block::compress(v));
    out
}

/// The record [`pack`] stored; `None` if it is not one.
pub(crate) fn unpack(v: &[u8]) -> Option<Vec<u8>> {
    let n = usize::try_from(u32_le(v.get(..4)?)?).ok()?;
    if n > MAX_RECORD {
        return None;
    }
    lz4_flex::block::decompress(&v[4..], n)
        .ok()
        .filter(|d| d.len() == n)
}
