//! What the state file costs: N sessions of 2 KB written through the writer (puts/s, commits),
//! the latency of a commit of one op, then the open+load of a restart, after a clean close and
//! after an abort. One JSON line.
//!
//!   cargo run --release -p upf-state --example store_bench -- N [DIR]
//!
//! DIR (default: the system's temporary directory) should be on the disk the UPF would use:
//! a tmpfs makes every fsync free.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use upf_state::{Op, Store, WriterOptions};

const NODE: &str = "store-bench";
const VALUE: usize = 2048;
const CHILD: &str = "STORE_BENCH_CHILD";

fn main() {
    if let Some(path) = std::env::var_os(CHILD) {
        return child(Path::new(&path));
    }
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(100_000, |a| a.parse().expect("N: a number"));
    let dir = args.next().map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = dir.join(format!("upf-store-bench-{}", std::process::id()));
    let path = dir.join("upf.redb");
    let _ = std::fs::remove_dir_all(&dir);

    // Write: as fast as submit takes them; a refused submit (queue full) waits for the writer.
    let w = Store::open(&path, NODE)
        .expect("open")
        .into_writer(WriterOptions::default());
    let mut refused = 0u64;
    let t = Instant::now();
    for s in 0..n {
        let op = Op::PutSession(s, value(s));
        while !w.submit(op.clone()) {
            refused += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    assert!(w.flush(Duration::from_secs(600)), "flush");
    let write_s = t.elapsed().as_secs_f64();
    let stats = w.stats();
    // One op at a time, each flushed: the latency of one durable commit (an establishment
    // answered only once its session is on disk would wait this long).
    let mut one = Vec::new();
    for s in 0..200 {
        let t = Instant::now();
        assert!(w.submit(Op::PutUsage(s, vec![0; 64])));
        assert!(w.flush(Duration::from_secs(60)));
        one.push(t.elapsed().as_secs_f64() * 1e3);
    }
    one.sort_by(f64::total_cmp);
    let (commit_p50_ms, commit_p99_ms) = (one[100], one[198]);
    w.close();
    let file_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());

    let (open_ms, open_load_ms) = open_load(&path, n);

    // An unclean close: a child updates the file, flushes, and aborts.
    let status = Command::new(std::env::current_exe().expect("current_exe"))
        .env(CHILD, &path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn the child");
    assert!(!status.success(), "the child aborts");
    let (abort_open_ms, abort_open_load_ms) = open_load(&path, n);

    println!(
        "{{\"n\":{n},\"value_bytes\":{VALUE},\"write_s\":{write_s:.3},\"puts_per_s\":{:.0},\
         \"commits\":{},\"ops_written\":{},\"refused_submits\":{refused},\"file_bytes\":{file_bytes},\
         \"one_op_commit_p50_ms\":{commit_p50_ms:.2},\"one_op_commit_p99_ms\":{commit_p99_ms:.2},\
         \"open_ms\":{open_ms:.1},\"open_load_ms\":{open_load_ms:.1},\
         \"after_abort_open_ms\":{abort_open_ms:.1},\"after_abort_open_load_ms\":{abort_open_load_ms:.1}}}",
        n as f64 / write_s,
        stats.commits,
        stats.ops_written,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens the file and loads everything, as a restart does; the milliseconds it took.
/// Opens the file and loads everything, as a restart does: the milliseconds the open took, and
/// the open and the load.
fn open_load(path: &Path, n: u64) -> (f64, f64) {
    let t = Instant::now();
    let store = Store::open(path, NODE).expect("reopen");
    let open = t.elapsed().as_secs_f64() * 1e3;
    let loaded = store.load().expect("load");
    let both = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(loaded.sessions.len() as u64, n);
    (open, both)
}

fn child(path: &Path) {
    let w = Store::open(path, NODE)
        .expect("open")
        .into_writer(WriterOptions::default());
    for s in 0..1000 {
        assert!(w.submit(Op::PutUsage(s, vec![1; 64])));
        assert!(w.submit(Op::PutSession(s, value(s + 1))));
    }
    assert!(w.flush(Duration::from_secs(60)));
    std::process::abort();
}

fn value(s: u64) -> Vec<u8> {
    let mut v = vec![0u8; VALUE];
    v[..8].copy_from_slice(&s.to_le_bytes());
    v
}
