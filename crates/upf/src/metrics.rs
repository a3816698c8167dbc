//! The Prometheus text exposition of `/metrics`. Workers keep plain per-worker counters; they
//! are read between two batches on a scrape and rendered here, so metrics cost the fast path
//! nothing but the counting it does anyway.

use std::fmt::Write;
use upf_dataplane::{DropReason, Port};
use upf_n4::reliability::{CacheStats, Eviction};
use upf_n4::Stats;
use upf_runtime::{WorkerStats, BATCH_TIME_BUCKETS};

/// The control side's share of a scrape.
#[derive(Debug, Clone)]
pub struct ControlView {
    pub sessions: usize,
    pub associations: usize,
    pub pfcp: Stats,
    pub response_cache: CacheStats,
    pub admin_refused: u64,
    pub uptime_s: u64,
}

struct Out(String);

impl Out {
    fn help(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// A counter family with one label: a line per (label value, count).
    fn counters<'a>(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        values: impl IntoIterator<Item = (&'a str, u64)>,
    ) {
        self.help(name, "counter", help);
        for (v, n) in values {
            self.line(name, &[(label, v)], n);
        }
    }

    fn line(&mut self, name: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(val));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {v}");
    }
}

/// Label values may hold `"` or `\` (interface names from the config); Prometheus escapes them.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub fn render(workers: &[WorkerStats], c: &ControlView) -> String {
    let mut o = Out(String::with_capacity(16 << 10));
    o.help(
        "upf_uptime_seconds",
        "gauge",
        "Seconds since the UPF started.",
    );
    o.line("upf_uptime_seconds", &[], c.uptime_s);
    o.help(
        "upf_admin_connections_refused_total",
        "counter",
        "Admin/metrics connections refused: admin.max_connections were being served.",
    );
    o.line("upf_admin_connections_refused_total", &[], c.admin_refused);

    let per_port = |o: &mut Out, name: &str, help: &str, f: &dyn Fn(&WorkerStats, usize) -> u64| {
        o.help(name, "counter", help);
        for (w, s) in workers.iter().enumerate() {
            let w = w.to_string();
            for p in Port::ALL {
                o.line(name, &[("worker", &w), ("port", p.name())], f(s, p.index()));
            }
        }
    };
    per_port(
        &mut o,
        "upf_packets_received_total",
        "Packets the pipeline received, by ingress port.",
        &|s, i| s.counters.rx_packets[i],
    );
    per_port(
        &mut o,
        "upf_bytes_received_total",
        "Octets the pipeline received, by ingress port.",
        &|s, i| s.counters.rx_bytes[i],
    );
    per_port(
        &mut o,
        "upf_packets_sent_total",
        "Packets the pipeline sent, by egress port.",
        &|s, i| s.counters.tx_packets[i],
    );
    per_port(
        &mut o,
        "upf_bytes_sent_total",
        "Octets the pipeline sent, by egress port.",
        &|s, i| s.counters.tx_bytes[i],
    );

    o.help(
        "upf_packets_dropped_total",
        "counter",
        "Packets dropped, by reason (every drop has one).",
    );
    for (w, s) in workers.iter().enumerate() {
        let w = w.to_string();
        for &r in DropReason::ALL {
            o.line(
                "upf_packets_dropped_total",
                &[("worker", &w), ("reason", r.name())],
                s.counters.dropped(r),
            );
        }
    }
    let gauge = |o: &mut Out, name: &str, help: &str, f: &dyn Fn(&WorkerStats) -> u64| {
        o.help(name, "gauge", help);
        for (w, s) in workers.iter().enumerate() {
            o.line(name, &[("worker", &w.to_string())], f(s));
        }
    };
    let counter = |o: &mut Out, name: &str, help: &str, f: &dyn Fn(&WorkerStats) -> u64| {
        o.help(name, "counter", help);
        for (w, s) in workers.iter().enumerate() {
            o.line(name, &[("worker", &w.to_string())], f(s));
        }
    };
    gauge(
        &mut o,
        "upf_packets_buffered",
        "Downlink packets held in buffers (idle UEs, BUFF FARs).",
        &|s| s.counters.buffered,
    );
    gauge(
        &mut o,
        "upf_worker_sessions",
        "Sessions installed on the worker.",
        &|s| s.sessions as u64,
    );
    counter(
        &mut o,
        "upf_packets_created_total",
        "Packets made by the UPF: duplicates, Echo Responses, Error Indications, End Markers.",
        &|s| s.counters.created,
    );
    counter(
        &mut o,
        "upf_error_indications_suppressed_total",
        "Error Indications not sent because of their rate limit.",
        &|s| s.counters.error_indications_suppressed,
    );
    counter(
        &mut o,
        "upf_error_indications_repeated_total",
        "Error Indications received for a session already reported to its SMF since its last modification (not reported again).",
        &|s| s.counters.error_indications_repeated,
    );
    counter(
        &mut o,
        "upf_packets_handed_off_total",
        "Packets a worker received for another worker's UE and handed over.",
        &|s| s.handed_off,
    );
    counter(
        &mut o,
        "upf_packets_hand_off_dropped_total",
        "Packets for another worker's UE dropped: that worker's backlog of handed-over packets was full.",
        &|s| s.hand_off_dropped,
    );
    counter(
        &mut o,
        "upf_packets_no_queue_total",
        "Packets sent by a port the worker has no queue for.",
        &|s| s.no_queue,
    );
    counter(
        &mut o,
        "upf_batches_total",
        "Batches the worker processed.",
        &|s| s.batch.batches,
    );
    counter(
        &mut o,
        "upf_batch_packets_total",
        "Packets in those batches.",
        &|s| s.batch.packets,
    );

    o.help(
        "upf_batch_duration_seconds",
        "histogram",
        "Time from a batch's start to its packets handed to the interfaces.",
    );
    for (w, s) in workers.iter().enumerate() {
        let w = w.to_string();
        let mut cum = 0;
        for (i, n) in s.batch.time.iter().enumerate() {
            cum += n;
            let le = if i + 1 == BATCH_TIME_BUCKETS {
                "+Inf".to_string()
            } else {
                format!("{}", (1u64 << i) as f64 * 1e-6)
            };
            o.line(
                "upf_batch_duration_seconds_bucket",
                &[("worker", &w), ("le", &le)],
                cum,
            );
        }
        o.line(
            "upf_batch_duration_seconds_sum",
            &[("worker", &w)],
            s.batch.time_ns_sum as f64 * 1e-9,
        );
        o.line(
            "upf_batch_duration_seconds_count",
            &[("worker", &w)],
            s.batch.batches,
        );
    }

    let io = |o: &mut Out, name: &str, help: &str, f: &dyn Fn(&upf_io::IoStats) -> u64| {
        o.help(name, "counter", help);
        for (w, s) in workers.iter().enumerate() {
            let w = w.to_string();
            for (port, what, st) in &s.io {
                o.line(
                    name,
                    &[("worker", &w), ("port", port.name()), ("queue", what)],
                    f(st),
                );
            }
        }
    };
    io(
        &mut o,
        "upf_io_received_packets_total",
        "Packets the interface queue received.",
        &|s| s.rx_packets,
    );
    io(
        &mut o,
        "upf_io_sent_packets_total",
        "Packets the interface queue sent.",
        &|s| s.tx_packets,
    );
    io(
        &mut o,
        "upf_io_rx_discarded_total",
        "Frames the queue received and discarded (not IP, too big).",
        &|s| s.rx_discarded,
    );
    io(
        &mut o,
        "upf_io_rx_kernel_dropped_total",
        "Frames the kernel dropped before the queue saw them (full ring, empty fill ring).",
        &|s| s.rx_kernel_dropped,
    );
    io(
        &mut o,
        "upf_io_tx_dropped_total",
        "Packets the queue could not send (ring full, no neighbour).",
        &|s| s.tx_dropped,
    );

    o.help("upf_pfcp_sessions", "gauge", "PFCP sessions.");
    o.line("upf_pfcp_sessions", &[], c.sessions);
    o.help("upf_pfcp_associations", "gauge", "PFCP associations.");
    o.line("upf_pfcp_associations", &[], c.associations);
    o.help(
        "upf_pfcp_messages_received_total",
        "counter",
        "PFCP messages received, by type.",
    );
    for (t, &n) in c.pfcp.received.iter().enumerate() {
        if n > 0 {
            let t = u8::try_from(t).unwrap_or(0);
            o.line(
                "upf_pfcp_messages_received_total",
                &[("type", upf_pfcp::message_name(t))],
                n,
            );
        }
    }
    o.help(
        "upf_pfcp_responses_sent_total",
        "counter",
        "PFCP responses sent, by cause.",
    );
    for (v, &n) in c.pfcp.causes_sent.iter().enumerate() {
        if n > 0 {
            let cause = upf_pfcp::Cause(u8::try_from(v).unwrap_or(0));
            o.line(
                "upf_pfcp_responses_sent_total",
                &[("cause", &format!("{v}")), ("name", cause.name())],
                n,
            );
        }
    }
    for (name, kind, help, v) in [
        (
            "upf_pfcp_retransmissions_answered_total",
            "counter",
            "Retransmitted requests answered from the response cache.",
            c.pfcp.retransmissions_answered,
        ),
        (
            "upf_pfcp_retransmissions_sent_total",
            "counter",
            "Requests of ours sent again (T1 expired).",
            c.pfcp.retransmissions_sent,
        ),
        (
            "upf_pfcp_requests_given_up_total",
            "counter",
            "Requests of ours unanswered after N1 retransmissions.",
            c.pfcp.requests_given_up,
        ),
        (
            "upf_pfcp_dropped_total",
            "counter",
            "PFCP datagrams dropped without an answer.",
            c.pfcp.dropped,
        ),
        (
            "upf_pfcp_events_dropped_total",
            "counter",
            "Agent events (what is logged) dropped: 4096 were waiting for the driver.",
            c.pfcp.events_dropped,
        ),
        (
            "upf_pfcp_response_cache_expired_total",
            "counter",
            "Cached responses dropped at the end of the SMF's retransmission window.",
            c.response_cache.expired,
        ),
        (
            "upf_pfcp_response_cache_entries",
            "gauge",
            "Responses kept for retransmitted requests.",
            c.response_cache.entries as u64,
        ),
        (
            "upf_pfcp_response_cache_bytes",
            "gauge",
            "Their bytes: payloads and the per-entry overhead.",
            c.response_cache.bytes as u64,
        ),
    ] {
        o.help(name, kind, help);
        o.line(name, &[], v);
    }
    o.counters(
        "upf_pfcp_reports_dropped_total",
        "Requests of ours not sent, by the bound reached (requests or bytes awaiting a response).",
        "bound",
        [
            ("requests", c.pfcp.reports_dropped),
            ("bytes", c.pfcp.reports_dropped_bytes),
        ],
    );
    o.counters(
        "upf_pfcp_response_cache_evictions_total",
        "Cached responses dropped before expiry, by the bound reached.",
        "reason",
        Eviction::ALL.map(|r| (r.name(), c.response_cache.evicted[r as usize])),
    );
    o.counters(
        "upf_pfcp_requests_refused_total",
        "Requests refused at the N4 trust boundary, by reason (docs/operations.md).",
        "reason",
        upf_n4::Refusal::ALL.map(|r| (r.name(), c.pfcp.refused[r.index()])),
    );
    o.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_drops_and_histogram() {
        let mut w = WorkerStats::default();
        w.counters.rx_packets[Port::N3.index()] = 7;
        w.counters.dropped[DropReason::UnknownTeid as usize] = 2;
        w.batch.batches = 3;
        w.batch.time[0] = 1;
        w.batch.time[2] = 2;
        w.io.push((
            Port::N3,
            "n3: udp \"x\"".into(),
            upf_io::IoStats {
                rx_packets: 7,
                ..Default::default()
            },
        ));
        let mut pfcp = Stats::default();
        pfcp.received[5] = 1;
        pfcp.causes_sent[1] = 1;
        pfcp.refused[upf_n4::Refusal::SessionOfAnother.index()] = 4;
        let t = render(
            &[w.clone(), w],
            &ControlView {
                sessions: 1,
                associations: 1,
                pfcp,
                response_cache: CacheStats {
                    entries: 2,
                    bytes: 600,
                    evicted: [0, 0, 3],
                    expired: 1,
                },
                admin_refused: 4,
                uptime_s: 5,
            },
        );
        assert!(
            t.contains("upf_packets_received_total{worker=\"1\",port=\"n3\"} 7\n"),
            "{t}"
        );
        assert!(t.contains("upf_packets_dropped_total{worker=\"0\",reason=\"unknown_teid\"} 2\n"));
        assert!(
            t.contains("upf_batch_duration_seconds_bucket{worker=\"0\",le=\"0.000004\"} 3\n"),
            "{t}"
        );
        assert!(t.contains("upf_batch_duration_seconds_bucket{worker=\"0\",le=\"+Inf\"} 3\n"));
        assert!(t.contains("queue=\"n3: udp \\\"x\\\"\""));
        assert!(t.contains(
            "upf_pfcp_responses_sent_total{cause=\"1\",name=\"Request accepted (success)\"} 1"
        ));
        assert!(t.contains("upf_pfcp_response_cache_bytes 600\n"));
        assert!(t.contains("upf_admin_connections_refused_total 4\n"));
        assert!(t.contains("upf_pfcp_response_cache_evictions_total{reason=\"peer_bytes\"} 3\n"));
        assert!(t.contains("upf_pfcp_reports_dropped_total{bound=\"bytes\"} 0\n"));
        assert!(t.contains("upf_pfcp_requests_refused_total{reason=\"session_of_another\"} 4\n"));
        // Every sample line is NAME{labels} VALUE or NAME VALUE; every family has HELP and TYPE.
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let v = l.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
            let name = l.split(['{', ' ']).next().unwrap();
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                t.contains(&format!("# TYPE {family} ")) || t.contains(&format!("# TYPE {name} ")),
                "{name}"
            );
        }
    }
}
