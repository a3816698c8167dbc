//! `upf run` as a child process on loopback, and PFCP peers each on a loopback address of its
//! own: for tests of the N4 agent as an operator runs it. No root, no traffic beyond
//! 127.0.0.0/8, every process ended on drop.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message, Pdu};
use upf_smf as smf;

/// How long a test waits for one response before it fails.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// A running `upf run` with N4 and the admin endpoint on free loopback ports, no N6 device
/// and N3 on any free UDP port.
#[derive(Debug)]
pub struct Upf {
    child: Child,
    pub n4: SocketAddr,
    pub admin: SocketAddr,
    log: PathBuf,
}

fn free_port() -> u16 {
    // Taken by the OS for a moment and given back: the UPF binds it right after.
    let u = UdpSocket::bind("127.0.0.1:0").expect("a free UDP port");
    let t = TcpListener::bind(("127.0.0.1", u.local_addr().unwrap().port()));
    match t {
        Ok(t) => t.local_addr().unwrap().port(),
        Err(_) => free_port(),
    }
}

impl Upf {
    /// Starts `upf run` with `extra` arguments after the defaults; returns once it answers a
    /// Heartbeat Request.
    pub fn start(extra: &[&str]) -> Self {
        let port = free_port();
        let n4 = SocketAddr::from(([127, 0, 0, 1], port));
        let mut args = vec!["--n4".to_string(), n4.to_string()];
        args.extend(extra.iter().map(|a| a.to_string()));
        Self::spawn(n4, &args)
    }

    /// Instance `instance` of the cluster `config` describes, whose own shard listens on
    /// `n4`; returns once it answers there.
    pub fn cluster(config: &std::path::Path, instance: &str, n4: SocketAddr) -> Self {
        let args = [
            "--config".to_string(),
            config.display().to_string(),
            "--instance".into(),
            instance.into(),
        ];
        Self::spawn(n4, &args)
    }

    fn spawn(n4: SocketAddr, extra: &[String]) -> Self {
        let port = free_port();
        let admin = SocketAddr::from(([127, 0, 0, 1], port));
        let log = std::env::temp_dir().join(format!("upf-test-{}-{port}.log", std::process::id()));
        let err = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_upf"))
            .args(["run", "--n3-port", "0", "--n6", "none"])
            .args(["--admin", &admin.to_string()])
            .args(extra)
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
        };
        upf.wait_ready();
        upf
    }

    fn wait_ready(&mut self) {
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        probe
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seq = 0x7f_0000;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("upf run exited with {st}: {}", self.log());
            }
            seq += 1;
            let hb = HeartbeatRequest {
                recovery_time_stamp: RecoveryTimeStamp(3_913_056_000),
                source_ip_address: None,
            };
            probe.send_to(&smf::encode(None, seq, hb), self.n4).unwrap();
            let mut buf = [0u8; 256];
            if let Ok((n, _)) = probe.recv_from(&mut buf) {
                if Pdu::decode(&buf[..n]).is_ok_and(|(p, _)| p.header.sequence == seq) {
                    return;
                }
            }
        }
        panic!("upf run did not answer a heartbeat: {}", self.log());
    }

    /// `kill -9`, and waits for the process to be gone (the log stays).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The daemon's process id (to read its /proc entries).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Until its store has written at least `n` records and has nothing pending (10 s).
    pub fn written(&self, n: f64) {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let pending = self.metric("upf_state_pending_writes", &[]);
            let writes = self.metric("upf_state_writes_total", &[]).unwrap_or(0.0);
            if pending == Some(0.0) && writes >= n {
                return;
            }
            assert!(
                Instant::now() < until,
                "the store did not catch up: {pending:?}, {writes}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The `/metrics` text.
    pub fn metrics(&self) -> String {
        upf::admin::get(self.admin, "/metrics").expect("/metrics")
    }

    /// The JSON of `/api/...` (null for an error, a session that does not exist).
    pub fn api(&self, what: &str) -> serde_json::Value {
        upf::admin::get(self.admin, &format!("/api/{what}"))
            .ok()
            .and_then(|body| serde_json::from_str(&body).ok())
            .unwrap_or_default()
    }

    /// The value of the `/metrics` sample `name` (as the samples are named) whose labels
    /// include `labels`; None if there is none, or no admin endpoint (yet: a cluster's
    /// standby serves none).
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let text = upf::admin::get(self.admin, "/metrics").ok()?;
        let scrape =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).ok()?;
        scrape.samples.into_iter().find_map(|s| {
            let wanted =
                s.metric == name && labels.iter().all(|&(k, v)| s.labels.get(k) == Some(v));
            match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v)
                    if wanted =>
                {
                    Some(v)
                }
                _ => None,
            }
        })
    }
}

impl Drop for Upf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        } else {
            eprintln!("upf run's log:\n{}", self.log());
        }
    }
}

/// A PFCP peer (an SMF, or an attacker) on its own loopback address.
#[derive(Debug)]
pub struct Peer {
    pub sock: UdpSocket,
    pub ip: Ipv4Addr,
    pub node: NodeId,
    upf: SocketAddr,
    seq: u32,
    next_cp_seid: u64,
}

impl Peer {
    /// A peer on `ip` (any of 127.0.0.0/8) whose Node ID is that address.
    pub fn new(ip: Ipv4Addr, upf: &Upf) -> Self {
        Self::with_node(ip, NodeId::Ipv4(ip), upf)
    }

    /// A peer on `ip` that names itself `node` (an attacker naming another SMF's node).
    pub fn with_node(ip: Ipv4Addr, node: NodeId, upf: &Upf) -> Self {
        let sock = UdpSocket::bind((ip, 0)).expect("a loopback address");
        sock.set_read_timeout(Some(ANSWER_WITHIN)).unwrap();
        Self {
            sock,
            ip,
            node,
            upf: upf.n4,
            seq: u32::from(ip.octets()[3]) << 16,
            next_cp_seid: 0x1000,
        }
    }

    /// From now on, requests go to `upf` (a restarted UPF on another port).
    pub fn retarget(&mut self, upf: &Upf) {
        self.upf = upf.n4;
    }

    /// Sends a request and returns the response with its sequence number.
    pub fn request(&mut self, seid: Option<u64>, m: impl Into<Message>) -> Pdu {
        self.seq += 1;
        self.sock
            .send_to(&smf::encode(seid, self.seq, m), self.upf)
            .unwrap();
        self.response(self.seq)
    }

    /// The response to request `seq`, skipping anything else (a heartbeat of the UPF's).
    pub fn response(&mut self, seq: u32) -> Pdu {
        let mut buf = vec![0u8; 65_536];
        let deadline = Instant::now() + ANSWER_WITHIN;
        while Instant::now() < deadline {
            let Ok((n, _)) = self.sock.recv_from(&mut buf) else {
                break;
            };
            if let Ok((p, _)) = Pdu::decode(&buf[..n]) {
                if p.header.sequence == seq && !p.message.is_request() {
                    return p;
                }
            }
        }
        panic!("{}: no response to request {seq}", self.ip);
    }

    /// A Heartbeat Request: the UPF's Recovery Time Stamp.
    pub fn heartbeat(&mut self) -> u32 {
        let hb = HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(3_913_000_000),
            source_ip_address: None,
        };
        match self.request(None, hb).message {
            Message::HeartbeatResponse(h) => h.recovery_time_stamp.0,
            m => panic!("{m:?}"),
        }
    }

    /// A Session Modification Request for session `seid`: the cause answered.
    pub fn modify(&mut self, seid: u64, m: SessionModificationRequest) -> Cause {
        match self.request(Some(seid), m).message {
            Message::SessionModificationResponse(r) => r.cause,
            m => panic!("{m:?}"),
        }
    }

    /// A Session Deletion Request for session `seid`: the cause answered.
    pub fn delete(&mut self, seid: u64) -> Cause {
        match self.request(Some(seid), SessionDeletionRequest {}).message {
            Message::SessionDeletionResponse(r) => r.cause,
            m => panic!("{m:?}"),
        }
    }

    pub fn associate(&mut self, recovery: u32) -> Cause {
        match self
            .request(None, smf::association_setup(self.node.clone(), recovery))
            .message
        {
            Message::AssociationSetupResponse(m) => m.cause,
            m => panic!("{m:?}"),
        }
    }

    /// Establishes the SMF emulator's standard session (UE address and TEIDs chosen by the
    /// UPF); returns the UP SEID.
    pub fn establish(&mut self) -> u64 {
        let r = self.try_establish(self.node.clone());
        assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
        r.up_f_seid.expect("UP F-SEID").seid
    }

    /// A Session Establishment Request naming `node`, with a fresh CP SEID.
    pub fn try_establish(&mut self, node: NodeId) -> SessionEstablishmentResponse {
        self.next_cp_seid += 1;
        let req = smf::establishment(node, self.next_cp_seid, self.ip, smf::UeAddr::Choose);
        match self.request(Some(0), req).message {
            Message::SessionEstablishmentResponse(m) => m,
            m => panic!("{m:?}"),
        }
    }
}
