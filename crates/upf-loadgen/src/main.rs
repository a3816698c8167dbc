//! `upf-loadgen`: drives a UPF from the SMF side (PFCP on N4) and the gNB/UE side (GTP-U on
//! N3, with the UEs behind a TUN device).
//!
//! ```sh
//! upf-loadgen sessions --n4 127.0.0.1:8805 --count 10000          # establish, hold, Ctrl-C
//! ip netns exec e2e-ue upf-loadgen gnb --n4 192.168.4.1 --local 192.168.3.2 --tun uetun \
//!     --sessions 4 --ue-pool 10.60.0.0/16                           # see upf-topology
//! ```
#![forbid(unsafe_code)]

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command as Cmd, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_loadgen::gnb::{Gnb, GnbConfig, SessionTable, Snapshot, UeSession, GTPU_PORT};
use upf_loadgen::smf::{
    parse_cidr, ue_pool, Downlink, Qos, Session, SessionSpec, Smf, SmfConfig, SmfError, UeAddr,
};

#[derive(Debug, Parser)]
#[command(
    name = "upf-loadgen",
    version,
    about = "SMF and gNB/UE emulator for testing a UPF"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Associate, establish --count sessions and hold them (answering heartbeats and reports)
    /// until Ctrl-C or --hold; then delete them and release the association.
    Sessions {
        #[command(flatten)]
        smf: SmfOpts,
        /// Downlink tunnel address of the (imaginary) gNB (default: our N4 address).
        #[arg(long)]
        gnb: Option<Ipv4Addr>,
        /// Seconds to hold the sessions (default: until Ctrl-C).
        #[arg(long)]
        hold: Option<u64>,
        /// Switch every downlink FAR between BUFF and FORW every this many seconds (idle-UE load).
        #[arg(long)]
        toggle_every: Option<u64>,
    },
    /// Establish --sessions sessions and run the gNB/UE emulator on TUN --tun and N3 address
    /// --local, printing counters every second until Ctrl-C or --duration.
    Gnb {
        #[command(flatten)]
        smf: SmfOpts,
        /// The gNB's N3 address (downlink tunnel end; the GTP-U socket binds IP:2152).
        #[arg(long)]
        local: Ipv4Addr,
        /// Send uplink GTP-U here instead of the address in the UPF's F-TEID.
        #[arg(long)]
        n3: Option<Ipv4Addr>,
        /// TUN device of the UEs (created if missing; IFF_TUN | IFF_NO_PI).
        #[arg(long, default_value = "uetun")]
        tun: String,
        /// Number of UEs (an alias of --count).
        #[arg(long)]
        sessions: Option<usize>,
        /// Do not bring the TUN up or add the UE addresses to it (`ip addr replace`).
        #[arg(long)]
        no_configure: bool,
        /// Also point the default route into the TUN.
        #[arg(long)]
        default_route: bool,
        /// Seconds to run (default: until Ctrl-C).
        #[arg(long)]
        duration: Option<u64>,
    },
}

#[derive(Debug, clap::Args)]
struct SmfOpts {
    /// The UPF's N4 address, IP[:PORT] (port 8805 by default).
    #[arg(long, value_parser = parse_addr)]
    n4: SocketAddr,
    /// Local N4 address to bind, IP[:PORT] (default: any, port chosen by the system).
    #[arg(long, value_parser = parse_addr_any)]
    bind: Option<SocketAddr>,
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// UE addresses given by us from this pool (A.B.C.D/LEN), in order.
    #[arg(long, default_value = "10.60.0.0/16")]
    ue_pool: String,
    /// Let the UPF allocate UE addresses (CHV4) instead of --ue-pool.
    #[arg(long)]
    chv4: bool,
    /// Give uplink TEIDs (from this value on, at the --n3/--n4 address) instead of CHOOSE.
    #[arg(long)]
    ul_teid_base: Option<u32>,
    /// First downlink TEID (one per session).
    #[arg(long, default_value_t = 0x0100_0001)]
    dl_teid_base: u32,
    /// QFI of the default flow.
    #[arg(long, default_value_t = 9)]
    qfi: u8,
    /// Add a QER with the QFI and this MBR, kbit/s, UL,DL (e.g. 100000,200000).
    #[arg(long, value_parser = parse_mbr)]
    mbr: Option<(u64, u64)>,
    /// Add a QER with the QFI and no MBR.
    #[arg(long)]
    qer: bool,
    /// URR volume threshold in octets (default: measure only).
    #[arg(long)]
    volume_threshold: Option<u64>,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// T1 (ms) and N1 of our requests.
    #[arg(long, default_value_t = 1000)]
    t1_ms: u64,
    #[arg(long, default_value_t = 3)]
    n1: u32,
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 8805)))
        .map_err(|_| format!("{s:?} is not IP or IP:PORT"))
}

fn parse_addr_any(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 0)))
        .map_err(|_| format!("{s:?} is not IP or IP:PORT"))
}

fn parse_mbr(s: &str) -> Result<(u64, u64), String> {
    let (u, d) = s.split_once(',').ok_or("expected UL,DL in kbit/s")?;
    Ok((
        u.trim().parse().map_err(|e| format!("{u}: {e}"))?,
        d.trim().parse().map_err(|e| format!("{d}: {e}"))?,
    ))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            eprintln!("upf-loadgen: signal handler: {e}");
            return ExitCode::FAILURE;
        }
    }
    let r = match cli.command {
        Command::Sessions {
            smf,
            gnb,
            hold,
            toggle_every,
        } => sessions(&smf, gnb, hold, toggle_every, &stop),
        Command::Gnb {
            mut smf,
            local,
            n3,
            tun,
            sessions,
            no_configure,
            default_route,
            duration,
        } => {
            if let Some(n) = sessions {
                smf.count = n;
            }
            let g = GnbRun {
                local,
                n3,
                tun,
                configure: !no_configure,
                default_route,
                duration,
            };
            gnb(&smf, &g, &stop)
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("upf-loadgen: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn connect(o: &SmfOpts) -> anyhow::Result<Smf> {
    let mut cfg = SmfConfig::new(o.n4);
    if let Some(b) = o.bind {
        cfg.bind = b;
    }
    cfg.t1 = Duration::from_millis(o.t1_ms.max(1));
    cfg.n1 = o.n1;
    cfg.window = o.window.max(1);
    let mut smf = Smf::new(cfg)?;
    let a = smf.associate()?;
    eprintln!(
        "upf-loadgen: associated with {:?} from {} (UPF recovery time stamp {}, features {:?})",
        a.upf_node,
        smf.node_ip(),
        a.recovery_time_stamp,
        a.features
    );
    Ok(smf)
}

fn specs(o: &SmfOpts, gnb: Ipv4Addr, upf_n3: Ipv4Addr) -> anyhow::Result<Vec<SessionSpec>> {
    let ues: Vec<UeAddr> = if o.chv4 {
        vec![UeAddr::Choose; o.count]
    } else {
        let (net, len) = parse_cidr(&o.ue_pool).context("--ue-pool")?;
        ue_pool(net, len, 0, o.count)?
            .into_iter()
            .map(UeAddr::Static)
            .collect()
    };
    let qos = (o.qer || o.mbr.is_some()).then_some(Qos {
        mbr_kbps: o.mbr,
        ..Qos::default()
    });
    Ok(ues
        .into_iter()
        .zip(0u32..)
        .map(|(ue, i)| {
            let mut s = SessionSpec::new(ue, o.dl_teid_base.wrapping_add(i), gnb);
            s.ul_f_teid = o.ul_teid_base.map(|b| (b.wrapping_add(i), upf_n3));
            s.qfi = o.qfi;
            s.qos = qos;
            s.volume_threshold = o.volume_threshold;
            s
        })
        .collect())
}

/// Establishes in chunks, printing progress; stops at the first failure.
fn establish(
    smf: &mut Smf,
    specs: &[SessionSpec],
    stop: &AtomicBool,
) -> anyhow::Result<Vec<Session>> {
    let start = Instant::now();
    let mut out = Vec::with_capacity(specs.len());
    for chunk in specs.chunks(10_000) {
        for r in smf.establish_many(chunk) {
            match r {
                Ok(s) => out.push(s),
                Err(e) => {
                    cleanup(smf, &out);
                    bail!("session {}: {e}", out.len() + 1);
                }
            }
        }
        if stop.load(Ordering::Relaxed) {
            cleanup(smf, &out);
            bail!("interrupted");
        }
        if specs.len() > 10_000 {
            eprintln!("upf-loadgen: {} sessions established", out.len());
        }
    }
    let t = start.elapsed().as_secs_f64();
    eprintln!(
        "upf-loadgen: {} sessions established in {t:.3} s ({:.0}/s)",
        out.len(),
        out.len() as f64 / t.max(1e-9)
    );
    Ok(out)
}

/// Deletes the sessions and releases the association, reporting what failed.
fn cleanup(smf: &mut Smf, sessions: &[Session]) {
    let start = Instant::now();
    let failed: Vec<SmfError> = smf
        .delete_many(sessions)
        .into_iter()
        .filter_map(Result::err)
        .collect();
    eprintln!(
        "upf-loadgen: {} sessions deleted in {:.3} s{}",
        sessions.len() - failed.len(),
        start.elapsed().as_secs_f64(),
        failed
            .first()
            .map(|e| format!("; {} failed, first: {e}", failed.len()))
            .unwrap_or_default()
    );
    if let Err(e) = smf.release() {
        eprintln!("upf-loadgen: association release: {e}");
    }
    eprintln!("upf-loadgen: PFCP {:?}", smf.stats());
}

/// Answers the UPF for up to `d`, in slices so that Ctrl-C is seen quickly.
fn serve(smf: &mut Smf, d: Duration, stop: &AtomicBool) -> anyhow::Result<()> {
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        smf.serve(left.min(Duration::from_millis(200)))?;
        for e in smf.take_events() {
            eprintln!("upf-loadgen: UPF reported {e:?}");
        }
    }
    Ok(())
}

fn sessions(
    o: &SmfOpts,
    gnb: Option<Ipv4Addr>,
    hold: Option<u64>,
    toggle_every: Option<u64>,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let mut smf = connect(o)?;
    let n4_ip = match o.n4.ip() {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => bail!("IPv6 N4 is not supported"),
    };
    let specs = specs(o, gnb.unwrap_or(smf.node_ip()), n4_ip)?;
    let held = establish(&mut smf, &specs, stop)?;
    let end = hold.map(|h| Instant::now() + Duration::from_secs(h));
    let mut buffering = false;
    let mut next_toggle = toggle_every.map(|t| Instant::now() + Duration::from_secs(t));
    while !stop.load(Ordering::Relaxed) && end.is_none_or(|e| Instant::now() < e) {
        serve(&mut smf, Duration::from_secs(1), stop)?;
        if let (Some(t), Some(every)) = (next_toggle, toggle_every) {
            if Instant::now() >= t {
                buffering = !buffering;
                let mode = if buffering {
                    Downlink::Buffer { notify: true }
                } else {
                    Downlink::Forward
                };
                let start = Instant::now();
                let failed = smf
                    .set_downlink_many(&held, mode)
                    .into_iter()
                    .filter(Result::is_err)
                    .count();
                eprintln!(
                    "upf-loadgen: downlink {mode:?} on {} sessions in {:.3} s ({failed} failed)",
                    held.len(),
                    start.elapsed().as_secs_f64()
                );
                next_toggle = Some(Instant::now() + Duration::from_secs(every));
            }
        }
    }
    cleanup(&mut smf, &held);
    Ok(())
}

struct GnbRun {
    local: Ipv4Addr,
    n3: Option<Ipv4Addr>,
    tun: String,
    configure: bool,
    default_route: bool,
    duration: Option<u64>,
}

/// Runs `ip -batch -` with these commands.
fn ip_batch(cmds: &[String]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut child = Cmd::new("ip")
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .context("ip (is iproute2 installed?)")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(cmds.join("\n").as_bytes()).context("ip")?;
    }
    let st = child.wait().context("ip")?;
    if !st.success() {
        bail!("ip -batch failed ({st})");
    }
    Ok(())
}

fn rate(d: &Snapshot, secs: f64) -> String {
    let mbps = |b: u64| b as f64 * 8.0 / 1e6 / secs;
    let pps = |p: u64| p as f64 / secs;
    format!(
        "UL {:.0} pps {:.2} Mbit/s | DL {:.0} pps {:.2} Mbit/s",
        pps(d.ul_packets),
        mbps(d.ul_bytes),
        pps(d.dl_packets),
        mbps(d.dl_bytes)
    )
}

fn gnb(o: &SmfOpts, g: &GnbRun, stop: &AtomicBool) -> anyhow::Result<()> {
    let mut smf = connect(o)?;
    let n3_for_given = g.n3.or(match o.n4.ip() {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    });
    let specs = specs(o, g.local, n3_for_given.unwrap_or(Ipv4Addr::UNSPECIFIED))?;
    let held = establish(&mut smf, &specs, stop)?;
    let mut run = || -> anyhow::Result<()> {
        let table = SessionTable::new(
            held.iter()
                .map(|s| {
                    let mut u = UeSession::from(s);
                    if let Some(n3) = g.n3 {
                        u.upf_n3 = SocketAddr::new(IpAddr::V4(n3), GTPU_PORT);
                    }
                    u
                })
                .collect(),
        )?;
        let cfg = GnbConfig::new(&g.tun, SocketAddr::new(IpAddr::V4(g.local), GTPU_PORT));
        let emu = Gnb::start(&cfg, table).context("gNB")?;
        if g.configure {
            let t = emu.tun_name();
            let mut cmds = vec![format!("link set dev {t} up")];
            cmds.extend(
                held.iter()
                    .map(|s| format!("addr replace {}/32 dev {t}", s.ue)),
            );
            if g.default_route {
                cmds.push(format!("route replace default dev {t}"));
            }
            ip_batch(&cmds)?;
        }
        for s in held.iter().take(8) {
            eprintln!(
                "upf-loadgen: UE {} UL TEID {:#x} → {} | DL TEID {:#x} → {}",
                s.ue, s.ul_teid, s.upf_n3, s.dl_teid, s.gnb
            );
        }
        eprintln!(
            "upf-loadgen: gNB on {} with TUN {} ({} UEs); Ctrl-C to stop",
            emu.local_addr(),
            emu.tun_name(),
            held.len()
        );
        let end = g.duration.map(|d| Instant::now() + Duration::from_secs(d));
        let mut last = (Instant::now(), emu.counters());
        while !stop.load(Ordering::Relaxed) && end.is_none_or(|e| Instant::now() < e) {
            serve(&mut smf, Duration::from_secs(1), stop)?;
            let now = (Instant::now(), emu.counters());
            let secs = now.0.duration_since(last.0).as_secs_f64().max(1e-3);
            println!("{} || {}", rate(&now.1.since(&last.1), secs), now.1);
            last = now;
        }
        let fin = emu.stop();
        println!("final: {fin}");
        Ok(())
    };
    let r = run();
    cleanup(&mut smf, &held);
    r
}
