//! The summary after the traffic, and the number formats of the demo's output.

use super::api::{UpfCounters, N3, N6};
use super::progress::Measured;
use super::Demo;
use std::io::Write;
use upf_loadgen::smf::Usage;

/// 1234567 → "1,234,567".
pub(super) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration given in nanoseconds, with a unit that suits it.
pub(super) fn time(ns: u64) -> String {
    let f = ns as f64;
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=99_999 => format!("{:.1} µs", f / 1e3),
        100_000..=999_999 => format!("{:.0} µs", f / 1e3),
        1_000_000..=999_999_999 => format!("{:.2} ms", f / 1e6),
        _ => format!("{:.2} s", f / 1e9),
    }
}

pub(super) fn megabytes(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

impl Demo {
    pub(super) fn summary(&self, m: &Measured, usage: Option<&Usage>) {
        let pct = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                part as f64 * 100.0 / whole as f64
            }
        };
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line(format!(
            "\nSummary: {} sessions, {:.1} s of traffic, UPF {} with {} worker{}",
            thousands(self.established as u64),
            m.seconds,
            self.backend.name(),
            self.workers,
            if self.workers == 1 { "" } else { "s" }
        ));
        let upf = m.upf.as_ref();
        let port = |f: fn(&UpfCounters) -> [u64; 2], i: usize| {
            upf.map_or_else(|| "-".to_string(), |c| thousands(f(c)[i]))
        };
        line(format!(
            "  uplink     gNB sent      {:>12} G-PDUs ({} inner){}",
            thousands(m.sent),
            megabytes(m.sent_bytes),
            if m.send_errors > 0 {
                format!(", {} send errors", thousands(m.send_errors))
            } else {
                String::new()
            }
        ));
        line(format!(
            "             UPF N3 in     {:>12}, N6 out {}",
            port(|c| c.rx_packets, N3),
            port(|c| c.tx_packets, N6)
        ));
        line(format!(
            "             DN received   {:>12}",
            thousands(m.dn_received)
        ));
        line(format!(
            "  downlink   DN echoed     {:>12}",
            thousands(m.dn_echoed)
        ));
        line(format!(
            "             UPF N6 in     {:>12}, N3 out {}",
            port(|c| c.rx_packets, N6),
            port(|c| c.tx_packets, N3)
        ));
        line(format!(
            "             gNB received  {:>12} ({} inner){}",
            thousands(m.received),
            megabytes(m.received_bytes),
            if m.other > 0 {
                format!(", {} other datagrams", thousands(m.other))
            } else {
                String::new()
            }
        ));
        let lost = m.sent.saturating_sub(m.received);
        line(format!(
            "  loss       {} of {} round trips ({:.3} %)",
            thousands(lost),
            thousands(m.sent),
            pct(lost, m.sent),
        ));
        if let Some(w) = upf.map(|c| where_lost(m, c)).filter(|w| !w.is_empty()) {
            line(format!("             {w}"));
        }
        let pipeline = if m.drops.is_empty() {
            "none in the pipeline".to_string()
        } else {
            let total: u64 = m.drops.iter().map(|(_, n)| n).sum();
            format!(
                "{} in the pipeline ({})",
                thousands(total),
                m.drops
                    .iter()
                    .map(|(k, n)| format!("{k} {}", thousands(*n)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        // Frames discarded on receive are the links' ARP and the like, not user traffic.
        let io = match m.io_drops {
            Some((_, tx)) if tx > 0 => format!(
                "; {} not sent by its interface queues (no neighbour, ring full)",
                thousands(tx)
            ),
            _ => String::new(),
        };
        line(format!("  UPF drops  {pipeline}{io}"));
        let q = |p: f64| m.rtt.quantile(p).map_or_else(|| "-".into(), time);
        line(format!(
            "  latency    round trip p50 {}, p99 {}, max {} ({} samples)",
            q(0.5),
            q(0.99),
            if m.rtt.total() > 0 {
                time(m.rtt_max)
            } else {
                "-".into()
            },
            thousands(m.rtt.total())
        ));
        if let Some(u) = usage {
            line(format!(
                "  URR        usage reported at deletion: uplink {} packets ({}), downlink {} \
                 packets ({})",
                thousands(u.uplink_packets),
                megabytes(u.uplink_octets),
                thousands(u.downlink_packets),
                megabytes(u.downlink_octets)
            ));
        }
        if let (Some(cpu), Some(c)) = (m.cpu_s, upf) {
            let handled = c.rx_packets[N3] + c.rx_packets[N6];
            line(format!(
                "  UPF CPU    {cpu:.2} s user+system in {:.1} s ({:.0} % of one core){}",
                m.seconds,
                pct_f(cpu, m.seconds),
                if handled > 0 {
                    format!(
                        ", {} per packet ({} packets in)",
                        time(ns_of(cpu / handled as f64)),
                        thousands(handled)
                    )
                } else {
                    String::new()
                }
            ));
        }
        if pct(lost, m.sent) > 1.0 {
            line(format!(
                "upf demo: {:.1} % of the round trips were lost: this machine (its CPUs are \
                 shared by the UPF, the gNB, the reflector and the kernel's veths) or this \
                 backend did not keep up with {} packets/s; try a lower --rate",
                pct(lost, m.sent),
                thousands(self.rate)
            ));
        }
        let mut out = std::io::stdout();
        let _ = out.write_all(s.as_bytes());
        let _ = out.flush();
    }
}

/// Where the lost packets went missing, hop by hop ("12 between the gNB and the UPF's N3, …").
fn where_lost(m: &Measured, c: &UpfCounters) -> String {
    let hops = [
        (m.sent, c.rx_packets[N3], "between the gNB and the UPF's N3"),
        (c.rx_packets[N3], c.tx_packets[N6], "in the UPF uplink"),
        (
            c.tx_packets[N6],
            m.dn_received,
            "between the UPF's N6 and the DN",
        ),
        (m.dn_received, m.dn_echoed, "in the reflector"),
        (
            m.dn_echoed,
            c.rx_packets[N6],
            "between the DN and the UPF's N6",
        ),
        (c.rx_packets[N6], c.tx_packets[N3], "in the UPF downlink"),
        (
            c.tx_packets[N3],
            m.received,
            "between the UPF's N3 and the gNB",
        ),
    ];
    let parts: Vec<String> = hops
        .iter()
        .filter(|(a, b, _)| a > b)
        .map(|(a, b, w)| format!("{} {w}", thousands(a - b)))
        .collect();
    parts.join(", ")
}

fn pct_f(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part * 100.0 / whole
    } else {
        0.0
    }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // non-negative, small
fn ns_of(seconds: f64) -> u64 {
    (seconds * 1e9).max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_times() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(time(850), "850 ns");
        assert_eq!(time(12_340), "12.3 µs");
        assert_eq!(time(212_000), "212 µs");
        assert_eq!(time(1_300_000), "1.30 ms");
        assert_eq!(time(2_500_000_000), "2.50 s");
    }
}
