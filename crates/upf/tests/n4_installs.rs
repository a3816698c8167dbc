//! Every data-path install and removal is visible (issue 26 §8), over loopback against the real
//! binary: counted in /metrics by result, and logged at debug (target `upf::datapath`) with the
//! SEID and the session's rule counts.
mod common;

use common::{Peer, Upf};
use std::net::Ipv4Addr;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message};
use upf_smf as smf;

const SMF: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// `upf_datapath_{installs,removals}_total{result}`, as the integer it is.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // whole, not negative
fn count(upf: &Upf, what: &str, result: &str) -> u64 {
    let name = format!("upf_datapath_{what}_total");
    upf.metric(&name, &[("result", result)])
        .unwrap_or_else(|| panic!("{name}{{result={result}}} not in /metrics")) as u64
}

/// [installs ok, installs failed, removals ok, removals failed].
fn counts(upf: &Upf) -> [u64; 4] {
    [
        count(upf, "installs", "ok"),
        count(upf, "installs", "failed"),
        count(upf, "removals", "ok"),
        count(upf, "removals", "failed"),
    ]
}

#[test]
fn installs_and_removals_are_counted_and_logged() {
    let config = std::env::temp_dir().join(format!("upf-installs-{}.toml", std::process::id()));
    std::fs::write(&config, "[log]\nlevel = \"info,upf::datapath=debug\"\n").unwrap();
    let upf = Upf::start(&["--config", config.to_str().unwrap()]);
    let _ = std::fs::remove_file(&config);
    assert_eq!(counts(&upf), [0, 0, 0, 0]);
    let mut peer = Peer::new(SMF, &upf);
    assert_eq!(peer.associate(3_913_000_000), Cause::REQUEST_ACCEPTED);
    // The session Peer::establish asks for, to know its rules.
    let asked = smf::establishment(peer.node.clone(), 1, SMF, smf::UeAddr::Choose);
    let seid = peer.establish();
    assert_eq!(counts(&upf), [1, 0, 0, 0]);

    let mut m = smf::modification();
    m.update_fars.push(UpdateFar {
        far_id: FarId(1),
        apply_action: Some(ApplyAction::DROP),
        ..Default::default()
    });
    match peer.request(Some(seid), m).message {
        Message::SessionModificationResponse(r) => assert_eq!(r.cause, Cause::REQUEST_ACCEPTED),
        m => panic!("{m:?}"),
    }
    assert_eq!(counts(&upf), [2, 0, 0, 0]);
    // Refused by the agent before the data path: not an install.
    let mut m = smf::modification();
    m.update_fars.push(UpdateFar {
        far_id: FarId(99),
        apply_action: Some(ApplyAction::DROP),
        ..Default::default()
    });
    match peer.request(Some(seid), m).message {
        Message::SessionModificationResponse(r) => assert_ne!(r.cause, Cause::REQUEST_ACCEPTED),
        m => panic!("{m:?}"),
    }
    assert_eq!(counts(&upf), [2, 0, 0, 0]);

    match peer.request(Some(seid), SessionDeletionRequest {}).message {
        Message::SessionDeletionResponse(r) => assert_eq!(r.cause, Cause::REQUEST_ACCEPTED),
        m => panic!("{m:?}"),
    }
    assert_eq!(counts(&upf), [2, 0, 1, 0]);

    // The lines, once a scrape (above) has shown everything done.
    let log = upf.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("upf::datapath") && l.contains(&format!("{seid:#x}")))
        .collect();
    let rules = format!(
        "pdrs={} fars={} qers={} urrs={} bar={}",
        asked.create_pdrs.len(),
        asked.create_fars.len(),
        asked.create_qers.len(),
        asked.create_urrs.len(),
        asked.create_bar.is_some()
    );
    assert_eq!(lines.len(), 3, "{log}");
    for (l, what) in lines.iter().zip(["installed", "installed", "removed"]) {
        assert!(l.contains("DEBUG"), "{l}");
        assert!(l.contains(&format!("session {what}")), "{l}");
        assert!(l.contains(&rules), "{l} (expected {rules})");
    }
}
