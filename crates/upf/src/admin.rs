//! The admin HTTP endpoint: `/metrics` for Prometheus and `/api/…` (JSON) for `upf show`.
//! Connections are read by their own tasks; the answer is computed by the main loop, which
//! owns the agent, so no state is shared or locked.

use crate::metrics::{self, ControlView};
use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Semaphore};
use upf_dataplane::{DropReason, Port};
use upf_n4::Agent;
use upf_rules::{Datapath, Seid};
use upf_runtime::{WorkerStats, Workers};

/// A request the main loop answers: its path, and where the answer goes.
#[derive(Debug)]
pub struct Request {
    pub path: String,
    pub reply: oneshot::Sender<Response>,
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    fn json(v: &Value) -> Self {
        Self {
            status: 200,
            content_type: "application/json",
            body: format!("{v:#}\n"),
        }
    }

    fn not_found(what: &str) -> Self {
        Self {
            status: 404,
            content_type: "text/plain",
            body: format!("{what}\n"),
        }
    }
}

/// Accepts connections and forwards each request to the main loop. At most `max` connections
/// are served at once (each holds a task and a 4 KiB buffer for up to 5 s); one more is
/// answered 503 if its socket takes it at once, closed, and counted in `refused`.
pub async fn serve(
    listener: TcpListener,
    to_main: mpsc::Sender<Request>,
    max: usize,
    refused: Arc<AtomicU64>,
) {
    let slots = Arc::new(Semaphore::new(max));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused.fetch_add(1, Ordering::Relaxed);
            let _ = stream.try_write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            continue;
        };
        let to_main = to_main.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), connection(stream, to_main)).await;
            drop(slot);
        });
    }
}

async fn connection(mut s: TcpStream, to_main: mpsc::Sender<Request>) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    // The request line and headers; a body is never needed.
    while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n")
        && !buf[..n].windows(2).any(|w| w == b"\n\n")
    {
        if n == buf.len() {
            return Ok(());
        }
        let k = s.read(&mut buf[n..]).await?;
        if k == 0 {
            break;
        }
        n += k;
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let mut parts = head.lines().next().unwrap_or_default().split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or("/"),
    );
    let resp = if method != "GET" {
        Response {
            status: 405,
            content_type: "text/plain",
            body: "only GET\n".into(),
        }
    } else {
        let (tx, rx) = oneshot::channel();
        if to_main
            .send(Request {
                path: path.to_string(),
                reply: tx,
            })
            .await
            .is_err()
        {
            return Ok(());
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => return Ok(()),
        }
    };
    let reason = match resp.status {
        200 => "OK",
        404 => "Not Found",
        _ => "Method Not Allowed",
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        resp.status,
        resp.content_type,
        resp.body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(resp.body.as_bytes()).await?;
    s.shutdown().await
}

/// What the main loop knows, to answer with.
#[allow(missing_debug_implementations)] // borrows the agent, which has no Debug
pub struct State<'a> {
    pub agent: &'a Agent<Workers>,
    pub uptime_s: u64,
    /// Admin connections refused (`admin.max_connections` being served).
    pub admin_refused: u64,
}

pub fn answer(path: &str, st: &State<'_>) -> Response {
    let path = path.split('?').next().unwrap_or(path);
    let workers = || st.agent.datapath().stats();
    match path.trim_end_matches('/') {
        "/metrics" => Response {
            status: 200,
            content_type: "text/plain; version=0.0.4",
            body: metrics::render(&workers(), &control(st)),
        },
        "/api/sessions" => Response::json(&sessions(st.agent)),
        "/api/associations" => Response::json(&Value::Array(
            st.agent
                .associations()
                .map(|(node, addr)| json!({"node_id": node.to_string(), "address": addr.to_string()}))
                .collect(),
        )),
        "/api/workers" => Response::json(&Value::Array(workers().iter().enumerate().map(|(i, w)| worker(i, w)).collect())),
        "/api/drops" => Response::json(&drops(&workers())),
        "/api/counters" => Response::json(&counters(&workers(), &control(st))),
        p => match p.strip_prefix("/api/session/").map(parse_seid) {
            Some(Some(seid)) => match st.agent.session(Seid(seid)) {
                Some(s) => Response::json(&serde_json::to_value(s).unwrap_or(Value::Null)),
                None => Response::not_found(&format!("no session with SEID {seid:#x}")),
            },
            Some(None) => Response::not_found("SEID: decimal or 0x-hex"),
            None => Response::not_found(
                "endpoints: /metrics /api/sessions /api/session/SEID /api/associations /api/workers /api/drops /api/counters",
            ),
        },
    }
}

fn parse_seid(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn control(st: &State<'_>) -> ControlView {
    ControlView {
        sessions: st.agent.session_count(),
        associations: st.agent.association_count(),
        pfcp: st.agent.stats.clone(),
        response_cache: st.agent.response_cache(),
        admin_refused: st.admin_refused,
        uptime_s: st.uptime_s,
    }
}

fn sessions<D: Datapath>(agent: &Agent<D>) -> Value {
    let mut v: Vec<Value> = agent
        .sessions()
        .map(|s| {
            let ues: Vec<String> = s
                .pdrs
                .iter()
                .filter_map(|p| p.pdi.ue_ip)
                .flat_map(|u| {
                    u.ipv4
                        .map(|a| a.to_string())
                        .into_iter()
                        .chain(u.ipv6.map(|(a, l)| format!("{a}/{l}")))
                })
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let teids: Vec<String> = s
                .pdrs
                .iter()
                .filter_map(|p| p.pdi.local_f_teid)
                .map(|t| format!("{:#x}", t.teid.0))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            json!({
                "seid": format!("{:#x}", s.seid.0),
                "cp_seid": format!("{:#x}", s.cp_seid.0),
                "cp_address": s.cp_addr.to_string(),
                "dnn": s.dnn.as_deref(),
                "ue_addresses": ues,
                "teids": teids,
                "pdrs": s.pdrs.len(), "fars": s.fars.len(), "qers": s.qers.len(), "urrs": s.urrs.len(),
            })
        })
        .collect();
    v.sort_by(|a, b| a["seid"].as_str().cmp(&b["seid"].as_str()));
    Value::Array(v)
}

fn ports(f: impl Fn(usize) -> u64) -> Value {
    Port::ALL
        .iter()
        .map(|p| (p.name().to_string(), json!(f(p.index()))))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn worker(i: usize, w: &WorkerStats) -> Value {
    json!({
        "worker": i,
        "sessions": w.sessions,
        "rx_packets": ports(|p| w.counters.rx_packets[p]),
        "tx_packets": ports(|p| w.counters.tx_packets[p]),
        "dropped": w.counters.dropped_total(),
        "buffered": w.counters.buffered,
        "handed_off": w.handed_off,
        "hand_off_dropped": w.hand_off_dropped,
        "batches": w.batch.batches,
        "mean_batch": if w.batch.batches == 0 { 0.0 } else { w.batch.packets as f64 / w.batch.batches as f64 },
        "mean_batch_us": if w.batch.batches == 0 { 0.0 } else { w.batch.time_ns_sum as f64 / w.batch.batches as f64 / 1e3 },
        "queues": w.io.iter().map(|(port, what, s)| json!({
            "port": port.name(), "queue": what,
            "rx_packets": s.rx_packets, "tx_packets": s.tx_packets,
            "rx_discarded": s.rx_discarded, "rx_kernel_dropped": s.rx_kernel_dropped, "tx_dropped": s.tx_dropped,
        })).collect::<Vec<_>>(),
    })
}

fn drops(ws: &[WorkerStats]) -> Value {
    DropReason::ALL
        .iter()
        .map(|&r| {
            (
                r.name().to_string(),
                json!(ws.iter().map(|w| w.counters.dropped(r)).sum::<u64>()),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn counters(ws: &[WorkerStats], c: &ControlView) -> Value {
    let mut t = upf_dataplane::Counters::default();
    for w in ws {
        t.add(&w.counters);
    }
    json!({
        "uptime_s": c.uptime_s,
        "sessions": c.sessions,
        "associations": c.associations,
        "rx_packets": ports(|p| t.rx_packets[p]),
        "rx_bytes": ports(|p| t.rx_bytes[p]),
        "tx_packets": ports(|p| t.tx_packets[p]),
        "tx_bytes": ports(|p| t.tx_bytes[p]),
        "dropped": t.dropped_total(),
        "created": t.created,
        "buffered": t.buffered,
        "balanced": t.balanced(),
        "pfcp_messages_received": c.pfcp.received.iter().sum::<u64>(),
        "pfcp_dropped": c.pfcp.dropped,
    })
}

/// `upf show WHAT` against a running UPF's admin address.
pub fn show(admin: SocketAddr, path: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&admin, Duration::from_secs(2)).with_context(
        || {
            format!(
                "admin endpoint {admin} (is `upf run` running, with admin.address = \"{admin}\"?)"
            )
        },
    )?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    )?;
    let mut r = String::new();
    s.read_to_string(&mut r)?;
    let (head, body) = r
        .split_once("\r\n\r\n")
        .context("admin endpoint: malformed answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("{}", body.trim());
    }
    Ok(body.to_string())
}
