//! The Prometheus text exposition of `/metrics`. Workers keep plain per-worker counters; they
//! are read between two batches on a scrape and rendered here, so metrics cost the fast path
//! nothing but the counting it does anyway.

use crate::datapath::InstallCounts;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode_registry;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::{self, Counter, Gauge};
use prometheus_client::registry::Registry;
use std::fmt;
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
    /// Session installs and removals on the data path.
    pub datapath: InstallCounts,
    pub admin_refused: u64,
    pub uptime_s: u64,
    /// The store's writer, with `[state]`; the sum of every shard's, in a cluster.
    pub state: Option<upf_state::WriterStats>,
    /// With `[cluster]`: the shards served and etcd's reachability.
    pub cluster: Option<ClusterView>,
    /// The usage checkpoints, with `usage_checkpoint_ms` > 0.
    pub checkpoints: Option<crate::checkpoint::CheckpointStats>,
}

/// What a cluster's instance serves.
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    /// The shards it serves, each with its sessions.
    pub shards: Vec<(String, usize)>,
    pub etcd_reachable: bool,
}

/// The XDP engine's share of a scrape, when it is on.
#[derive(Debug, Clone)]
pub struct XdpView {
    pub sessions: usize,
    pub stats: upf_xdp::Stats,
}

/// One scrape: the snapshot as a prometheus-client collector, encoded in the registry's order.
#[derive(Debug)]
struct Scrape {
    workers: Vec<WorkerStats>,
    control: ControlView,
    xdp: Option<XdpView>,
}

type Labels = Vec<(&'static str, String)>;

/// A family of counters or gauges: HELP and TYPE, then a sample per label set. `name` is the
/// samples' name; prometheus-client writes a counter's `_total` itself and names its family
/// without it.
fn family(
    e: &mut DescriptorEncoder,
    kind: MetricType,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Labels, u64)>,
) -> fmt::Result {
    let name = match kind {
        Counter => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    };
    let mut m = e.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in samples {
        let sample = m.encode_family(&labels)?;
        match kind {
            Counter => ConstCounter::new(v).encode(sample)?,
            _ => ConstGauge::new(v).encode(sample)?,
        }
    }
    Ok(())
}

/// A sample per non-zero count of a table indexed by a PFCP value (message type, cause).
fn nonzero<'a>(
    counts: &'a [u64],
    labels: impl Fn(u8) -> Labels + 'a,
) -> impl Iterator<Item = (Labels, u64)> + 'a {
    (counts.iter().enumerate())
        .filter(|&(_, &n)| n > 0)
        .map(move |(i, &n)| (labels(u8::try_from(i).unwrap_or(0)), n))
}

fn worker(w: usize) -> Labels {
    vec![("worker", w.to_string())]
}

impl Scrape {
    /// A counter or gauge per worker: `[(worker), value]`.
    fn per_worker(&self, f: impl Fn(&WorkerStats) -> u64) -> Vec<(Labels, u64)> {
        (self.workers.iter().enumerate())
            .map(|(w, s)| (worker(w), f(s)))
            .collect()
    }

    /// A counter per worker and port.
    fn per_port(&self, f: impl Fn(&WorkerStats, usize) -> u64) -> Vec<(Labels, u64)> {
        let mut v = Vec::new();
        for (w, s) in self.workers.iter().enumerate() {
            for p in Port::ALL {
                let labels = vec![("worker", w.to_string()), ("port", p.name().to_string())];
                v.push((labels, f(s, p.index())));
            }
        }
        v
    }

    /// A value per worker and queue group (priority modes; none in FIFO).
    fn per_group(
        &self,
        f: impl Fn(&upf_runtime::priority::GroupStatus) -> u64,
    ) -> Vec<(Labels, u64)> {
        let mut v = Vec::new();
        for (w, s) in self.workers.iter().enumerate() {
            for (g, st) in s.groups.iter().enumerate() {
                let labels = vec![("worker", w.to_string()), ("group", g.to_string())];
                v.push((labels, f(st)));
            }
        }
        v
    }

    /// A counter per worker and interface queue.
    fn per_queue(&self, f: impl Fn(&upf_io::IoStats) -> u64) -> Vec<(Labels, u64)> {
        let mut v = Vec::new();
        for (w, s) in self.workers.iter().enumerate() {
            for (port, what, st) in &s.io {
                let labels = vec![
                    ("worker", w.to_string()),
                    ("port", port.name().to_string()),
                    ("queue", what.to_string()),
                ];
                v.push((labels, f(st)));
            }
        }
        v
    }

    fn batch_duration(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let mut m = e.encode_descriptor(
            "upf_batch_duration_seconds",
            "Time from a batch's start to its packets handed to the interfaces.",
            None,
            MetricType::Histogram,
        )?;
        let bounds: Vec<f64> = (0..BATCH_TIME_BUCKETS)
            .map(|i| {
                if i + 1 == BATCH_TIME_BUCKETS {
                    f64::INFINITY
                } else {
                    (1u64 << i) as f64 * 1e-6
                }
            })
            .collect();
        for (w, s) in self.workers.iter().enumerate() {
            let buckets: Vec<(f64, u64)> = bounds.iter().copied().zip(s.batch.time).collect();
            m.encode_family(&worker(w))?
                .encode_histogram::<NoLabelSet>(
                    s.batch.time_ns_sum as f64 * 1e-9,
                    s.batch.batches,
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }
}

impl Scrape {
    /// The XDP engine's counters: its drops by the workers' reason names.
    fn encode_xdp(&self, e: &mut DescriptorEncoder, x: &XdpView) -> fmt::Result {
        let one = |v: u64| [(Labels::new(), v)];
        family(
            e,
            Counter,
            "upf_xdp_packets_dropped_total",
            "Packets the XDP engine dropped, by reason (the names of upf_packets_dropped_total).",
            (x.stats.dropped.iter()).map(|(r, n)| (vec![("reason", r.name().to_string())], *n)),
        )?;
        family(
            e,
            Counter,
            "upf_xdp_packets_forwarded_total",
            "Packets the XDP engine forwarded itself.",
            one(x.stats.forwarded),
        )?;
        family(
            e,
            Counter,
            "upf_xdp_packets_punted_total",
            "Packets the XDP engine left to the workers, unchanged.",
            one(x.stats.punted),
        )?;
        family(
            e,
            Counter,
            "upf_xdp_packets_unrouted_total",
            "Punted packets the XDP engine would have forwarded but found no next hop for, by the FIB's answer.",
            (x.stats.unrouted.iter()).map(|(r, n)| (vec![("reason", r.name().to_string())], *n)),
        )?;
        family(
            e,
            Counter,
            "upf_xdp_reports_unannounced_total",
            "Volume threshold and quota reports the XDP engine raised that its ring buffer had no room for (found in its maps on the next tick).",
            one(x.stats.crossings_lost),
        )?;
        family(
            e,
            Gauge,
            "upf_xdp_sessions",
            "Sessions the XDP engine runs.",
            one(u64::try_from(x.sessions).unwrap_or(u64::MAX)),
        )
    }
}

/// The store of `[state]`: is it keeping up, is the disk failing.
fn encode_state(e: &mut DescriptorEncoder, st: &upf_state::WriterStats) -> fmt::Result {
    let one = |v: u64| [(Labels::new(), v)];
    family(
        e,
        Counter,
        "upf_state_commits_total",
        "Transactions the store committed (each syncs to disk).",
        one(st.commits),
    )?;
    family(e, Counter, "upf_state_writes_total", "Records written to the store (one per key and commit: changes of a key in between are written once).", one(st.ops_written))?;
    family(
        e,
        Gauge,
        "upf_state_pending_writes",
        "Records waiting to be written.",
        one(st.pending_ops),
    )?;
    family(
        e,
        Gauge,
        "upf_state_pending_bytes",
        "Bytes waiting to be written (at most state.queue_bytes).",
        one(st.pending_bytes),
    )?;
    family(e, Counter, "upf_state_writes_dropped_total", "Records not written: state.queue_bytes was full. The store misses them until their next change.", one(st.dropped_ops))?;
    family(
        e,
        Counter,
        "upf_state_write_errors_total",
        "Commits that failed (a full or failing disk); retried every 500 ms.",
        one(st.write_errors),
    )?;
    family(
        e,
        Gauge,
        "upf_state_failing",
        "1 while the last commit failed and is being retried.",
        one(u64::from(st.failing)),
    )
}

/// The usage checkpoints: what they write, and the reports that wait for the store.
fn encode_checkpoints(
    e: &mut DescriptorEncoder,
    k: &crate::checkpoint::CheckpointStats,
) -> fmt::Result {
    let one = |v: u64| [(Labels::new(), v)];
    family(
        e,
        Counter,
        "upf_state_usage_checkpoints_total",
        "Usage checkpoints taken (state.usage_checkpoint_ms).",
        one(k.checkpoints),
    )?;
    family(e, Counter, "upf_state_usage_records_total", "Session usage records the checkpoints wrote (sessions that counted since the previous one).", one(k.records))?;
    family(
        e,
        Counter,
        "upf_state_usage_record_bytes_total",
        "Their bytes, before compression.",
        one(k.record_bytes),
    )?;
    family(
        e,
        Counter,
        "upf_state_usage_read_errors_total",
        "Checkpoints whose read of the workers failed.",
        one(k.read_errors),
    )?;
    family(
        e,
        Counter,
        "upf_state_usage_restored_total",
        "Sessions whose usage checkpoint was carried in at start.",
        one(k.restored),
    )?;
    family(
        e,
        Counter,
        "upf_state_reports_held_total",
        "Messages with Usage Reports held until the store had their UR-SEQN.",
        one(k.held),
    )?;
    family(
        e,
        Gauge,
        "upf_state_reports_held",
        "Such messages waiting now.",
        one(k.held_now),
    )?;
    family(
        e,
        Counter,
        "upf_state_reports_held_dropped_total",
        "Such messages dropped, too many waiting (the SMF or our T1 sends them again).",
        one(k.held_dropped),
    )?;
    family(
        e,
        Counter,
        "upf_state_reports_held_microseconds_total",
        "The time they waited, summed (µs).",
        one(k.held_us),
    )
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let (workers, c) = (&self.workers, &self.control);
        let one = |v: u64| [(Labels::new(), v)];
        family(
            &mut e,
            Gauge,
            "upf_uptime_seconds",
            "Seconds since the UPF started.",
            one(c.uptime_s),
        )?;
        family(
            &mut e,
            Counter,
            "upf_admin_connections_refused_total",
            "Admin/metrics connections refused: admin.max_connections were being served.",
            one(c.admin_refused),
        )?;
        family(
            &mut e,
            Counter,
            "upf_packets_received_total",
            "Packets the pipeline received, by ingress port.",
            self.per_port(|s, i| s.counters.rx_packets[i]),
        )?;
        family(
            &mut e,
            Counter,
            "upf_bytes_received_total",
            "Octets the pipeline received, by ingress port.",
            self.per_port(|s, i| s.counters.rx_bytes[i]),
        )?;
        family(
            &mut e,
            Counter,
            "upf_packets_sent_total",
            "Packets the pipeline sent, by egress port.",
            self.per_port(|s, i| s.counters.tx_packets[i]),
        )?;
        family(
            &mut e,
            Counter,
            "upf_bytes_sent_total",
            "Octets the pipeline sent, by egress port.",
            self.per_port(|s, i| s.counters.tx_bytes[i]),
        )?;
        family(
            &mut e,
            Counter,
            "upf_packets_dropped_total",
            "Packets dropped, by reason (every drop has one).",
            workers.iter().enumerate().flat_map(|(w, s)| {
                DropReason::ALL.iter().map(move |&r| {
                    let labels = vec![("worker", w.to_string()), ("reason", r.name().to_string())];
                    (labels, s.counters.dropped(r))
                })
            }),
        )?;
        if let Some(x) = &self.xdp {
            self.encode_xdp(&mut e, x)?;
        }
        family(
            &mut e,
            Gauge,
            "upf_packets_buffered",
            "Downlink packets held in buffers (idle UEs, BUFF FARs).",
            self.per_worker(|s| s.counters.buffered),
        )?;
        family(
            &mut e,
            Gauge,
            "upf_worker_sessions",
            "Sessions installed on the worker.",
            self.per_worker(|s| s.sessions as u64),
        )?;
        let result = |ok: u64, failed: u64| {
            [("ok", ok), ("failed", failed)].map(|(r, n)| (vec![("result", r.to_string())], n))
        };
        let d = &c.datapath;
        family(
            &mut e,
            Counter,
            "upf_datapath_installs_total",
            "Sessions installed on the data path (established or modified), by result.",
            result(d.installs_ok, d.installs_failed),
        )?;
        family(
            &mut e,
            Counter,
            "upf_datapath_removals_total",
            "Sessions removed from the data path, by result.",
            result(d.removals_ok, d.removals_failed),
        )?;
        if let Some(st) = &c.state {
            encode_state(&mut e, st)?;
        }
        if let Some(cl) = &c.cluster {
            family(
                &mut e,
                Gauge,
                "upf_cluster_shard_sessions",
                "Sessions of each shard this instance serves (its own, and those it took over).",
                cl.shards.iter().map(|(name, n)| {
                    (
                        vec![("shard", name.clone())],
                        u64::try_from(*n).unwrap_or(u64::MAX),
                    )
                }),
            )?;
            family(
                &mut e,
                Gauge,
                "upf_cluster_etcd_reachable",
                "0 while etcd does not answer: forwarding and PFCP go on, writes wait (upf_state_pending_bytes), nothing is taken over.",
                one(u64::from(cl.etcd_reachable)),
            )?;
        }
        if let Some(k) = &c.checkpoints {
            encode_checkpoints(&mut e, k)?;
        }
        family(
            &mut e,
            Counter,
            "upf_packets_created_total",
            "Packets made by the UPF: duplicates, Echo Requests and Responses, Error Indications, Supported Extension Headers Notifications, End Markers.",
            self.per_worker(|s| s.counters.created),
        )?;
        family(
            &mut e,
            Counter,
            "upf_error_indications_suppressed_total",
            "Error Indications not sent: their rate limit, or a TEID of another shard of the cluster (its tunnels may arrive before this instance takes it over).",
            self.per_worker(|s| s.counters.error_indications_suppressed),
        )?;
        family(&mut e, Counter, "upf_error_indications_repeated_total", "Error Indications received for a session already reported to its SMF since its last modification (not reported again).", self.per_worker(|s| s.counters.error_indications_repeated))?;
        family(
            &mut e,
            Counter,
            "upf_ext_header_notifications_suppressed_total",
            "Supported Extension Headers Notifications not sent because of their rate limit.",
            self.per_worker(|s| s.counters.ext_header_notifications_suppressed),
        )?;
        family(
            &mut e,
            Counter,
            "upf_gtpu_echo_requests_sent_total",
            "GTP-U Echo Requests sent to probe the paths to peers (retransmissions included).",
            self.per_worker(|s| s.counters.echo_requests),
        )?;
        family(
            &mut e,
            Counter,
            "upf_gtpu_echo_responses_received_total",
            "GTP-U Echo Responses that answered one of our Echo Requests.",
            self.per_worker(|s| s.counters.echo_responses),
        )?;
        family(
            &mut e,
            Gauge,
            "upf_gtpu_peers",
            "GTP-U peers probed: those that live tunnels lead to.",
            self.per_worker(|s| s.counters.gtpu_peers),
        )?;
        family(
            &mut e,
            Gauge,
            "upf_gtpu_peers_unreachable",
            "GTP-U peers that left their last Echo Requests unanswered (reported to the SMFs).",
            self.per_worker(|s| s.counters.gtpu_peers_unreachable),
        )?;
        family(
            &mut e,
            Counter,
            "upf_packets_handed_off_total",
            "Packets a worker received for another worker's UE and handed over.",
            self.per_worker(|s| s.handed_off),
        )?;
        family(&mut e, Counter, "upf_packets_hand_off_dropped_total", "Packets for another worker's UE dropped: that worker's backlog of handed-over packets was full.", self.per_worker(|s| s.hand_off_dropped))?;
        family(
            &mut e,
            Counter,
            "upf_packets_no_queue_total",
            "Packets sent by a port the worker has no queue for.",
            self.per_worker(|s| s.no_queue),
        )?;
        family(
            &mut e,
            Counter,
            "upf_batches_total",
            "Batches the worker processed.",
            self.per_worker(|s| s.batch.batches),
        )?;
        family(
            &mut e,
            Counter,
            "upf_batch_packets_total",
            "Packets in those batches.",
            self.per_worker(|s| s.batch.packets),
        )?;
        self.batch_duration(&mut e)?;
        family(
            &mut e,
            Gauge,
            "upf_priority_queue_packets",
            "Packets waiting in the worker's queue group (group 0 the highest; priority modes).",
            self.per_group(|g| g.depth as u64),
        )?;
        family(
            &mut e,
            Counter,
            "upf_priority_queued_total",
            "Packets classified into the queue group.",
            self.per_group(|g| g.stats.queued),
        )?;
        family(
            &mut e,
            Counter,
            "upf_priority_dropped_total",
            "Packets dropped at the queue group's bound (priority.queue_packets, queue_bytes).",
            self.per_group(|g| g.stats.dropped),
        )?;
        family(
            &mut e,
            Gauge,
            "upf_worker_utilisation_permille",
            "Share of the worker's time spent busy, per mille, as the load-aware scheduler sees it (priority modes).",
            (self.workers.iter().enumerate())
                .filter_map(|(w, s)| Some((worker(w), u64::from(s.utilisation_permille?)))),
        )?;
        family(
            &mut e,
            Counter,
            "upf_io_received_packets_total",
            "Packets the interface queue received.",
            self.per_queue(|s| s.rx_packets),
        )?;
        family(
            &mut e,
            Counter,
            "upf_io_sent_packets_total",
            "Packets the interface queue sent.",
            self.per_queue(|s| s.tx_packets),
        )?;
        family(
            &mut e,
            Counter,
            "upf_io_rx_discarded_total",
            "Frames the queue received and discarded (not IP, too big).",
            self.per_queue(|s| s.rx_discarded),
        )?;
        family(
            &mut e,
            Counter,
            "upf_io_rx_kernel_dropped_total",
            "Frames the kernel dropped before the queue saw them (full ring, empty fill ring).",
            self.per_queue(|s| s.rx_kernel_dropped),
        )?;
        family(
            &mut e,
            Counter,
            "upf_io_tx_dropped_total",
            "Packets the queue could not send (ring full, no neighbour).",
            self.per_queue(|s| s.tx_dropped),
        )?;
        family(
            &mut e,
            Gauge,
            "upf_pfcp_sessions",
            "PFCP sessions.",
            one(c.sessions as u64),
        )?;
        family(
            &mut e,
            Gauge,
            "upf_pfcp_associations",
            "PFCP associations.",
            one(c.associations as u64),
        )?;
        family(
            &mut e,
            Counter,
            "upf_pfcp_messages_received_total",
            "PFCP messages received, by type.",
            nonzero(&c.pfcp.received, |t| {
                vec![("type", upf_pfcp::message_name(t).to_string())]
            }),
        )?;
        family(
            &mut e,
            Counter,
            "upf_pfcp_responses_sent_total",
            "PFCP responses sent, by cause.",
            nonzero(&c.pfcp.causes_sent, |v| {
                let name = upf_pfcp::Cause(v).name().to_string();
                vec![("cause", v.to_string()), ("name", name)]
            }),
        )?;
        family(
            &mut e,
            Counter,
            "upf_pfcp_retransmissions_answered_total",
            "Retransmitted requests answered from the response cache.",
            one(c.pfcp.retransmissions_answered),
        )?;
        family(
            &mut e,
            Counter,
            "upf_pfcp_retransmissions_sent_total",
            "Requests of ours sent again (T1 expired).",
            one(c.pfcp.retransmissions_sent),
        )?;
        family(
            &mut e,
            Counter,
            "upf_pfcp_requests_given_up_total",
            "Requests of ours unanswered after N1 retransmissions.",
            one(c.pfcp.requests_given_up),
        )?;
        family(
            &mut e,
            Counter,
            "upf_pfcp_dropped_total",
            "PFCP datagrams dropped without an answer.",
            one(c.pfcp.dropped),
        )?;
        family(
            &mut e,
            Counter,
            "upf_pfcp_events_dropped_total",
            "Agent events (what is logged) dropped: 4096 were waiting for the driver.",
            one(c.pfcp.events_dropped),
        )?;
        family(
            &mut e,
            Counter,
            "upf_pfcp_response_cache_expired_total",
            "Cached responses dropped at the end of the SMF's retransmission window.",
            one(c.response_cache.expired),
        )?;
        family(
            &mut e,
            Gauge,
            "upf_pfcp_response_cache_entries",
            "Responses kept for retransmitted requests.",
            one(c.response_cache.entries as u64),
        )?;
        family(
            &mut e,
            Gauge,
            "upf_pfcp_response_cache_bytes",
            "Their bytes: payloads and the per-entry overhead.",
            one(c.response_cache.bytes as u64),
        )?;
        let by = |label: &'static str, v: &str, n: u64| (vec![(label, v.to_string())], n);
        family(&mut e, Counter,
            "upf_pfcp_reports_dropped_total",
            "Requests of ours not sent, by the bound reached (requests or bytes awaiting a response).",
            [
                by("bound", "requests", c.pfcp.reports_dropped),
                by("bound", "bytes", c.pfcp.reports_dropped_bytes),
            ],
        )?;
        family(
            &mut e,
            Counter,
            "upf_pfcp_response_cache_evictions_total",
            "Cached responses dropped before expiry, by the bound reached.",
            Eviction::ALL.map(|r| by("reason", r.name(), c.response_cache.evicted[r as usize])),
        )?;
        family(
            &mut e,
            Counter,
            "upf_pfcp_requests_refused_total",
            "Requests refused at the N4 trust boundary, by reason (docs/operations.md).",
            upf_n4::Refusal::ALL.map(|r| by("reason", r.name(), c.pfcp.refused[r.index()])),
        )
    }
}

/// The Prometheus text of one scrape.
pub fn render(workers: &[WorkerStats], c: &ControlView, xdp: Option<&XdpView>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        workers: workers.to_vec(),
        control: c.clone(),
        xdp: xdp.cloned(),
    }));
    let mut out = String::with_capacity(16 << 10);
    // Writing to a String does not fail.
    let _ = encode_registry(&mut out, &registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_drops_and_histogram() {
        let mut w = WorkerStats::default();
        w.counters.rx_packets[Port::N3.index()] = 7;
        w.groups = vec![
            upf_runtime::priority::GroupStatus::default(),
            upf_runtime::priority::GroupStatus {
                depth: 5,
                bytes: 500,
                stats: upf_runtime::priority::GroupStats {
                    queued: 9,
                    dropped: 4,
                    dropped_bytes: 400,
                },
            },
        ];
        w.utilisation_permille = Some(730);
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
                datapath: InstallCounts {
                    installs_ok: 3,
                    installs_failed: 1,
                    removals_ok: 2,
                    removals_failed: 0,
                },
                admin_refused: 4,
                uptime_s: 5,
                state: None,
                cluster: None,
                checkpoints: None,
            },
            Some(&XdpView {
                sessions: 9,
                stats: upf_xdp::Stats {
                    dropped: vec![(upf_xdp::Reason::MbrExceeded, 6)],
                    punted: 8,
                    unrouted: vec![(upf_xdp::Unrouted::NoNeighbour, 2)],
                    forwarded: 11,
                    crossings_lost: 1,
                },
            }),
        );
        assert!(t.contains("upf_xdp_packets_dropped_total{reason=\"mbr_exceeded\"} 6\n"));
        assert!(t.contains("upf_xdp_packets_unrouted_total{reason=\"no_neighbour\"} 2\n"));
        assert!(t.contains("upf_xdp_packets_forwarded_total 11\n"));
        assert!(t.contains("upf_xdp_reports_unannounced_total 1\n"));
        assert!(t.contains("upf_xdp_sessions 9\n"));
        assert!(t.contains("upf_priority_queue_packets{worker=\"1\",group=\"1\"} 5\n"));
        assert!(t.contains("upf_priority_dropped_total{worker=\"0\",group=\"1\"} 4\n"));
        assert!(t.contains("upf_priority_queued_total{worker=\"0\",group=\"0\"} 0\n"));
        assert!(t.contains("upf_worker_utilisation_permille{worker=\"1\"} 730\n"));
        assert!(
            t.contains("upf_packets_received_total{worker=\"1\",port=\"n3\"} 7\n"),
            "{t}"
        );
        assert!(t.contains("upf_packets_dropped_total{worker=\"0\",reason=\"unknown_teid\"} 2\n"));
        assert!(
            t.contains("upf_batch_duration_seconds_bucket{le=\"0.000004\",worker=\"0\"} 3\n"),
            "{t}"
        );
        assert!(t.contains("upf_batch_duration_seconds_bucket{le=\"+Inf\",worker=\"0\"} 3\n"));
        assert!(t.contains("queue=\"n3: udp \\\"x\\\"\""));
        assert!(t.contains(
            "upf_pfcp_responses_sent_total{cause=\"1\",name=\"Request accepted (success)\"} 1"
        ));
        assert!(t.contains("upf_pfcp_response_cache_bytes 600\n"));
        assert!(t.contains("upf_admin_connections_refused_total 4\n"));
        assert!(t.contains("upf_pfcp_response_cache_evictions_total{reason=\"peer_bytes\"} 3\n"));
        assert!(t.contains("upf_pfcp_reports_dropped_total{bound=\"bytes\"} 0\n"));
        assert!(t.contains("upf_pfcp_requests_refused_total{reason=\"session_of_another\"} 4\n"));
        assert!(t.contains("upf_datapath_installs_total{result=\"ok\"} 3\n"));
        assert!(t.contains("upf_datapath_installs_total{result=\"failed\"} 1\n"));
        assert!(t.contains("upf_datapath_removals_total{result=\"ok\"} 2\n"));
        assert!(t.contains("upf_datapath_removals_total{result=\"failed\"} 0\n"));
        // Every sample line is NAME{labels} VALUE or NAME VALUE; every family has HELP and TYPE.
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let v = l.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
            let name = l.split(['{', ' ']).next().unwrap();
            // A counter's family is named without its samples' `_total`, a histogram's
            // without `_bucket`, `_sum` and `_count`.
            let family = ["_bucket", "_sum", "_count", "_total"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            assert!(t.contains(&format!("# TYPE {family} ")), "{name}");
        }
    }
}
