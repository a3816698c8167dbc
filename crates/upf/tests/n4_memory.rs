//! What one peer can make `upf run` hold (issue 24, part 2), over loopback against the real
//! binary: a flood of large PFCP responses stays within the response cache's bounds, evicting
//! the flooder's own responses and not another SMF's, which is still answered; admin
//! connections beyond `admin.max_connections` are refused and counted. No root needed.
//!
//! Self-contained: the shared `upf run` helper (tests/common) was not on main yet when this
//! was written.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use upf_n4::reliability::CACHE_ENTRY_OVERHEAD;
use upf_n4::smf;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message, Pdu};

/// How long a test waits for one answer before it fails.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// A running `upf run` on loopback: N4 and the admin endpoint on a free port (UDP and TCP),
/// N3 on any free UDP port, no N6; killed on drop.
struct Upf {
    child: Child,
    n4: SocketAddr,
    admin: SocketAddr,
    log: PathBuf,
    config: PathBuf,
}

fn free_port() -> u16 {
    // Taken for a moment and given back: the UPF binds it right after.
    let u = UdpSocket::bind("127.0.0.1:0").expect("a free UDP port");
    match TcpListener::bind(("127.0.0.1", u.local_addr().unwrap().port())) {
        Ok(t) => t.local_addr().unwrap().port(),
        Err(_) => free_port(),
    }
}

impl Upf {
    /// Starts `upf run --config` with `config` (TOML); returns once it answers a heartbeat.
    fn start(config: &str) -> Self {
        let port = free_port();
        let n4 = SocketAddr::from(([127, 0, 0, 1], port));
        let admin = n4;
        let tmp = std::env::temp_dir();
        let stem = format!("upf-n4-memory-{}-{port}", std::process::id());
        let log = tmp.join(format!("{stem}.log"));
        let cfg = tmp.join(format!("{stem}.toml"));
        std::fs::write(&cfg, config).unwrap();
        let err = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_upf"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .args(["--n4", &n4.to_string(), "--admin", &admin.to_string()])
            .args(["--n3-port", "0", "--n6", "none"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("upf run");
        let mut upf = Self {
            child,
            n4,
            admin,
            log,
            config: cfg,
        };
        upf.wait_ready();
        upf
    }

    fn wait_ready(&mut self) {
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        probe
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        for seq in 0x7f_0000..0x7f_0100 {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("upf run exited with {st}: {}", self.log());
            }
            probe
                .send_to(&smf::encode(None, seq, heartbeat()), self.n4)
                .unwrap();
            let mut buf = [0u8; 256];
            if let Ok((n, _)) = probe.recv_from(&mut buf) {
                if Pdu::decode(&buf[..n]).is_ok_and(|(p, _)| p.header.sequence == seq) {
                    return;
                }
            }
        }
        panic!("upf run did not answer a heartbeat: {}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The status line and body of the admin endpoint's answer to GET `path`.
    fn get(&self, path: &str) -> (String, String) {
        let mut s = TcpStream::connect(self.admin).expect("admin endpoint");
        s.set_read_timeout(Some(ANSWER_WITHIN)).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: upf\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        if let Err(e) = s.read_to_string(&mut out) {
            // A refused connection is closed with our request unread: reset.
            return (e.to_string(), String::new());
        }
        let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        (
            head.lines().next().unwrap_or_default().to_string(),
            body.to_string(),
        )
    }

    /// The value of one series of `/metrics` (`name` or `name{label="value"}`).
    fn metric(&self, series: &str) -> u64 {
        let (status, text) = self.get("/metrics");
        assert!(status.contains("200"), "{status}");
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("{series} not in /metrics"))
    }

    /// The daemon's resident set (kB), for the record.
    fn rss_kb(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Upf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("upf run's log:\n{}", self.log());
        }
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(&self.config);
    }
}

fn heartbeat() -> HeartbeatRequest {
    HeartbeatRequest {
        recovery_time_stamp: RecoveryTimeStamp(3_913_056_000),
        source_ip_address: None,
    }
}

/// An SMF on a loopback address of its own.
struct Peer {
    sock: UdpSocket,
    ip: Ipv4Addr,
    upf: SocketAddr,
    seq: u32,
    buf: Vec<u8>,
}

impl Peer {
    fn new(ip: Ipv4Addr, upf: &Upf) -> Self {
        let sock = UdpSocket::bind((ip, 0)).expect("a loopback address");
        sock.set_read_timeout(Some(ANSWER_WITHIN)).unwrap();
        Self {
            sock,
            ip,
            upf: upf.n4,
            seq: u32::from(ip.octets()[3]) << 16,
            buf: vec![0; 65_536],
        }
    }

    fn node(&self) -> NodeId {
        NodeId::Ipv4(self.ip)
    }

    /// Sends `bytes` (a request with sequence number `seq`); returns its response and size.
    fn exchange(&mut self, seq: u32, bytes: &[u8]) -> (Pdu, usize) {
        self.sock.send_to(bytes, self.upf).unwrap();
        let deadline = Instant::now() + ANSWER_WITHIN;
        while Instant::now() < deadline {
            let Ok((n, _)) = self.sock.recv_from(&mut self.buf) else {
                break;
            };
            let Ok((p, _)) = Pdu::decode(&self.buf[..n]) else {
                continue;
            };
            if p.header.sequence == seq && !p.message.is_request() {
                return (p, n);
            }
            if let Message::HeartbeatRequest(_) = p.message {
                // The UPF's own heartbeat: answered, or it releases the association.
                let r = HeartbeatResponse {
                    recovery_time_stamp: RecoveryTimeStamp(1),
                };
                let _ = self
                    .sock
                    .send_to(&smf::encode(None, p.header.sequence, r), self.upf);
            }
        }
        panic!("{}: no response to request {seq}", self.ip);
    }

    fn request(&mut self, seid: Option<u64>, m: impl Into<Message>) -> (Pdu, usize) {
        self.seq += 1;
        let bytes = smf::encode(seid, self.seq, m);
        self.exchange(self.seq, &bytes)
    }

    fn associate(&mut self) -> Cause {
        match self
            .request(None, smf::association_setup(self.node(), 1))
            .0
            .message
        {
            Message::AssociationSetupResponse(m) => m.cause,
            m => panic!("{m:?}"),
        }
    }

    /// Establishes the standard session with `urrs` URRs in all; returns the UP SEID.
    fn establish(&mut self, urrs: u32) -> u64 {
        let cp_seid = 0x1000 + u64::from(self.seq);
        let mut req = smf::establishment(self.node(), cp_seid, self.ip, smf::UeAddr::Choose);
        for id in 3..=urrs {
            req.create_urrs
                .push(smf::create_urr(id, ReportingTriggers::VOLTH, Some(1 << 40)));
        }
        match self.request(Some(0), req).0.message {
            Message::SessionEstablishmentResponse(m) => {
                assert_eq!(m.cause, Cause::REQUEST_ACCEPTED, "{m:?}");
                m.up_f_seid.expect("UP F-SEID").seid
            }
            m => panic!("{m:?}"),
        }
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
    let upf = Upf::start(&format!(
        "[n4]\n\
         # (N1 + 1) x T1 = 240 s: nothing expires during the test, only bounds evict.\n\
         smf_t1_ms = 60000\nsmf_n1 = 3\n\
         [limits]\n\
         response_cache_bytes = {TOTAL}\nresponse_cache_bytes_per_peer = {PER_PEER}\n"
    ));
    let mut flooder = Peer::new(Ipv4Addr::new(127, 0, 0, 2), &upf);
    let mut other = Peer::new(Ipv4Addr::new(127, 0, 0, 3), &upf);
    assert_eq!(flooder.associate(), Cause::REQUEST_ACCEPTED);
    let seid = flooder.establish(256);
    // The other SMF associates and sends a heartbeat, to be retransmitted after the flood
    // (responses to senders without an association are not kept).
    assert_eq!(other.associate(), Cause::REQUEST_ACCEPTED);
    let hb_seq = 0x03_f000;
    let hb = smf::encode(None, hb_seq, heartbeat());
    other.exchange(hb_seq, &hb);
    let rss_before = upf.rss_kb();

    const FLOOD: usize = 3_000;
    let qaurr = SessionModificationRequest {
        pfcpsmreq_flags: Some(PfcpSmReqFlags::QAURR),
        ..Default::default()
    };
    let (mut largest, mut peak) = (0, 0);
    for i in 0..FLOOD {
        let (r, n) = flooder.request(Some(seid), qaurr.clone());
        let Message::SessionModificationResponse(m) = r.message else {
            panic!("{:?}", r.message)
        };
        assert_eq!(m.cause, Cause::REQUEST_ACCEPTED);
        assert_eq!(m.usage_reports.len(), 256);
        largest = largest.max(n);
        if i % 100 == 99 {
            let bytes = upf.metric("upf_pfcp_response_cache_bytes");
            assert!(bytes <= TOTAL, "{bytes} B cached after {i} requests");
            peak = peak.max(bytes);
        }
        if i == FLOOD / 2 {
            // Meanwhile the other SMF is answered a heartbeat and an establishment.
            other.request(None, heartbeat());
            other.establish(2);
        }
    }
    assert!(largest > 20_000, "responses of {largest} B");
    let per_entry = largest as u64 + CACHE_ENTRY_OVERHEAD as u64;
    let bytes = upf.metric("upf_pfcp_response_cache_bytes");
    let entries = upf.metric("upf_pfcp_response_cache_entries");
    let evicted = |r: &str| {
        upf.metric(&format!(
            "upf_pfcp_response_cache_evictions_total{{reason=\"{r}\"}}"
        ))
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
    let answered = upf.metric("upf_pfcp_retransmissions_answered_total");
    other.exchange(hb_seq, &hb);
    assert_eq!(
        upf.metric("upf_pfcp_retransmissions_answered_total"),
        answered + 1
    );
    let rss_after = upf.rss_kb();
    println!(
        "flood: {FLOOD} responses of {largest} B; cache at the end {entries} entries, {bytes} B \
         (peak sampled {peak} B, bound {TOTAL}, per peer {PER_PEER}); evicted peer_bytes {own}; \
         RSS {rss_before} -> {rss_after} kB"
    );
}

/// Admin connections beyond `admin.max_connections` are refused and counted; once those
/// held are closed the endpoint answers again.
#[test]
fn admin_connections_beyond_the_bound_are_refused() {
    let upf = Upf::start("[admin]\nmax_connections = 3\n");
    // Three connections that send nothing hold the three slots (up to 5 s each).
    let held: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(upf.admin).unwrap())
        .collect();
    let mut extra = TcpStream::connect(upf.admin).unwrap();
    extra.set_read_timeout(Some(ANSWER_WITHIN)).unwrap();
    let mut answer = String::new();
    let _ = extra.read_to_string(&mut answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 503"),
        "{answer}"
    );
    assert!(!upf.get("/metrics").0.contains("200"), "all slots held");
    drop(held);
    // The held connections' tasks end as they see the close; until then a scrape may be
    // refused too.
    let refused = (0..100)
        .find_map(|_| {
            let (status, body) = upf.get("/metrics");
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
    assert!(refused >= 1, "{refused}");
}
