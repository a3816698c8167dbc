//! What one peer can make `upf run` hold (issue 24, part 2), over loopback against the real
//! binary: a flood of large PFCP responses stays within the response cache's bounds, evicting
//! the flooder's own responses and not another SMF's, which is still answered; admin
//! connections beyond `admin.max_connections` are refused and counted. No root needed.
mod common;

use common::{Peer, Upf};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;
use upf_n4::reliability::CACHE_ENTRY_OVERHEAD;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message};
use upf_smf as smf;

/// A config file for `upf run --config`, removed on drop.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(name: &str, text: &str) -> Self {
        let p = std::env::temp_dir().join(format!("upf-{name}-{}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        Self(p)
    }

    fn start(&self) -> Upf {
        Upf::start(&["--config", self.0.to_str().unwrap()])
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A counter or gauge of `/metrics`, as the integer it is.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // whole, not negative
fn metric(upf: &Upf, name: &str, labels: &[(&str, &str)]) -> u64 {
    upf.metric(name, labels)
        .unwrap_or_else(|| panic!("{name}{labels:?} not in /metrics")) as u64
}

/// The daemon's resident set (kB), for the record.
fn rss_kb(upf: &Upf) -> u64 {
    std::fs::read_to_string(format!("/proc/{}/status", upf.pid()))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn heartbeat() -> HeartbeatRequest {
    HeartbeatRequest {
        recovery_time_stamp: RecoveryTimeStamp(3_913_056_000),
        source_ip_address: None,
    }
}

/// Establishes the SMF emulator's standard session with `urrs` URRs in all; the UP SEID.
fn establish(peer: &mut Peer, cp_seid: u64, urrs: u32) -> u64 {
    let mut req = smf::establishment(peer.node.clone(), cp_seid, peer.ip, smf::UeAddr::Choose);
    for id in 3..=urrs {
        req.create_urrs
            .push(smf::create_urr(id, ReportingTriggers::VOLTH, Some(1 << 40)));
    }
    match peer.request(Some(0), req).message {
        Message::SessionEstablishmentResponse(m) => {
            assert_eq!(m.cause, Cause::REQUEST_ACCEPTED, "{m:?}");
            m.up_f_seid.expect("UP F-SEID").seid
        }
        m => panic!("{m:?}"),
    }
}

const TOTAL: u64 = 2 << 20;
const PER_PEER: u64 = 1 << 20;

/// A flood of Session Modification Requests with QAURR on a 256-URR session (~26 KB responses,
/// each a new sequence number) from one SMF: the response cache's bytes stay within the
/// configured bound throughout, the flooder's own oldest responses are evicted (counted), and
/// another SMF on another address is answered meanwhile and keeps its cached responses.
#[test]
fn response_flood_stays_within_the_cache_bounds() {
    let cfg = ConfigFile::new(
        "n4-memory-flood",
        &format!(
            "[n4]\n\
             # (N1 + 1) x T1 = 240 s: nothing expires during the test, only bounds evict;\n\
             # and no heartbeats of the UPF's, which the peers here do not answer.\n\
             smf_t1_ms = 60000\nsmf_n1 = 3\nheartbeat_interval_s = 3600\n\
             [limits]\n\
             response_cache_bytes = {TOTAL}\nresponse_cache_bytes_per_peer = {PER_PEER}\n"
        ),
    );
    let upf = cfg.start();
    let mut flooder = Peer::new(Ipv4Addr::new(127, 0, 0, 2), &upf);
    let mut other = Peer::new(Ipv4Addr::new(127, 0, 0, 3), &upf);
    assert_eq!(flooder.associate(1), Cause::REQUEST_ACCEPTED);
    let seid = establish(&mut flooder, 0x5000, 256);
    // The other SMF associates and sends a heartbeat, to be retransmitted after the flood
    // (responses to senders without an association are not kept).
    assert_eq!(other.associate(1), Cause::REQUEST_ACCEPTED);
    let hb_seq = 0x03_f000;
    let hb = smf::encode(None, hb_seq, heartbeat());
    other.sock.send_to(&hb, upf.n4).unwrap();
    other.response(hb_seq);
    let rss_before = rss_kb(&upf);

    const FLOOD: usize = 3_000;
    let qaurr = SessionModificationRequest {
        pfcpsmreq_flags: Some(PfcpSmReqFlags::QAURR),
        ..Default::default()
    };
    let (mut largest, mut peak) = (0, 0);
    for i in 0..FLOOD {
        let r = flooder.request(Some(seid), qaurr.clone());
        largest = largest.max(r.to_bytes().len());
        let Message::SessionModificationResponse(m) = r.message else {
            panic!("{:?}", r.message)
        };
        assert_eq!(m.cause, Cause::REQUEST_ACCEPTED);
        assert_eq!(m.usage_reports.len(), 256);
        if i % 100 == 99 {
            let bytes = metric(&upf, "upf_pfcp_response_cache_bytes", &[]);
            assert!(bytes <= TOTAL, "{bytes} B cached after {i} requests");
            peak = peak.max(bytes);
        }
        if i == FLOOD / 2 {
            // Meanwhile the other SMF is answered a heartbeat and an establishment.
            other.request(None, heartbeat());
            establish(&mut other, 0x6000, 2);
        }
    }
    assert!(largest > 20_000, "responses of {largest} B");
    let per_entry = largest as u64 + CACHE_ENTRY_OVERHEAD as u64;
    let bytes = metric(&upf, "upf_pfcp_response_cache_bytes", &[]);
    let entries = metric(&upf, "upf_pfcp_response_cache_entries", &[]);
    let evicted = |r: &str| {
        metric(
            &upf,
            "upf_pfcp_response_cache_evictions_total",
            &[("reason", r)],
        )
    };
    let own = evicted("peer_bytes");
    // The flooder keeps at most PER_PEER of its responses; all the others were its own
    // evictions, none of anyone else's.
    assert!(
        own >= (FLOOD as u64).saturating_sub(PER_PEER / per_entry + 1),
        "{own} evicted"
    );
    assert_eq!((evicted("bytes"), evicted("entries")), (0, 0));
    assert!(bytes <= PER_PEER + 16 * 1024, "{bytes}");
    // The other SMF's first heartbeat is answered from the cache, not executed again.
    let answered = metric(&upf, "upf_pfcp_retransmissions_answered_total", &[]);
    other.sock.send_to(&hb, upf.n4).unwrap();
    other.response(hb_seq);
    assert_eq!(
        metric(&upf, "upf_pfcp_retransmissions_answered_total", &[]),
        answered + 1
    );
    let rss_after = rss_kb(&upf);
    println!(
        "flood: {FLOOD} responses of {largest} B; cache at the end {entries} entries, {bytes} B \
         (peak sampled {peak} B, bound {TOTAL}, per peer {PER_PEER}); evicted peer_bytes {own}; \
         RSS {rss_before} -> {rss_after} kB"
    );
}

/// The status line of the admin endpoint's answer to GET /metrics and its body; a refused
/// connection (closed with the request unread: reset) gives the error instead.
fn scrape(upf: &Upf) -> (String, String) {
    let mut s = TcpStream::connect(upf.admin).expect("admin endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: upf\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    if let Err(e) = s.read_to_string(&mut out) {
        return (e.to_string(), String::new());
    }
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

/// Admin connections beyond `admin.max_connections` are refused and counted; once those
/// held are closed the endpoint answers again.
#[test]
fn admin_connections_beyond_the_bound_are_refused() {
    let cfg = ConfigFile::new("n4-memory-admin", "[admin]\nmax_connections = 3\n");
    let upf = cfg.start();
    // Three connections that send nothing hold the three slots (up to 5 s each).
    let held: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(upf.admin).unwrap())
        .collect();
    let mut extra = TcpStream::connect(upf.admin).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = String::new();
    let _ = extra.read_to_string(&mut answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 503"),
        "{answer}"
    );
    assert!(!scrape(&upf).0.contains("200"), "all slots held");
    drop(held);
    // The held connections' tasks end as they see the close; until then a scrape may be
    // refused too.
    let refused = (0..100)
        .find_map(|_| {
            let (status, body) = scrape(&upf);
            if status.contains("200") {
                return body.lines().find_map(|l| {
                    l.strip_prefix("upf_admin_connections_refused_total ")?
                        .parse::<u64>()
                        .ok()
                });
            }
            std::thread::sleep(Duration::from_millis(50));
            None
        })
        .expect("the endpoint answers again");
    assert!(refused >= 2, "{refused}");
}
