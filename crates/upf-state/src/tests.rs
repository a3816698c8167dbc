use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::*;

const NODE: &str = "upf.example";
const LONG: Duration = Duration::from_secs(30);

/// A directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "upf-state-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self) -> PathBuf {
        self.0.join("state").join("upf.redb")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn writer(path: &Path) -> Writer {
    Store::open(path, NODE)
        .unwrap()
        .into_writer(WriterOptions::default())
}

fn load(path: &Path) -> Loaded {
    Store::open(path, NODE).unwrap().load().unwrap()
}

/// `len` pseudo-random octets of session `seid`: as incompressible as real disk use needs.
fn session(seid: u64, len: usize) -> Vec<u8> {
    let mut x = seid.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

#[test]
fn a_new_file_is_empty_and_claimed() {
    let dir = TempDir::new("new");
    let store = Store::open(&dir.file(), NODE).unwrap();
    assert_eq!(store.path(), dir.file());
    assert_eq!(store.load().unwrap(), Loaded::default());
    drop(store);
    // Reopening a claimed file by the same node is fine.
    assert_eq!(load(&dir.file()), Loaded::default());
}

#[test]
fn every_table_round_trips() {
    let dir = TempDir::new("roundtrip");
    let w = writer(&dir.file());
    assert!(w.submit(Op::SetRecovery(0xdead_beef)));
    assert!(w.submit(Op::PutAssociation(b"smf-1".to_vec(), b"a1".to_vec())));
    assert!(w.submit(Op::PutAssociation(b"smf-2".to_vec(), vec![])));
    assert!(w.submit(Op::PutSession(7, session(7, 2048))));
    assert!(w.submit(Op::PutSession(u64::MAX, b"last".to_vec())));
    assert!(w.submit(Op::PutUsage(7, b"u7".to_vec())));
    assert!(w.flush(LONG));
    let stats = w.stats();
    assert_eq!((stats.pending_ops, stats.pending_bytes), (0, 0));
    assert!(stats.commits >= 1 && stats.ops_written == 6, "{stats:?}");
    w.close();

    let got = load(&dir.file());
    assert_eq!(got.recovery, Some(0xdead_beef));
    assert_eq!(
        got.associations,
        vec![
            (b"smf-1".to_vec(), b"a1".to_vec()),
            (b"smf-2".to_vec(), vec![])
        ]
    );
    assert_eq!(
        got.sessions,
        vec![(7, session(7, 2048)), (u64::MAX, b"last".to_vec())]
    );
    assert_eq!(got.usage, vec![(7, b"u7".to_vec())]);
}

#[test]
fn puts_of_one_key_coalesce() {
    let dir = TempDir::new("coalesce");
    let w = writer(&dir.file());
    for i in 0..1000u32 {
        assert!(w.submit(Op::PutSession(1, i.to_le_bytes().to_vec())));
    }
    assert!(w.flush(LONG));
    let stats = w.stats();
    // The thread wakes on the first submit and takes whatever is queued by then: a handful of
    // commits, not a thousand.
    assert!(stats.commits < 100, "{stats:?}");
    assert!(stats.ops_written <= stats.commits, "{stats:?}");
    drop(w);
    assert_eq!(
        load(&dir.file()).sessions,
        vec![(1, 999u32.to_le_bytes().to_vec())]
    );
}

#[test]
fn a_burst_commits_in_groups() {
    let dir = TempDir::new("burst");
    let w = writer(&dir.file());
    for s in 0..10_000 {
        assert!(w.submit(Op::PutSession(s, session(s, 64))));
    }
    assert!(w.flush(LONG));
    let stats = w.stats();
    assert_eq!(stats.ops_written, 10_000);
    assert!(stats.commits < 1000, "{stats:?}");
    drop(w);
    assert_eq!(load(&dir.file()).sessions.len(), 10_000);
}

#[test]
fn deletes_replace_puts() {
    let dir = TempDir::new("delete");
    let w = writer(&dir.file());
    // Committed first, then deleted; and put then deleted within one batch.
    assert!(w.submit(Op::PutAssociation(b"a".to_vec(), b"1".to_vec())));
    assert!(w.submit(Op::PutSession(1, b"s1".to_vec())));
    assert!(w.submit(Op::PutSession(2, b"s2".to_vec())));
    assert!(w.flush(LONG));
    w.fail_commits(true); // hold the next ops in one batch
    assert!(w.submit(Op::DeleteAssociation(b"a".to_vec())));
    assert!(w.submit(Op::DeleteSession(1)));
    assert!(w.submit(Op::PutSession(3, b"s3".to_vec())));
    assert!(w.submit(Op::DeleteSession(3)));
    assert!(w.submit(Op::DeleteAssociation(b"never".to_vec())));
    w.fail_commits(false);
    assert!(w.flush(LONG));
    drop(w);
    let got = load(&dir.file());
    assert!(got.associations.is_empty());
    assert_eq!(got.sessions, vec![(2, b"s2".to_vec())]);
}

#[test]
fn deleting_a_session_deletes_its_usage() {
    let dir = TempDir::new("usage");
    let w = writer(&dir.file());
    for s in [1, 2] {
        assert!(w.submit(Op::PutSession(s, b"s".to_vec())));
        assert!(w.submit(Op::PutUsage(s, b"u".to_vec())));
    }
    assert!(w.flush(LONG));
    assert!(w.submit(Op::DeleteSession(1)));
    assert!(w.flush(LONG));
    drop(w);
    let got = load(&dir.file());
    assert_eq!(got.sessions, vec![(2, b"s".to_vec())]);
    assert_eq!(got.usage, vec![(2, b"u".to_vec())]);
}

#[test]
fn dropping_the_last_writer_writes_what_is_pending() {
    let dir = TempDir::new("drop");
    let w = writer(&dir.file());
    let clone = w.clone();
    for s in 0..500 {
        assert!(clone.submit(Op::PutSession(s, session(s, 100))));
    }
    drop(w);
    assert!(clone.submit(Op::SetRecovery(5)));
    drop(clone); // no flush: the thread writes it all before it ends
    let got = load(&dir.file());
    assert_eq!(got.sessions.len(), 500);
    assert_eq!(got.recovery, Some(5));
}

#[test]
fn close_stops_the_other_handles() {
    let dir = TempDir::new("close");
    let w = writer(&dir.file());
    let other = w.clone();
    assert!(w.submit(Op::SetRecovery(1)));
    w.close();
    assert!(!other.submit(Op::SetRecovery(2)));
    assert!(other.flush(Duration::from_millis(10)));
    assert_eq!(other.stats().dropped_ops, 1);
    drop(other);
    assert_eq!(load(&dir.file()).recovery, Some(1));
}

const CRASH_DIR: &str = "UPF_STATE_CRASH_FILE";

/// Not a test of its own: the child of `flushed_ops_survive_an_abort`.
#[test]
fn crash_child() {
    let Some(path) = std::env::var_os(CRASH_DIR) else {
        return;
    };
    let w = writer(Path::new(&path));
    for s in 0..1000 {
        assert!(w.submit(Op::PutSession(s, session(s, 2048))));
    }
    assert!(w.flush(LONG));
    // Queued after the flush: may or may not be there, must not break anything.
    for s in 1000..2000 {
        w.submit(Op::PutSession(s, session(s, 2048)));
    }
    std::process::abort();
}

#[test]
fn flushed_ops_survive_an_abort() {
    let dir = TempDir::new("crash");
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tests::crash_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_DIR, dir.file())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child aborts");
    let t = Instant::now();
    let got = load(&dir.file());
    let took = t.elapsed();
    assert!(got.sessions.len() >= 1000, "{}", got.sessions.len());
    for (s, v) in &got.sessions {
        assert_eq!(*v, session(*s, 2048));
    }
    assert!((0..1000).zip(&got.sessions).all(|(s, row)| row.0 == s));
    eprintln!(
        "open+load after abort: {} sessions in {took:?}",
        got.sessions.len()
    );
}

/// The schema of `file`, as its meta table says.
fn schema_of(file: &Path) -> u32 {
    let db = redb::Database::create(file).unwrap();
    let read = db.begin_read().unwrap();
    let meta = read.open_table(META).unwrap();
    let v = meta.get(KEY_SCHEMA).unwrap().unwrap();
    u32_le(v.value()).unwrap()
}

/// Files of schemas 1 and 2 kept sessions by UP SEID: opened, they are raised to rows, every
/// record kept, and written on as any.
#[test]
fn an_older_schema_is_raised_and_its_sessions_moved_to_rows() {
    for old in [1u32, 2] {
        let dir = TempDir::new("older");
        fs::create_dir_all(dir.file().parent().unwrap()).unwrap();
        {
            let db = redb::Database::create(dir.file()).unwrap();
            let tx = db.begin_write().unwrap();
            {
                let mut meta = tx.open_table(META).unwrap();
                meta.insert(KEY_SCHEMA, old.to_le_bytes().as_slice())
                    .unwrap();
                meta.insert(KEY_NODE_ID, NODE.as_bytes()).unwrap();
                let mut t = tx.open_table(SESSIONS_BY_SEID).unwrap();
                for seid in [9u64, 3, u64::MAX] {
                    t.insert(seid, pack(&session(seid, 300)).as_slice())
                        .unwrap();
                }
            }
            tx.commit().unwrap();
        }
        let want = |seids: &[u64]| -> Vec<(u64, Vec<u8>)> {
            seids.iter().map(|&s| (s, session(s, 300))).collect()
        };
        assert_eq!(load(&dir.file()).sessions, want(&[3, 9, u64::MAX]));
        assert_eq!(schema_of(&dir.file()), SCHEMA);
        let w = writer(&dir.file());
        assert!(w.submit(Op::DeleteSession(9)));
        assert!(w.submit(Op::PutSession(5, session(5, 300))));
        assert!(w.submit(Op::PutSession(3, session(3, 300))));
        assert!(w.flush(LONG));
        w.close();
        assert_eq!(load(&dir.file()).sessions, want(&[3, 5, u64::MAX]));
    }
}

/// A session keeps its row when its record changes, and a deleted session's row goes: the
/// file holds one row per session whatever the order of puts and deletes, across writers.
#[test]
fn sessions_keep_one_row_each() {
    let dir = TempDir::new("rows");
    for round in 0..3u64 {
        let w = writer(&dir.file());
        for s in 0..50u64 {
            assert!(w.submit(Op::PutSession(s * 7919 % 101, session(s + round, 100))));
        }
        assert!(w.submit(Op::DeleteSession(round)));
        assert!(w.flush(LONG));
        w.close();
    }
    let got = load(&dir.file()).sessions;
    let db = redb::Database::create(dir.file()).unwrap();
    let rows = db
        .begin_read()
        .unwrap()
        .open_table(SESSIONS)
        .unwrap()
        .len()
        .unwrap();
    assert_eq!(usize::try_from(rows).unwrap(), got.len());
    assert!(
        got.windows(2).all(|w| w[0].0 < w[1].0),
        "sorted, one per SEID"
    );
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = TempDir::new("schema");
    drop(Store::open(&dir.file(), NODE).unwrap());
    {
        let db = redb::Database::create(dir.file()).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(META)
            .unwrap()
            .insert(KEY_SCHEMA, (SCHEMA + 1).to_le_bytes().as_slice())
            .unwrap();
        tx.commit().unwrap();
    }
    let e = Store::open(&dir.file(), NODE).unwrap_err();
    assert!(
        matches!(e, OpenError::NewerSchema { found, .. } if found == SCHEMA + 1),
        "{e:?}"
    );
    assert!(e.to_string().ends_with("start empty"), "{e}");
}

#[test]
fn another_nodes_file_is_refused() {
    let dir = TempDir::new("node");
    drop(Store::open(&dir.file(), "upf-a").unwrap());
    let e = Store::open(&dir.file(), "upf-b").unwrap_err();
    match &e {
        OpenError::OtherNode { found, ours, .. } => {
            assert_eq!((found.as_str(), ours.as_str()), ("upf-a", "upf-b"));
        }
        e => panic!("{e:?}"),
    }
    assert!(e.to_string().contains("--discard-state"), "{e}");
    Store::open(&dir.file(), "upf-a").unwrap();
}

#[test]
fn a_file_in_use_is_refused() {
    let dir = TempDir::new("inuse");
    let first = Store::open(&dir.file(), NODE).unwrap();
    let e = Store::open(&dir.file(), NODE).unwrap_err();
    assert!(matches!(e, OpenError::InUse { .. }), "{e:?}");
    let e = Store::discard(&dir.file()).unwrap_err();
    assert!(matches!(e, OpenError::InUse { .. }), "{e:?}");
    // Also while the writer thread has it.
    let w = first.into_writer(WriterOptions::default());
    let e = Store::open(&dir.file(), NODE).unwrap_err();
    assert!(matches!(e, OpenError::InUse { .. }), "{e:?}");
    drop(w);
    Store::open(&dir.file(), NODE).unwrap();
}

fn assert_corrupt(path: &Path) {
    match Store::open(path, NODE) {
        Err(OpenError::Corrupt { detail, .. }) => assert!(!detail.is_empty()),
        other => panic!("{path:?}: {other:?}"),
    }
}

#[test]
fn a_file_that_is_not_redb_is_corrupt() {
    let dir = TempDir::new("garbage");
    fs::create_dir_all(dir.file().parent().unwrap()).unwrap();
    fs::write(dir.file(), b"this is not a database\n".repeat(1000)).unwrap();
    assert_corrupt(&dir.file());
    fs::write(dir.file(), [0u8; 7]).unwrap();
    assert_corrupt(&dir.file());
    let e = Store::open(&dir.file(), NODE).unwrap_err();
    assert!(e.to_string().contains("--discard-state"), "{e}");
}

#[test]
fn someone_elses_redb_file_is_corrupt() {
    let dir = TempDir::new("foreign");
    fs::create_dir_all(dir.file().parent().unwrap()).unwrap();
    {
        let db = redb::Database::create(dir.file()).unwrap();
        let tx = db.begin_write().unwrap();
        let def: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("theirs");
        tx.open_table(def).unwrap().insert(1, 2).unwrap();
        tx.commit().unwrap();
    }
    assert_corrupt(&dir.file());
}

/// A file with 300 sessions of 2 KB, written and closed cleanly; its bytes.
fn sample(dir: &TempDir) -> (Vec<u8>, Loaded) {
    let w = writer(&dir.file());
    for s in 0..300 {
        assert!(w.submit(Op::PutSession(s, session(s, 2048))));
        assert!(w.submit(Op::PutUsage(s, session(s, 100))));
    }
    w.close();
    (fs::read(dir.file()).unwrap(), load(&dir.file()))
}

#[test]
fn a_truncated_file_is_corrupt() {
    let dir = TempDir::new("truncated");
    let (bytes, _) = sample(&dir);
    for len in [100, 4096, bytes.len() / 2, bytes.len() - 4096] {
        fs::write(dir.file(), &bytes[..len]).unwrap();
        assert_corrupt(&dir.file());
    }
}

#[test]
fn flipped_bytes_are_found_or_harmless() {
    let dir = TempDir::new("flipped");
    let (bytes, want) = sample(&dir);
    let mut corrupt = 0;
    // ~150 places across the file (in headers, branch and leaf pages, values): never a panic,
    // never other data.
    let step = bytes.len() / 150;
    let mut at = 0;
    while at < bytes.len() {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x5a;
        fs::write(dir.file(), &damaged).unwrap();
        match Store::open(&dir.file(), NODE).and_then(|s| s.load()) {
            Ok(got) => assert!(got == want, "byte {at} flipped: other data returned"),
            Err(OpenError::Corrupt { .. }) => corrupt += 1,
            Err(e) => panic!("byte {at} flipped: {e:?}"),
        }
        at += step + 13;
    }
    assert!(corrupt > 0);
    // The middle of the file, named in the task: a value's bytes.
    let mut damaged = bytes.clone();
    let mid = bytes.len() / 2;
    damaged[mid] ^= 0xff;
    fs::write(dir.file(), &damaged).unwrap();
    if let Ok(got) = Store::open(&dir.file(), NODE).and_then(|s| s.load()) {
        assert!(got == want, "middle byte flipped: other data returned");
    }
}

#[test]
fn discard_moves_the_file_aside() {
    let dir = TempDir::new("discard");
    assert_eq!(Store::discard(&dir.file()).unwrap(), None);
    drop(Store::open(&dir.file(), "someone-else").unwrap());
    let aside = Store::discard(&dir.file()).unwrap().unwrap();
    assert!(aside
        .to_string_lossy()
        .starts_with(&*format!("{}.discarded-", dir.file().display())));
    assert!(aside.exists() && !dir.file().exists());
    // Twice in one second does not overwrite the first.
    drop(Store::open(&dir.file(), NODE).unwrap());
    let again = Store::discard(&dir.file()).unwrap().unwrap();
    assert_ne!(again, aside);
    assert!(again.exists() && aside.exists());
    assert_eq!(load(&dir.file()), Loaded::default());
}

#[test]
fn a_full_queue_refuses_and_counts() {
    let dir = TempDir::new("queue");
    let w = Store::open(&dir.file(), NODE)
        .unwrap()
        .into_writer(WriterOptions {
            queue_bytes: 10_000,
            retry: Duration::from_millis(5),
            ..WriterOptions::default()
        });
    w.fail_commits(true);
    let mut taken = 0;
    for s in 0..100 {
        if w.submit(Op::PutSession(s, vec![1; 992])) {
            taken += 1;
        }
    }
    assert_eq!(taken, 10);
    let stats = w.stats();
    assert_eq!((stats.dropped_ops, stats.dropped_bytes), (90, 90 * 1000));
    assert_eq!((stats.pending_ops, stats.pending_bytes), (10, 10_000));
    // Replacing a pending row by one no larger, or deleting it, is taken.
    assert!(w.submit(Op::PutSession(0, vec![2; 992])));
    assert!(w.submit(Op::DeleteSession(1)));
    assert!(!w.submit(Op::PutSession(200, vec![0; 1000])));
    assert!(!w.flush(Duration::from_millis(50)));
    w.fail_commits(false);
    assert!(w.flush(LONG));
    assert_eq!(w.stats().pending_bytes, 0);
    drop(w);
    let got = load(&dir.file());
    assert_eq!(got.sessions.len(), 9);
    assert_eq!(got.sessions[0], (0, vec![2; 992]));
}

#[test]
fn failed_commits_keep_their_ops() {
    let dir = TempDir::new("fail");
    let w = Store::open(&dir.file(), NODE)
        .unwrap()
        .into_writer(WriterOptions {
            queue_bytes: 1 << 20,
            retry: Duration::from_millis(5),
            ..WriterOptions::default()
        });
    assert!(w.submit(Op::PutSession(1, b"committed".to_vec())));
    assert!(w.flush(LONG));
    w.fail_commits(true);
    assert!(w.submit(Op::PutSession(1, b"old".to_vec())));
    assert!(w.submit(Op::PutSession(2, b"two".to_vec())));
    assert!(w.submit(Op::SetRecovery(1)));
    let t = Instant::now();
    while w.stats().write_errors < 3 {
        assert!(t.elapsed() < LONG);
        std::thread::sleep(Duration::from_millis(1));
    }
    // Newer ops submitted while failing win over the failed batch's.
    assert!(w.submit(Op::PutSession(1, b"new".to_vec())));
    assert!(w.submit(Op::DeleteSession(2)));
    let stats = w.stats();
    assert!(stats.failing && stats.write_errors >= 3, "{stats:?}");
    assert_eq!(stats.commits, 1);
    w.fail_commits(false);
    assert!(w.flush(LONG));
    assert!(!w.stats().failing);
    drop(w);
    let got = load(&dir.file());
    assert_eq!(got.sessions, vec![(1, b"new".to_vec())]);
    assert_eq!(got.recovery, Some(1));
}

/// A tmpfs of a few MiB, unmounted on drop.
struct Tmpfs(TempDir);

impl Tmpfs {
    fn mount(mib: usize) -> Tmpfs {
        let dir = TempDir::new("tmpfs");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&dir.0)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tmpfs");
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0 .0).status();
    }
}

#[test]
#[ignore = "needs root"]
fn a_full_disk_fails_commits_then_recovers_without_loss() {
    // 1,000 sessions of 2 KB take ~4 MB of redb pages (one value a 4 KiB leaf) and more while
    // a commit copies on write: 16 MiB, of which a filler leaves 1 MiB free.
    let fs = Tmpfs::mount(16);
    let path = fs.0.file();
    let filler = fs.0 .0.join("filler");
    let w = Store::open(&path, NODE)
        .unwrap()
        .into_writer(WriterOptions {
            queue_bytes: 64 << 20,
            retry: Duration::from_millis(20),
            ..WriterOptions::default()
        });
    let used = fs::metadata(&path).unwrap().len();
    fs::write(
        &filler,
        vec![0u8; (15 << 20) - usize::try_from(used).unwrap()],
    )
    .unwrap();
    for s in 0..1000 {
        assert!(w.submit(Op::PutSession(s, session(s, 2048))));
    }
    assert!(!w.flush(Duration::from_secs(2)), "4 MB cannot fit in 1");
    let stats = w.stats();
    assert!(stats.failing && stats.write_errors > 0, "{stats:?}");
    assert!(stats.pending_ops > 0, "{stats:?}");
    fs::remove_file(&filler).unwrap();
    assert!(w.flush(LONG), "{:?}", w.stats());
    let stats = w.stats();
    assert!(!stats.failing, "{stats:?}");
    drop(w);
    let got = load(&path);
    assert_eq!(got.sessions.len(), 1000);
    for (s, v) in &got.sessions {
        assert_eq!(*v, session(*s, 2048));
    }
}

#[test]
fn records_are_stored_compressed_and_only_records_unpack() {
    let json =
        br#"{"pdrs":[{"id":1,"pdi":{"source":"Access"}},{"id":2,"pdi":{"source":"Access"}}]}"#
            .repeat(20);
    let packed = pack(&json);
    assert!(
        packed.len() * 4 < json.len(),
        "{} of {}",
        packed.len(),
        json.len()
    );
    assert_eq!(unpack(&packed).as_deref(), Some(json.as_slice()));
    assert_eq!(unpack(&pack(b"")).as_deref(), Some(&b""[..]));
    // A length past the bound, one that does not match, a block cut short: not records.
    let mut huge = packed.clone();
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(unpack(&huge), None);
    let mut off = packed.clone();
    off[..4].copy_from_slice(&(u32::try_from(json.len()).unwrap() + 1).to_le_bytes());
    assert_eq!(unpack(&off), None);
    assert_eq!(unpack(&packed[..packed.len() - 3]), None);
    assert_eq!(unpack(&[1, 0]), None);
}

/// `durable` passes the mark `submitted` gave only once what was submitted before it is
/// committed: not while commits fail, at once after the retry that succeeds.
#[test]
fn durable_passes_a_submission_only_once_it_is_committed() {
    let dir = TempDir::new("durable");
    let w = Store::open(&dir.file(), NODE)
        .unwrap()
        .into_writer(WriterOptions {
            retry: Duration::from_millis(5),
            ..WriterOptions::default()
        });
    assert!(w.submit(Op::PutSession(1, vec![1; 10])));
    assert!(w.flush(LONG));
    let before = w.submitted();
    assert!(w.durable() >= before);
    w.fail_commits(true);
    assert!(w.submit(Op::PutSession(1, vec![2; 10])));
    assert!(w.submit(Op::PutUsage(1, vec![3; 10])));
    let mark = w.submitted();
    assert_eq!(mark, before + 2);
    let deadline = Instant::now() + LONG;
    while w.stats().write_errors < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(w.stats().write_errors >= 2, "the commit was attempted");
    assert!(w.durable() < mark, "not durable while commits fail");
    w.fail_commits(false);
    assert!(w.flush(LONG));
    assert!(w.durable() >= mark);
    drop(w);
    assert_eq!(load(&dir.file()).usage, [(1, vec![3; 10])]);
}
