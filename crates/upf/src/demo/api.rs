//! The UPF's admin API as the demo reads it, from inside the UPF's namespace.

use super::{ADMIN, UPF_NS};
use crate::admin;
use anyhow::Context;
use serde_json::Value;
use std::net::SocketAddr;
use upf_netns::in_netns;

/// The UPF's counters as its admin API reports them.
#[derive(Debug, Clone, Default)]
pub(super) struct UpfCounters {
    pub(super) rx_packets: [u64; 2],
    pub(super) rx_bytes: [u64; 2],
    pub(super) tx_packets: [u64; 2],
    pub(super) tx_bytes: [u64; 2],
    pub(super) dropped: u64,
}

pub(super) const N3: usize = 0;
pub(super) const N6: usize = 1;

impl UpfCounters {
    fn parse(v: &Value) -> Self {
        let port = |key: &str| {
            let p = |name: &str| v[key][name].as_u64().unwrap_or(0);
            // N9 shares N3's interface in the demo.
            [p("n3") + p("n9"), p("n6")]
        };
        Self {
            rx_packets: port("rx_packets"),
            rx_bytes: port("rx_bytes"),
            tx_packets: port("tx_packets"),
            tx_bytes: port("tx_bytes"),
            dropped: v["dropped"].as_u64().unwrap_or(0),
        }
    }

    pub(super) fn since(&self, e: &Self) -> Self {
        let d = |a: [u64; 2], b: [u64; 2]| [a[0].saturating_sub(b[0]), a[1].saturating_sub(b[1])];
        Self {
            rx_packets: d(self.rx_packets, e.rx_packets),
            rx_bytes: d(self.rx_bytes, e.rx_bytes),
            tx_packets: d(self.tx_packets, e.tx_packets),
            tx_bytes: d(self.tx_bytes, e.tx_bytes),
            dropped: self.dropped.saturating_sub(e.dropped),
        }
    }
}

/// GET `path` from the UPF's admin endpoint, from inside its namespace.
pub(super) fn upf_api(path: &str) -> anyhow::Result<Value> {
    let addr: SocketAddr = ADMIN.parse().context(ADMIN)?;
    let body = in_netns(UPF_NS, || admin::get(addr, path))??;
    serde_json::from_str(&body).with_context(|| path.to_string())
}

pub(super) fn upf_counters() -> Option<UpfCounters> {
    upf_api("/api/counters")
        .ok()
        .map(|v| UpfCounters::parse(&v))
}

pub(super) fn upf_drops() -> Vec<(String, u64)> {
    match upf_api("/api/drops") {
        Ok(Value::Object(m)) => m
            .into_iter()
            .filter_map(|(k, v)| v.as_u64().map(|n| (k, n)))
            .collect(),
        _ => Vec::new(),
    }
}

/// Packets the UPF's interface queues could not take or send, summed over its workers:
/// (received but discarded, not IP or too big; handed over but not sent, no neighbour or
/// ring full).
pub(super) fn upf_io_drops() -> Option<(u64, u64)> {
    let v = upf_api("/api/workers").ok()?;
    let mut t = (0, 0);
    for q in v
        .as_array()?
        .iter()
        .flat_map(|w| w["queues"].as_array().into_iter().flatten())
    {
        t.0 += q["rx_discarded"].as_u64().unwrap_or(0);
        t.1 += q["tx_dropped"].as_u64().unwrap_or(0);
    }
    Some(t)
}
