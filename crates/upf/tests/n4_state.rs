//! Persisted state (`upf run --state FILE`, issue #29) as an operator meets it, without root:
//! `kill -9` and a restart bring back the association and the sessions with the same Recovery
//! Time Stamp; a store the UPF cannot use stops it with the reason, unless `--discard-state`.

mod common;

use common::{Peer, Upf};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use upf_pfcp::Cause;
use upf_smf as smf;

const SMF: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// A fresh directory for one test's store.
fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("upf-state-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn kill_9_and_a_restart_keep_the_sessions_and_the_recovery_time_stamp() {
    let d = dir("restart");
    let store = d.join("state.redb");
    let mut upf = Upf::start(&["--state", arg(&store)]);
    let mut smf = Peer::new(SMF, &upf);
    assert_eq!(smf.associate(3_913_000_000), Cause::REQUEST_ACCEPTED);
    let seids = [smf.establish(), smf.establish(), smf.establish()];
    let recovery = smf.heartbeat();
    // The association, three sessions and our Recovery Time Stamp.
    upf.written(5.0);
    upf.kill9();

    let upf = Upf::start(&["--state", arg(&store)]);
    smf.retarget(&upf);
    assert_eq!(smf.heartbeat(), recovery, "the SMF sees no restart");
    assert!(
        upf.log().contains("restored 1 associations and 3 sessions"),
        "{}",
        upf.log()
    );
    for s in seids {
        assert_eq!(
            upf.api(&format!("session/{s}"))["seid"],
            s,
            "session {s:#x}"
        );
    }
    // The SMF goes on with them: a modification, a deletion.
    let mut m = smf::modification();
    m.update_fars
        .push(smf::update_far_to_gnb(2, 0x99, Ipv4Addr::new(192, 0, 2, 7)));
    assert_eq!(smf.modify(seids[0], m), Cause::REQUEST_ACCEPTED);
    assert_eq!(smf.delete(seids[1]), Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.metric("upf_pfcp_sessions", &[]), Some(2.0));
    let _ = std::fs::remove_dir_all(&d);
}

/// `upf run` with `args`, expected to stop at start: its stderr.
fn refused(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_upf"))
        .args([
            "run",
            "--n4",
            "127.0.0.1:0",
            "--n3-port",
            "0",
            "--n6",
            "none",
            "--admin",
            "",
        ])
        .args(args)
        .output()
        .expect("upf run");
    assert!(!out.status.success(), "upf run {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_store_it_cannot_use_stops_it_with_the_reason() {
    let d = dir("refused");
    let store = d.join("state.redb");
    // Not a store at all.
    std::fs::write(&store, b"these are not the sessions you are looking for").unwrap();
    let e = refused(&["--state", arg(&store)]);
    assert!(
        e.contains("is damaged or is not a upf state file") && e.contains("--discard-state"),
        "{e}"
    );
    // Another node's.
    std::fs::remove_file(&store).unwrap();
    drop(upf_state::Store::open(&store, "upf-b.example").unwrap());
    let e = refused(&["--state", arg(&store)]);
    assert!(e.contains("belongs to node \"upf-b.example\""), "{e}");
    // In use by another UPF.
    let d2 = dir("in-use");
    let busy = d2.join("state.redb");
    let upf = Upf::start(&["--state", arg(&busy)]);
    let e = refused(&["--state", arg(&busy)]);
    assert!(e.contains("is in use by another process"), "{e}");
    drop(upf);
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&d2);
}

#[test]
fn discard_state_moves_the_store_aside_and_starts_empty() {
    let d = dir("discard");
    let store = d.join("state.redb");
    std::fs::write(&store, b"garbage").unwrap();
    let upf = Upf::start(&["--state", arg(&store), "--discard-state"]);
    let aside: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("state.redb.discarded-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(d.join(&aside[0])).unwrap(), b"garbage");
    assert_eq!(upf.metric("upf_pfcp_sessions", &[]), Some(0.0));
    drop(upf);
    let _ = std::fs::remove_dir_all(&d);
}
