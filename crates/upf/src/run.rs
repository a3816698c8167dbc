//! `upf run`: the N4 agent on a UDP socket (a thin tokio driver around the sans-IO agent),
//! with the in-memory data path until a packet data path is configured.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;
use upf_n4::alloc::UePoolConfig;
use upf_n4::{Agent, AllowedPeer, Config, Event, TunnelAddrs};
use upf_rules::mem::MemDatapath;

/// Options of `upf run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// N4 (PFCP) address to listen on, IP[:PORT] (port 8805 by default).
    #[arg(long, default_value = "127.0.0.1:8805", value_parser = parse_n4)]
    pub n4: SocketAddr,
    /// N3 address put in chosen F-TEIDs (default: the N4 IP).
    #[arg(long)]
    pub n3: Option<IpAddr>,
    /// N9 address put in chosen F-TEIDs of Core-side PDRs (default: the N3 address).
    #[arg(long)]
    pub n9: Option<IpAddr>,
    /// UE IPv4 pool for CHV4, as NETWORK/LEN, optionally DNN=NETWORK/LEN (repeatable).
    #[arg(long = "ue-pool", default_value = "10.60.0.0/16")]
    pub ue_pools: Vec<String>,
    /// An SMF to set up an association with (UP-initiated), IP[:PORT] (repeatable).
    #[arg(long = "smf", value_parser = parse_n4)]
    pub smfs: Vec<SocketAddr>,
    /// Only these peer IP addresses may associate (repeatable; default: anyone).
    #[arg(long = "allow-peer")]
    pub allow_peers: Vec<IpAddr>,
    /// Heartbeat interval in seconds.
    #[arg(long, default_value_t = 10)]
    pub heartbeat_interval: u64,
    /// Retransmission timer T1 (ms) and count N1 of requests this UPF sends.
    #[arg(long, default_value_t = 3000)]
    pub t1_ms: u64,
    #[arg(long, default_value_t = 3)]
    pub n1: u32,
}

fn parse_n4(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 8805)))
        .map_err(|_| format!("{s:?} is not IP or IP:PORT"))
}

fn parse_pool(s: &str) -> Result<UePoolConfig, String> {
    let (dnn, net) = match s.split_once('=') {
        Some((d, n)) => (Some(d.to_string()), n),
        None => (None, s),
    };
    let bad = || format!("--ue-pool {s:?}: expected [DNN=]A.B.C.D/LEN");
    let (a, l) = net.split_once('/').ok_or_else(bad)?;
    let addr: Ipv4Addr = a.parse().map_err(|_| bad())?;
    let len: u8 = l.parse().map_err(|_| bad())?;
    Ok(UePoolConfig {
        name: dnn.clone(),
        dnn,
        network_instance: None,
        ipv4: Some((addr, len)),
        ipv6: None,
    })
}

/// NTP seconds now (RFC 5905 era 0: seconds since 1900).
fn ntp_now() -> u32 {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    ((unix + 2_208_988_800) & 0xffff_ffff) as u32
}

pub fn config(args: &Args) -> Result<Config, String> {
    let mut cfg = Config::new(args.n4.ip());
    if let Some(n3) = args.n3 {
        cfg.n3 = TunnelAddrs::from_ip(n3);
    }
    cfg.n9 = args.n9.map(TunnelAddrs::from_ip);
    cfg.ue_pools = args
        .ue_pools
        .iter()
        .map(|p| parse_pool(p))
        .collect::<Result<_, _>>()?;
    cfg.smfs = args.smfs.clone();
    cfg.allowed_peers = args
        .allow_peers
        .iter()
        .map(|&a| AllowedPeer::Addr(a))
        .collect();
    cfg.heartbeat_interval = Duration::from_secs(args.heartbeat_interval.max(1));
    cfg.t1 = Duration::from_millis(args.t1_ms.max(10));
    cfg.n1 = args.n1;
    Ok(cfg)
}

/// Runs until SIGINT/SIGTERM. Errors are start-up errors (bad config, address in use).
pub fn run(args: &Args) -> Result<(), String> {
    let cfg = config(args)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    rt.block_on(serve(args.n4, cfg))
}

async fn serve(addr: SocketAddr, cfg: Config) -> Result<(), String> {
    let sock = UdpSocket::bind(addr)
        .await
        .map_err(|e| format!("N4 bind {addr}: {e}"))?;
    let mut agent = Agent::new(cfg, MemDatapath::default(), Instant::now(), ntp_now())?;
    eprintln!("upf: N4 listening on {addr} (data path: in-memory, no packets forwarded)");
    let mut buf = vec![0u8; 65_536];
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("signal: {e}"))?;
    loop {
        while let Some(t) = agent.poll_transmit() {
            if let Err(e) = sock.send_to(&t.payload, t.dest).await {
                eprintln!("upf: N4 send to {}: {e}", t.dest);
            }
        }
        while let Some(e) = agent.poll_event() {
            log_event(&e);
        }
        // Data-path events are polled at least every 100 ms.
        let tick = Instant::now() + Duration::from_millis(100);
        let deadline = agent.poll_timeout().map_or(tick, |t| t.min(tick));
        tokio::select! {
            r = sock.recv_from(&mut buf) => match r {
                Ok((n, peer)) => agent.handle_datagram(Instant::now(), peer, &buf[..n]),
                Err(e) => eprintln!("upf: N4 receive: {e}"),
            },
            () = tokio::time::sleep_until(deadline.into()) => agent.handle_timeout(Instant::now()),
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
        }
    }
    eprintln!(
        "upf: stopping with {} associations, {} sessions",
        agent.association_count(),
        agent.session_count()
    );
    Ok(())
}

fn log_event(e: &Event) {
    match e {
        Event::Rejected {
            message_type,
            peer,
            reject,
        } => eprintln!(
            "upf: {} from {peer} rejected: {reject}",
            upf_pfcp::message_name(*message_type)
        ),
        other => eprintln!("upf: {other:?}"),
    }
}
