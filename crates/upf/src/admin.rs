//! The admin HTTP endpoint (axum on the daemon's tokio runtime): `/metrics` for Prometheus and
//! `/api/…` (JSON) for `upf show`. Connections are served by their own tasks; the answer is
//! computed by the main loop, which owns the agent, so no state is shared or locked.

use crate::datapath::Observed;
pub use crate::metrics::ClusterView;
use crate::metrics::{self, ControlView};
use crate::shards::ShardPath;
use anyhow::{bail, Context};
use axum::extract::{Path, State as Main};
use axum::http::Request as HttpRequest;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::{on, MethodFilter};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tower::ServiceExt;
use upf_dataplane::{DropReason, Port};
use upf_n4::Agent;
use upf_rules::{Datapath, Seid};
use upf_runtime::{EngineMode, EngineStatus, Engines, Runs, WorkerStats};

/// How long a client may take to send its request line and headers (slowloris).
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection is served at most, answer included.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request head read (hyper's smallest buffer bound); a body is never read.
const MAX_HEAD: usize = 8192;

/// What the main loop is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    Metrics,
    Sessions,
    Session(u64),
    Associations,
    Workers,
    Drops,
    Counters,
    /// Where the sessions run, and the swap under way or the last one.
    Engine,
    /// Move every session to this engine (answered by the main loop, which holds the data
    /// path mutably: [`set_engine`]).
    SetEngine(EngineMode),
    /// Set the workers' MAX_RBS (priority modes strict and load-aware).
    SetMaxRbs(usize),
}

/// A query the main loop answers, and where the answer goes.
#[derive(Debug)]
pub struct Request {
    pub query: Query,
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

    fn text(status: u16, what: &str) -> Self {
        Self {
            status,
            content_type: "text/plain",
            body: format!("{what}\n"),
        }
    }
}

impl IntoResponse for Response {
    fn into_response(self) -> axum::response::Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            status,
            [(header::CONTENT_TYPE, self.content_type)],
            self.body,
        )
            .into_response()
    }
}

const ENDPOINTS: &str = "endpoints: /metrics /api/sessions /api/session/SEID /api/associations /api/workers /api/drops /api/counters /api/engine (POST /api/engine/xdp|auto|user, POST /api/priority/max_rbs/N)";

/// The routes: each asks the main loop one [`Query`]. GET (and HEAD), 405 otherwise, but for
/// the one change, POST /api/engine/MODE; a trailing slash and a query string are ignored;
/// anything else is answered 404 with the list of endpoints.
fn router(to_main: mpsc::Sender<Request>) -> Router {
    let get = |q: Query| {
        on(
            MethodFilter::GET,
            move |Main(tx): Main<mpsc::Sender<Request>>| ask(tx, q),
        )
    };
    Router::new()
        .route("/metrics", get(Query::Metrics))
        .route("/api/sessions", get(Query::Sessions))
        .route("/api/associations", get(Query::Associations))
        .route("/api/workers", get(Query::Workers))
        .route("/api/drops", get(Query::Drops))
        .route("/api/counters", get(Query::Counters))
        .route("/api/engine", get(Query::Engine))
        .route(
            "/api/engine/{mode}",
            on(
                MethodFilter::POST,
                |Main(tx): Main<mpsc::Sender<Request>>, Path(mode): Path<String>| async move {
                    let mode = match mode.as_str() {
                        "xdp" => EngineMode::Xdp,
                        "auto" => EngineMode::Auto,
                        "user" => EngineMode::User,
                        _ => return Response::text(404, "engine: xdp, auto or user"),
                    };
                    ask(tx, Query::SetEngine(mode)).await
                },
            ),
        )
        .route(
            "/api/priority/max_rbs/{n}",
            on(
                MethodFilter::POST,
                |Main(tx): Main<mpsc::Sender<Request>>, Path(n): Path<String>| async move {
                    match n.parse::<usize>() {
                        Ok(n) if n > 0 => ask(tx, Query::SetMaxRbs(n)).await,
                        _ => Response::text(404, "MAX_RBS: a number of packets, at least 1"),
                    }
                },
            ),
        )
        .route(
            "/api/session/{seid}",
            on(
                MethodFilter::GET,
                |Main(tx): Main<mpsc::Sender<Request>>, Path(seid): Path<String>| async move {
                    match parse_seid(&seid) {
                        Some(seid) => ask(tx, Query::Session(seid)).await,
                        None => Response::text(404, "SEID: decimal or 0x-hex"),
                    }
                },
            ),
        )
        .method_not_allowed_fallback(|| async {
            Response::text(
                405,
                "only GET (POST: /api/engine/MODE, /api/priority/max_rbs/N)",
            )
        })
        .fallback(|method: Method| async move {
            if method == Method::GET {
                Response::text(404, ENDPOINTS)
            } else {
                Response::text(405, "only GET")
            }
        })
        .with_state(to_main)
}

async fn ask(to_main: mpsc::Sender<Request>, query: Query) -> Response {
    let (reply, answer) = oneshot::channel();
    if to_main.send(Request { query, reply }).await.is_err() {
        return Response::text(503, "stopping");
    }
    answer
        .await
        .unwrap_or_else(|_| Response::text(503, "stopping"))
}

/// `/metrics/` is `/metrics`: the path without its trailing slashes (the query kept).
fn trim_trailing_slash<B>(mut req: HttpRequest<B>) -> HttpRequest<B> {
    let path = req.uri().path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let pq = match req.uri().query() {
            Some(q) => format!("{trimmed}?{q}"),
            None => trimmed.to_string(),
        };
        if let Ok(uri) = pq.parse::<Uri>() {
            *req.uri_mut() = uri;
        }
    }
    req
}

/// Accepts connections and serves each on its own task (HTTP/1.1, one request per
/// connection). At most `max` connections are served at once (each for up to 5 s, its head
/// read within 5 s and at most 8 KiB); one more is answered 503 if its socket takes it at once,
/// closed, and counted in `refused`.
pub async fn serve(
    listener: TcpListener,
    to_main: mpsc::Sender<Request>,
    max: usize,
    refused: Arc<AtomicU64>,
) {
    let app = router(to_main).map_request(trim_trailing_slash);
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
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEAD)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
            drop(slot);
        });
    }
}

/// What the main loop knows, to answer with.
#[allow(missing_debug_implementations)] // borrows the agent, which has no Debug
pub struct State<'a> {
    /// The agent of each shard served, with the shard's name (one, unnamed, without
    /// `[cluster]`).
    pub agents: Vec<(&'a str, &'a Agent<ShardPath>)>,
    /// The data path every shard's agent drives.
    pub datapath: &'a Observed<Engines>,
    pub uptime_s: u64,
    /// Admin connections refused (`admin.max_connections` being served).
    pub admin_refused: u64,
    /// The store's writer, with `[state]`.
    pub state: Option<upf_state::WriterStats>,
    pub cluster: Option<ClusterView>,
    /// The usage checkpoints, with `[state] usage_checkpoint_ms` > 0.
    pub checkpoints: Option<crate::checkpoint::CheckpointStats>,
}

pub fn answer(query: Query, st: &State<'_>) -> Response {
    let engines = st.datapath.inner();
    let workers = || engines.workers().stats();
    match query {
        Query::Metrics => {
            let xdp = engines.xdp_stats().and_then(|r| match r {
                Ok(stats) => Some(metrics::XdpView {
                    sessions: engines.xdp_sessions(),
                    stats,
                }),
                Err(e) => {
                    tracing::warn!(target: "upf::xdp", "reading the XDP engine's counters: {e}");
                    None
                }
            });
            Response {
                status: 200,
                content_type: "text/plain; version=0.0.4",
                body: metrics::render(&workers(), &control(st), xdp.as_ref()),
            }
        }
        Query::Sessions => Response::json(&sessions(&st.agents, |s| engines.runs(s))),
        Query::Session(seid) => match st.agents.iter().find_map(|(_, a)| a.session(Seid(seid))) {
            Some(s) => Response::json(&serde_json::to_value(s).unwrap_or(Value::Null)),
            None => Response::text(404, &format!("no session with SEID {seid:#x}")),
        },
        Query::Associations => Response::json(&Value::Array(
            st.agents
                .iter()
                .flat_map(|&(shard, a)| {
                    a.associations().map(move |(node, addr)| {
                        with_shard(
                            shard,
                            json!({"node_id": node.to_string(), "address": addr.to_string()}),
                        )
                    })
                })
                .collect(),
        )),
        Query::Workers => Response::json(&Value::Array(
            workers()
                .iter()
                .enumerate()
                .map(|(i, w)| worker(i, w))
                .collect(),
        )),
        Query::Drops => Response::json(&drops(&workers())),
        Query::Counters => Response::json(&counters(&workers(), &control(st))),
        Query::Engine => Response::json(&engine_status(&engines.status())),
        // The main loop answers it (set_engine); here only if it did not.
        Query::SetEngine(_) => Response::text(500, "not answered by the main loop"),
        Query::SetMaxRbs(n) => match engines.workers().set_max_rbs(n) {
            Ok(()) => Response::json(&json!({ "max_rbs": n })),
            Err(why) => Response::text(409, why),
        },
    }
}

/// `POST /api/engine/MODE`: starts moving every session (the main loop moves them a few
/// at a time, answering PFCP in between); answers with the status.
pub fn set_engine(engines: &mut Engines, mode: EngineMode) -> Response {
    match engines.set_mode(std::time::Instant::now(), mode) {
        Ok(()) => Response::json(&engine_status(&engines.status())),
        Err(why) => Response::text(409, why),
    }
}

fn engine_status(s: &EngineStatus) -> Value {
    let name = |m: EngineMode| m.name();
    json!({
        "engine": s.mode.map_or("user", name),
        "xdp_loaded": s.mode.is_some(),
        "sessions_on_xdp": s.on_xdp,
        "sessions_on_user": s.on_user,
        "swap": s.swap.as_ref().map(|w| json!({
            "to": name(w.to),
            "sessions": w.sessions,
            "moved": w.moved,
            "done": w.took.is_some(),
            "took_ms": w.took.map(|d| d.as_secs_f64() * 1e3),
        })),
    })
}

fn parse_seid(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn control(st: &State<'_>) -> ControlView {
    ControlView {
        sessions: st.agents.iter().map(|(_, a)| a.session_count()).sum(),
        associations: st.agents.iter().map(|(_, a)| a.association_count()).sum(),
        pfcp: st.agents.iter().fold(Default::default(), |mut t, (_, a)| {
            t.add(&a.stats);
            t
        }),
        response_cache: st.agents.iter().fold(Default::default(), |mut t, (_, a)| {
            t.add(&a.response_cache());
            t
        }),
        datapath: st.datapath.counts(),
        admin_refused: st.admin_refused,
        uptime_s: st.uptime_s,
        state: st.state,
        cluster: st.cluster.clone(),
        checkpoints: st.checkpoints,
    }
}

/// `v` with `"shard": shard` when there is a shard's name (in a cluster).
fn with_shard(shard: &str, mut v: Value) -> Value {
    if let (false, Some(o)) = (shard.is_empty(), v.as_object_mut()) {
        o.insert("shard".into(), shard.into());
    }
    v
}

/// The sessions of every shard, each with the engine it runs on (`runs`).
fn sessions<D: Datapath>(agents: &[(&str, &Agent<D>)], runs: impl Fn(Seid) -> Runs) -> Value {
    let mut v: Vec<Value> = agents
        .iter()
        .flat_map(|&(shard, a)| a.sessions().map(move |s| (shard, s)))
        .map(|(shard, s)| {
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
            let r = runs(s.seid);
            let engine = r.to_string();
            let why = match r {
                Runs::User(why) => why,
                Runs::Xdp => None,
            };
            let v = json!({
                "seid": format!("{:#x}", s.seid.0),
                "cp_seid": format!("{:#x}", s.cp_seid.0),
                "cp_address": s.cp_addr.to_string(),
                "dnn": s.dnn.as_deref(),
                "ue_addresses": ues,
                "teids": teids,
                "pdrs": s.pdrs.len(), "fars": s.fars.len(), "qers": s.qers.len(), "urrs": s.urrs.len(),
                "engine": engine,
                "engine_why": why,
            });
            with_shard(shard, v)
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
        "utilisation_permille": w.utilisation_permille,
        "groups": w.groups.iter().enumerate().map(|(g, s)| json!({
            "group": g, "depth": s.depth, "bytes": s.bytes,
            "queued": s.stats.queued, "dropped": s.stats.dropped, "dropped_bytes": s.stats.dropped_bytes,
        })).collect::<Vec<_>>(),
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
        "gtpu_peers": t.gtpu_peers,
        "gtpu_peers_unreachable": t.gtpu_peers_unreachable,
        "echo_requests": t.echo_requests,
        "echo_responses": t.echo_responses,
        "pfcp_messages_received": c.pfcp.received.iter().sum::<u64>(),
        "pfcp_dropped": c.pfcp.dropped,
    })
}

/// The body of a running UPF's answer to GET `path` on its admin endpoint (`upf show`, the
/// demo); any status but 200 is an error that says what the endpoint answered.
pub fn get(admin: SocketAddr, path: &str) -> anyhow::Result<String> {
    request(admin, path, false)
}

/// `POST` to the admin endpoint (an empty body); the answer's body, or its text as an error.
pub fn post(admin: SocketAddr, path: &str) -> anyhow::Result<String> {
    request(admin, path, true)
}

fn request(admin: SocketAddr, path: &str, post: bool) -> anyhow::Result<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(2)))
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let url = format!("http://{admin}{path}");
    let answer = if post {
        agent.post(&url).send_empty()
    } else {
        agent.get(&url).call()
    };
    let mut answer = answer.with_context(|| {
        format!("admin endpoint {admin} (is `upf run` running, with admin.address = \"{admin}\"?)")
    })?;
    // /api/sessions of a million sessions is larger than ureq's 10 MB default.
    let body = answer
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_string()?;
    if answer.status() != StatusCode::OK {
        bail!("{}", body.trim());
    }
    Ok(body)
}
