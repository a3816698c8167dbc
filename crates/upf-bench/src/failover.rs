//! `upf-bench state`'s failover (#29): two `upf run` instances of a cluster, shard a's and
//! shard b's, each in a namespace of its own on one bridge (N4 and N3 on one address each),
//! etcd and the SMF and gNB emulators in a third. N sessions are established on a; once
//! they are in etcd, a is killed (`kill -9`), its link goes down and its address goes up on
//! b (what keepalived does), and a G-PDU of a probe session of a's is sent every
//! millisecond: `failover_resume_ms` is when the first one comes out of b's N6; then one
//! G-PDU of every session, as for the restart.

use crate::control::{admin_get, samples, timed, ADMIN};
use crate::state::{self, Sink};
use crate::veth;
use anyhow::{bail, Context as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use upf_loadgen::gnb::UeSession;
use upf_loadgen::smf::{Smf, SmfConfig};
use upf_netns::etcd::Etcd;
use upf_netns::{in_netns, Netns};

/// Shard a's and b's N4 and N3 address, and the emulators' and etcd's.
const A: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
const CORE: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 100);
/// Each instance's link to the bridge.
const LINK: &str = "n4n3";

/// What the failover measured.
#[derive(Debug)]
pub(crate) struct Measured {
    /// Establishments/s on a, its store etcd.
    pub est_per_s: f64,
    pub resume_ms: f64,
    pub all_ms: Option<f64>,
    pub lost: usize,
    /// When shard a's N4 answered again (from b), and with a's Recovery Time Stamp.
    pub pfcp_ms: f64,
    pub same_recovery: bool,
    /// What b logged of the takeover.
    pub said: Vec<String>,
}

/// One instance of the cluster.
struct Instance {
    ns: Netns,
    child: Option<Child>,
    log: PathBuf,
}

impl Instance {
    fn start(
        ns: Netns,
        exe: &Path,
        cfg: &Path,
        name: &str,
        cores: &[usize],
        dir: &Path,
    ) -> anyhow::Result<Self> {
        let list: Vec<String> = cores.iter().map(ToString::to_string).collect();
        let log = dir.join(format!("upf-{name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "taskset", "-c", &list.join(",")])
            .arg(exe)
            .args(["run", "--config"])
            .arg(cfg)
            .args(["--instance", name])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {} run", exe.display()))?;
        let mut i = Instance {
            ns,
            child: Some(child),
            log,
        };
        let until = Instant::now() + Duration::from_secs(30);
        while admin_get(i.ns.name(), "/metrics").is_err() {
            veth::upf_alive(&mut i.child, &i.log)?;
            if Instant::now() > until {
                bail!("instance {name} not up within 30 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(i)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        veth::stop_upf(&mut self.child);
    }
}

fn metric(ns: &str, name: &str) -> Option<u64> {
    let m = admin_get(ns, "/metrics").ok()?;
    samples(&m)
        .into_iter()
        .find_map(|(k, _, v)| (k == name).then_some(v))
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    upf_netns::ip(args).map(|_| ()).map_err(Into::into)
}

/// The cluster's file.
fn config(workers: usize, cores: &[usize], sessions: u32) -> String {
    let list: Vec<String> = cores.iter().map(ToString::to_string).collect();
    format!(
        "# Written by `upf-bench state` (failover).\n\
         [n4]\nheartbeat_interval_s = 3600\n\n\
         [n3]\nbackend = \"udp\"\n\n[n6]\nbackend = \"tun\"\ninterface = \"upf0\"\n\n\
         [workers]\ncount = {workers}\ncores = [{}]\n\n[limits]\nsessions = {}\n\n\
         [admin]\naddress = \"{ADMIN}\"\n\n\
         [cluster]\netcd = [\"http://{CORE}:2379\"]\nlease_ttl_s = 2\n\n\
         [cluster.shards.a]\nn4 = \"{A}\"\nn3 = [\"{A}\"]\n\
         ue_pool = [{{ ipv4 = \"10.128.0.0/10\" }}]\nteid_range = [1, 0x7fffffff]\n\n\
         [cluster.shards.b]\nn4 = \"{B}\"\nn3 = [\"{B}\"]\n\
         ue_pool = [{{ ipv4 = \"10.192.0.0/10\" }}]\nteid_range = [0x80000000, 0xffffffff]\n",
        list.join(", "),
        u64::from(sessions).max(2_000_000),
    )
}

pub(crate) fn measure(
    a: &state::Args,
    n: u32,
    exe: &Path,
    cores: &[usize],
    stop: &AtomicBool,
) -> anyhow::Result<Measured> {
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("upf-bench-failover-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let core = Netns::named(&format!("fo{pid}c"))?;
    let (na, nb) = (
        Netns::named(&format!("fo{pid}a"))?,
        Netns::named(&format!("fo{pid}b"))?,
    );
    ip(&["-n", core.name(), "link", "add", "br0", "type", "bridge"])?;
    ip(&[
        "-n",
        core.name(),
        "addr",
        "add",
        &format!("{CORE}/24"),
        "dev",
        "br0",
    ])?;
    ip(&["-n", core.name(), "link", "set", "br0", "up"])?;
    for (ns, addr, peer) in [(&na, A, "to-a"), (&nb, B, "to-b")] {
        for key in [
            "net/ipv4/conf/all/rp_filter",
            "net/ipv4/conf/default/rp_filter",
        ] {
            ns.sysctl(key, "0")?;
        }
        upf_netns::veth_pair_with_queues(
            (ns.name(), LINK, &format!("{addr}/24")),
            (core.name(), peer, ""),
            1,
        )?;
        ip(&["-n", core.name(), "link", "set", peer, "master", "br0"])?;
        ip(&["-n", ns.name(), "link", "set", "lo", "up"])?;
    }
    ip(&["-n", core.name(), "link", "set", "lo", "up"])?;
    let _etcd = Etcd::start(Some(&core), IpAddr::V4(CORE), 2379).context("etcd")?;
    let cfg = dir.join("upf.toml");
    std::fs::write(&cfg, config(a.workers, cores, n))?;
    let mut ia = Instance::start(na, exe, &cfg, "a", cores, &dir)?;
    let ib = Instance::start(nb, exe, &cfg, "b", cores, &dir)?;

    // n sessions on a, through its N4.
    let mut smf = in_netns(core.name(), || {
        let mut c = SmfConfig::new(SocketAddr::new(IpAddr::V4(A), 8805));
        c.bind = SocketAddr::new(IpAddr::V4(CORE), 0);
        c.t1 = Duration::from_secs(1);
        c.n1 = 3;
        c.window = a.window;
        Smf::new(c)
    })?
    .context("SMF emulator")?;
    let until = Instant::now() + Duration::from_secs(20);
    while let Err(e) = smf.associate() {
        veth::upf_alive(&mut ia.child, &ia.log)?;
        if Instant::now() > until {
            bail!("association with shard a: {e}");
        }
    }
    let pid_a = ia.child.as_ref().map_or(0, Child::id);
    let (est, sessions) = timed(
        &mut smf,
        pid_a,
        &state::specs(n, CORE),
        stop,
        Smf::establish_many,
    )?;
    if est.ok != u64::from(n) {
        bail!("{} of {n} establishments on shard a succeeded", est.ok);
    }
    let est_per_s = est.ok as f64 / est.seconds.max(1e-9);
    // Everything in etcd before the kill.
    let until = Instant::now() + Duration::from_secs(120);
    while metric(ia.ns.name(), "upf_state_pending_writes") != Some(0)
        || metric(ia.ns.name(), "upf_state_writes_total").unwrap_or(0) < u64::from(n)
    {
        if Instant::now() > until {
            bail!("shard a's records not in etcd within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("  failover: {n} sessions on shard a ({est_per_s:.0} establishments/s, store etcd)");
    let recovery = smf.heartbeat().context("heartbeat to shard a")?;
    // Another emulator asks shard a's N4 every 20 ms from the kill on: when it answers
    // again (b bound a's address after taking a over).
    let mut probe_n4 = in_netns(core.name(), || {
        let mut c = SmfConfig::new(SocketAddr::new(IpAddr::V4(A), 8805));
        c.bind = SocketAddr::new(IpAddr::V4(CORE), 0);
        c.t1 = Duration::from_millis(20);
        c.n1 = 3;
        Smf::new(c)
    })?
    .context("N4 probe")?;
    let ues: Vec<UeSession> = sessions.iter().map(UeSession::from).collect();
    let sink = Sink::start(ib.ns.name())?;
    let gnb = in_netns(core.name(), || UdpSocket::bind((CORE, 0)))?.context("gNB socket")?;

    if let Some(mut c) = ia.child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let t0 = Instant::now();
    // What keepalived does: a's host is gone, its address up on b, announced.
    ip(&["-n", ia.ns.name(), "link", "set", LINK, "down"])?;
    ip(&[
        "-n",
        ib.ns.name(),
        "addr",
        "add",
        &format!("{A}/24"),
        "dev",
        LINK,
    ])?;
    ip(&["-n", core.name(), "neigh", "flush", "all"])?;
    let probe = ues.len() / 2;
    let resume = loop {
        if let Some(t) = sink.first_after(t0) {
            break t.duration_since(t0);
        }
        if t0.elapsed() > Duration::from_secs(120) || stop.load(Ordering::Relaxed) {
            bail!(
                "no packet of shard a forwarded within 120 s of the kill:\n{}",
                ib.log_text()
            );
        }
        state::send(&gnb, &ues[probe], probe)?;
        std::thread::sleep(Duration::from_millis(1));
    };
    let (all, lost) = state::sweep(&gnb, &ues, &sink, t0, resume)?;
    let pfcp = loop {
        if let Ok(r) = probe_n4.heartbeat() {
            break (t0.elapsed(), r == recovery);
        }
        if t0.elapsed() > Duration::from_secs(120) || stop.load(Ordering::Relaxed) {
            bail!("shard a's N4 not answering within 120 s of the kill");
        }
    };
    let said: Vec<String> = ib
        .log_text()
        .lines()
        .filter(|l| l.contains("took over") || l.contains("restored"))
        .map(|l| l.split_once("Z ").map_or(l, |x| x.1).trim().to_string())
        .collect();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "  failover: shard a forwarding on b {:.0} ms after kill -9, every session after {}, {lost} lost; its N4 answering after {:.0} ms, same Recovery Time Stamp: {}",
        ms(resume),
        all.map_or("-".into(), |t| format!("{:.0} ms", ms(t))),
        ms(pfcp.0),
        pfcp.1
    );
    drop((smf, probe_n4, ib, ia));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Measured {
        est_per_s,
        resume_ms: ms(resume),
        all_ms: all.map(ms),
        lost,
        pfcp_ms: ms(pfcp.0),
        same_recovery: pfcp.1,
        said,
    })
}
