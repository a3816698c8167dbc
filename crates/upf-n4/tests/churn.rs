//! Churn through the agent: sessions with UPF-chosen TEIDs (F-TEID CHOOSE) and UE addresses
//! (CHV4) established and deleted, 1,000 a second of virtual time with 1,000 live at a time.
//! The heap (every byte of it, counted by this binary's global allocator) must be the same
//! after the churn as before it: what the agent keeps follows what is live, not how many
//! sessions there ever were (issue #24, part 3).
//!
//! `cargo test -p upf-n4 --test churn` churns 100,000 sessions after the warm-up (CI's
//! `cargo test --workspace` runs this one); `cargo test --release -p upf-n4 --test churn --
//! --ignored` churns 1,000,000 (docs/benchmarks/n4-agent.md).

mod counting;
mod harness;

use harness::{Smf, NTP0, UPF_IP};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use upf_n4::{Agent, Config};
use upf_pfcp::Cause;
use upf_rules::mem::MemDatapath;
use upf_smf::UeAddr;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

/// The heap is counted process-wide: one churn at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const LIVE_SESSIONS: usize = 1_000;
/// Virtual time between establishments: 1,000 a second.
const STEP: Duration = Duration::from_millis(1);
/// Past the TEID hold-off (60 s): TEIDs held at their steady count, 60,000, when the heap is
/// first measured.
const WARM_UP: usize = 70_000;
/// How far the heap may move: hash tables at a steady size still differ by a few entries'
/// worth of occupancy between two instants.
const SLACK: usize = 4 << 10;

struct Churn {
    smf: Smf,
    live: VecDeque<u64>,
    done: usize,
}

impl Churn {
    fn new() -> Self {
        let mut cfg = Config::new(UPF_IP.into());
        // No heartbeats to answer during the run (the virtual run is ~20 minutes).
        cfg.heartbeat_interval = Duration::from_secs(1 << 20);
        // The response cache has its own bound (reliability.rs); kept small here, its hash
        // table settles within the warm-up (at 65,536 responses it doubled once, by 11 MB,
        // after ~250k sessions: tombstones of the churn) and the heap shows what churn
        // leaves behind elsewhere.
        cfg.limits.response_cache = 1024;
        let now = Instant::now();
        let mut smf = Smf::with_config(cfg.clone());
        // A data path that records nothing, so that its own memory stays flat.
        smf.agent = Agent::new(cfg, MemDatapath::default(), now, NTP0).unwrap();
        smf.associate(1234);
        Self {
            smf,
            live: VecDeque::with_capacity(LIVE_SESSIONS + 1),
            done: 0,
        }
    }

    /// `n` more establishments, each followed by the deletion of the oldest live session.
    fn run(&mut self, n: usize) {
        for _ in 0..n {
            self.smf.now += STEP;
            let (_, r) = self.smf.establish(UeAddr::Choose);
            assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
            assert!(r.created_pdrs[0].local_f_teid.is_some());
            assert!(!r.created_pdrs[0].ue_ip_addresses.is_empty());
            self.live.push_back(r.up_f_seid.unwrap().seid);
            if self.live.len() > LIVE_SESSIONS {
                let seid = self.live.pop_front().unwrap();
                assert_eq!(self.smf.delete(seid).1.cause, Cause::REQUEST_ACCEPTED);
            }
            self.done += 1;
            if self.done.is_multiple_of(1_000) {
                self.smf.advance(Duration::ZERO);
                while self.smf.agent.poll_event().is_some() {}
            }
        }
        self.smf.advance(Duration::ZERO);
        while self.smf.agent.poll_event().is_some() {}
    }
}

fn churn(n: usize) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Churn::new();
    c.run(WARM_UP);
    let before = counting::live().0;
    c.run(n);
    let after = counting::live().0;
    assert_eq!(c.smf.agent.session_count(), LIVE_SESSIONS);
    let moved = i128::try_from(after).unwrap() - i128::try_from(before).unwrap();
    println!("heap after {WARM_UP} sessions of warm-up: {before} B; after {n} more: {after} B ({moved:+} B)");
    assert!(
        after.abs_diff(before) <= SLACK,
        "heap moved by {moved:+} B over {n} sessions (before {before} B, after {after} B)"
    );
}

#[test]
fn churn_keeps_the_heap_flat() {
    churn(100_000);
}

#[test]
#[ignore = "1M sessions: run in release (see the module documentation)"]
fn churn_1m_keeps_the_heap_flat() {
    churn(1_000_000);
}
