//! The traffic phase: the progress table printed every second, and what it measured.

use super::api::{upf_counters, upf_drops, upf_io_drops, UpfCounters, N3, N6};
use super::summary::{thousands, time};
use super::traffic::{self, Plan, Traffic};
use super::{Args, Demo, DN, DN_NS, GNB, UE_NS, UPF_N3};
use anyhow::Context;
use std::io::{IsTerminal, Write};
use std::net::{SocketAddr, SocketAddrV4};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};
use upf_loadgen::gnb::{SessionTable, UeSession};
use upf_netns::in_netns;

/// CPU time (user + system, in seconds) of process `pid` so far.
fn cpu_seconds(pid: u32, ticks_per_s: u64) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state (field 3) … utime (14), stime (15).
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / ticks_per_s.max(1) as f64)
}

fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

/// The progress table's header and one row.
const HEADER: &str = "   time     UL pps UL Mbit/s     DL pps DL Mbit/s         sent     received    drops   RTT p50   RTT p99";

#[allow(clippy::too_many_arguments)]
fn row(
    elapsed: u64,
    total: u64,
    upf: Option<(&UpfCounters, f64)>,
    sent: u64,
    received: u64,
    drops: Option<u64>,
    p50: Option<u64>,
    p99: Option<u64>,
) -> String {
    let rate = |d: &UpfCounters, secs: f64, i: usize| {
        (
            format!("{:.0}", d.tx_packets[i] as f64 / secs),
            format!("{:.1}", d.tx_bytes[i] as f64 * 8.0 / 1e6 / secs),
        )
    };
    let dash = || ("-".to_string(), "-".to_string());
    // Uplink leaves the UPF on N6, downlink on N3.
    let (ul, dl) = match upf {
        Some((d, secs)) => (rate(d, secs, N6), rate(d, secs, N3)),
        None => (dash(), dash()),
    };
    let opt = |v: Option<u64>, f: fn(u64) -> String| v.map_or_else(|| "-".into(), f);
    format!(
        "{:>7} {:>10} {:>9} {:>10} {:>9} {:>12} {:>12} {:>8} {:>9} {:>9}",
        format!("{elapsed}/{total} s"),
        ul.0,
        ul.1,
        dl.0,
        dl.1,
        thousands(sent),
        thousands(received),
        opt(drops, thousands),
        opt(p50, time),
        opt(p99, time),
    )
}

/// What the traffic phase measured, for the summary.
#[derive(Debug)]
pub(super) struct Measured {
    pub(super) seconds: f64,
    pub(super) sent: u64,
    pub(super) sent_bytes: u64,
    pub(super) send_errors: u64,
    pub(super) dn_received: u64,
    pub(super) dn_echoed: u64,
    pub(super) received: u64,
    pub(super) received_bytes: u64,
    pub(super) other: u64,
    pub(super) rtt: traffic::Counts,
    pub(super) rtt_max: u64,
    pub(super) upf: Option<UpfCounters>,
    pub(super) drops: Vec<(String, u64)>,
    /// The UPF's interface queues: discarded on receive, dropped on send.
    pub(super) io_drops: Option<(u64, u64)>,
    pub(super) cpu_s: Option<f64>,
}

impl Demo {
    pub(super) fn traffic(&mut self, a: &Args, stop: &AtomicBool) -> anyhow::Result<Measured> {
        let table = SessionTable::new(self.sessions.iter().map(UeSession::from).collect())?;
        let plan = Plan {
            table,
            upf_n3: SocketAddr::from((UPF_N3, upf_loadgen::gnb::GTPU_PORT)),
            dn: SocketAddrV4::new(DN, traffic::REFLECTOR_PORT),
            rate: a.rate,
        };
        let gnb_sock = in_netns(UE_NS, || traffic::gnb_socket(GNB))?.context("gNB socket")?;
        let dn_sock = in_netns(DN_NS, traffic::reflector_socket)?.context("reflector socket")?;
        let pid = self.daemon.as_ref().map(Child::id);
        let ticks = clock_ticks();
        let cpu = || pid.and_then(|p| cpu_seconds(p, ticks));
        let base = upf_counters();
        let base_drops = upf_drops();
        let base_io = upf_io_drops();
        let cpu0 = cpu();
        let traffic = self
            .traffic
            .insert(Traffic::start(plan, gnb_sock, dn_sock).context("traffic")?);
        let stats = traffic.stats.clone();
        say!(
            "upf demo: {} s of traffic at {} pps: UDP from every UE to {DN}:{} (64/576/1400-octet \
             packets, 7:4:1) as GTP-U from the gNB, echoed back by the DN; Ctrl-C stops early",
            a.seconds,
            thousands(a.rate),
            traffic::REFLECTOR_PORT
        );
        let tty = std::io::stdout().is_terminal();
        let mut out = std::io::stdout();
        if tty {
            let _ = writeln!(out, "\x1b[1m{HEADER}\x1b[0m");
        } else {
            let _ = writeln!(out, "{HEADER}");
        }
        let start = Instant::now();
        let mut last = (start, base.clone(), stats.rtt.snapshot());
        let mut tick = 0;
        let mut result = Ok(());
        // A row printed on a terminal without its newline (it is rewritten in place).
        let mut open = false;
        while tick < a.seconds && !stop.load(Relaxed) {
            let next = start + Duration::from_secs(tick + 1);
            // Answer the UPF meanwhile (heartbeats), in slices so that Ctrl-C is seen.
            while !stop.load(Relaxed) {
                let left = next.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                if let Some(smf) = self.smf.as_mut() {
                    if smf.serve(left.min(Duration::from_millis(100))).is_err() {
                        std::thread::sleep(left.min(Duration::from_millis(100)));
                    }
                    let _ = smf.take_events();
                } else {
                    std::thread::sleep(left.min(Duration::from_millis(100)));
                }
            }
            if let Err(e) = self.check_daemon() {
                result = Err(e);
                break;
            }
            if stop.load(Relaxed) {
                if open {
                    let _ = writeln!(out);
                    open = false;
                }
                let _ = writeln!(
                    out,
                    "upf demo: interrupted after {:.1} s",
                    start.elapsed().as_secs_f64()
                );
                break;
            }
            tick += 1;
            let now = Instant::now();
            let c = upf_counters();
            let rtt = stats.rtt.snapshot();
            let d = rtt.since(&last.2);
            let secs = now.duration_since(last.0).as_secs_f64().max(1e-3);
            let delta = match (&c, &last.1) {
                (Some(c), Some(l)) => Some(c.since(l)),
                _ => None,
            };
            let line = row(
                tick,
                a.seconds,
                delta.as_ref().map(|d| (d, secs)),
                stats.ul_sent.load(Relaxed),
                stats.dl_received.load(Relaxed),
                match (&c, &base) {
                    (Some(c), Some(b)) => Some(c.dropped.saturating_sub(b.dropped)),
                    _ => None,
                },
                d.quantile(0.5),
                d.quantile(0.99),
            );
            if tty {
                let _ = write!(out, "\r\x1b[2K{line}");
                open = true;
            } else {
                let _ = writeln!(out, "{line}");
            }
            let _ = out.flush();
            last = (now, c, rtt);
        }
        if open {
            let _ = writeln!(out);
        }
        let traffic = self.traffic.as_mut().context("traffic vanished")?;
        traffic.stop_sending();
        let seconds = start.elapsed().as_secs_f64();
        // Let what is in flight come back: until every packet has, or none has for 300 ms.
        let mut seen = (stats.dl_received.load(Relaxed), Instant::now());
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && result.is_ok() {
            let r = stats.dl_received.load(Relaxed);
            if r >= stats.ul_sent.load(Relaxed) {
                break;
            }
            if r != seen.0 {
                seen = (r, Instant::now());
            } else if seen.1.elapsed() > Duration::from_millis(300) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        traffic.stop();
        result?;
        let upf = match (upf_counters(), &base) {
            (Some(c), Some(b)) => Some(c.since(b)),
            _ => None,
        };
        let io_drops = match (upf_io_drops(), base_io) {
            (Some(e), Some(b)) => Some((e.0.saturating_sub(b.0), e.1.saturating_sub(b.1))),
            _ => None,
        };
        let drops = upf_drops()
            .into_iter()
            .map(|(k, v)| {
                let b = base_drops
                    .iter()
                    .find(|(bk, _)| *bk == k)
                    .map_or(0, |(_, n)| *n);
                (k, v.saturating_sub(b))
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        let cpu_s = match (cpu0, cpu()) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        Ok(Measured {
            seconds,
            sent: stats.ul_sent.load(Relaxed),
            sent_bytes: stats.ul_sent_bytes.load(Relaxed),
            send_errors: stats.send_errors.load(Relaxed),
            dn_received: stats.dn_received.load(Relaxed),
            dn_echoed: stats.dn_echoed.load(Relaxed),
            received: stats.dl_received.load(Relaxed),
            received_bytes: stats.dl_received_bytes.load(Relaxed),
            other: stats.dl_other.load(Relaxed),
            rtt: stats.rtt.snapshot(),
            rtt_max: stats.rtt.max(),
            upf,
            drops,
            io_drops,
            cpu_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_fits_the_header() {
        let c = UpfCounters {
            tx_packets: [50_000, 50_000],
            tx_bytes: [17_000_000, 17_000_000],
            ..Default::default()
        };
        let r = row(
            20,
            20,
            Some((&c, 1.0)),
            1_000_000,
            999_999,
            Some(12),
            Some(212_000),
            Some(1_300_000),
        );
        assert_eq!(r.chars().count(), HEADER.chars().count(), "{r}\n{HEADER}");
    }
}
