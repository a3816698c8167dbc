//! The demo's traffic: a gNB that sends uplink G-PDUs straight onto N3 (every UE in turn, an
//! IMIX of 64/576/1400-octet inner packets, paced to a rate) and decapsulates what comes back,
//! and a reflector in the data network that echoes every UDP datagram to its source, so each
//! packet crosses the UPF twice and its round trip is timed from a stamp in its payload.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use upf_loadgen::gnb::{classify_downlink, encap_uplink, Received, SessionTable, HEADROOM};
use upf_wire::{gtpu_msg, ip_proto, ipv4, udp};

/// The UDP port the reflector listens on in the data network.
pub const REFLECTOR_PORT: u16 = 7777;
/// The UEs' UDP source port.
const UE_PORT: u16 = 40_000;
/// Inner packet sizes (IPv4 total length) and how often each is sent: 7:4:1, the simple IMIX.
const SIZES: [usize; 12] = [64, 576, 64, 64, 576, 64, 1400, 64, 576, 64, 576, 64];
const MAGIC: [u8; 4] = *b"UPFd";
/// What follows the UDP header: magic, session index, sequence number, send time (ns).
const STAMP_LEN: usize = 4 + 4 + 8 + 8;
/// Socket buffers of the demo's sockets: a few tens of milliseconds at the default rate.
const SOCKET_BUFFER: usize = 4 << 20;
/// How long the threads sleep in a receive before looking at their stop flag.
const POLL: Duration = Duration::from_millis(100);

/// Counters of the demo's traffic, updated by its threads.
#[derive(Debug, Default)]
pub struct Stats {
    /// Uplink G-PDUs the gNB sent, and their inner octets.
    pub ul_sent: AtomicU64,
    pub ul_sent_bytes: AtomicU64,
    pub send_errors: AtomicU64,
    /// Datagrams the reflector received (uplink delivered to the DN) and echoed.
    pub dn_received: AtomicU64,
    pub dn_echoed: AtomicU64,
    /// Downlink G-PDUs the gNB received for a UE with a demo stamp, and their inner octets.
    pub dl_received: AtomicU64,
    pub dl_received_bytes: AtomicU64,
    /// Anything else the gNB received (unknown TEID, other UE, no stamp, not GTP-U).
    pub dl_other: AtomicU64,
    pub rtt: Histogram,
}

/// The round-trip times (ns): an HDR histogram (3 significant digits, 1 ns to 60 s), written
/// by the gNB's receiving thread and copied once a second by the progress table.
#[derive(Debug)]
pub struct Histogram(Mutex<hdrhistogram::Histogram<u64>>);

/// The longest round trip told apart from the others; longer ones count as this.
const RTT_MAX_NS: u64 = 60_000_000_000;

impl Default for Histogram {
    fn default() -> Self {
        Self(Mutex::new(
            hdrhistogram::Histogram::new_with_bounds(1, RTT_MAX_NS, 3)
                .unwrap_or_else(|_| unreachable!("valid bounds")),
        ))
    }
}

impl Histogram {
    fn get(&self) -> std::sync::MutexGuard<'_, hdrhistogram::Histogram<u64>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn record(&self, ns: u64) {
        self.get().saturating_record(ns);
    }

    pub fn snapshot(&self) -> Counts {
        Counts(Some(self.get().clone()))
    }

    /// The longest round trip (to the histogram's precision).
    pub fn max(&self) -> u64 {
        self.get().max()
    }
}

/// The round trips at one moment (or between two).
#[derive(Debug, Clone, Default)]
pub struct Counts(Option<hdrhistogram::Histogram<u64>>);

impl Counts {
    pub fn since(&self, earlier: &Counts) -> Counts {
        let mut d = self.0.clone();
        if let (Some(d), Some(e)) = (d.as_mut(), &earlier.0) {
            // An earlier snapshot of the same histogram: never more in any bucket.
            let _ = d.subtract(e);
        }
        Counts(d)
    }

    pub fn total(&self) -> u64 {
        self.0.as_ref().map_or(0, hdrhistogram::Histogram::len)
    }

    /// The value (ns) below which a fraction `q` of the samples lie; None without samples.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let h = self.0.as_ref().filter(|h| !h.is_empty())?;
        Some(h.value_at_quantile(q))
    }
}

/// One UE as the traffic threads see it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub table: SessionTable,
    /// The UPF's N3 address (GTP-U port).
    pub upf_n3: SocketAddr,
    /// Where the UEs send to: the reflector.
    pub dn: SocketAddrV4,
    /// Packets per second over all UEs.
    pub rate: u64,
}

/// The running traffic threads. [`Traffic::stop_sending`] stops the generator only (the
/// packets in flight still come back); [`Traffic::stop`] stops everything.
#[derive(Debug)]
pub struct Traffic {
    pub stats: Arc<Stats>,
    send_stop: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    sender: Option<JoinHandle<()>>,
    others: Vec<JoinHandle<()>>,
}

fn socket(bind: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    // Best effort: capped by net.core.{r,w}mem_max.
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    s.bind(&bind.into())
        .map_err(|e| std::io::Error::new(e.kind(), format!("bind {bind}: {e}")))?;
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(POLL))?;
    Ok(s)
}

/// The gNB's N3 socket (to be made inside the UE namespace).
pub fn gnb_socket(local: Ipv4Addr) -> std::io::Result<UdpSocket> {
    socket(SocketAddr::from((local, upf_loadgen::gnb::GTPU_PORT)))
}

/// The reflector's socket (to be made inside the DN namespace).
pub fn reflector_socket() -> std::io::Result<UdpSocket> {
    socket(SocketAddr::from((Ipv4Addr::UNSPECIFIED, REFLECTOR_PORT)))
}

impl Traffic {
    /// Starts the reflector on `dn_sock`, the gNB receiver and the generator on `gnb_sock`.
    pub fn start(plan: Plan, gnb_sock: UdpSocket, dn_sock: UdpSocket) -> std::io::Result<Self> {
        let stats = Arc::new(Stats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let send_stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let plan = Arc::new(plan);
        let mut others = Vec::new();
        {
            let (stats, stop) = (stats.clone(), stop.clone());
            others.push(
                std::thread::Builder::new()
                    .name("demo-reflector".into())
                    .spawn(move || reflect(&dn_sock, &stats, &stop))?,
            );
        }
        let tx = gnb_sock.try_clone()?;
        {
            let (stats, stop, plan) = (stats.clone(), stop.clone(), plan.clone());
            others.push(
                std::thread::Builder::new()
                    .name("demo-gnb-rx".into())
                    .spawn(move || receive(&gnb_sock, &plan, &stats, &stop, epoch))?,
            );
        }
        let sender = {
            let (stats, stop) = (stats.clone(), send_stop.clone());
            std::thread::Builder::new()
                .name("demo-gnb-tx".into())
                .spawn(move || generate(&tx, &plan, &stats, &stop, epoch))?
        };
        Ok(Self {
            stats,
            send_stop,
            stop,
            sender: Some(sender),
            others,
        })
    }

    pub fn stop_sending(&mut self) {
        self.send_stop.store(true, Relaxed);
        if let Some(t) = self.sender.take() {
            let _ = t.join();
        }
    }

    pub fn stop(&mut self) {
        self.stop_sending();
        self.stop.store(true, Relaxed);
        for t in self.others.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop();
    }
}

#[allow(clippy::cast_possible_truncation)] // nanoseconds since the start fit u64 for 584 years
fn nanos_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

/// Writes the inner IPv4/UDP packet of `size` octets from `ue` to `dn` at `buf[HEADROOM..]`.
fn inner_packet(
    buf: &mut [u8],
    size: usize,
    ue: Ipv4Addr,
    dn: SocketAddrV4,
    index: u32,
    seq: u64,
    now: u64,
) -> Result<(), upf_wire::Error> {
    let p = &mut buf[HEADROOM..HEADROOM + size];
    let udp_len = size - ipv4::HEADER_LEN;
    ipv4::Repr {
        src: ue,
        dst: *dn.ip(),
        protocol: ip_proto::UDP,
        payload_len: udp_len,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: u16::try_from(seq & 0xffff).unwrap_or(0),
        dont_frag: true,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut p[..]))?;
    let u = &mut p[ipv4::HEADER_LEN..];
    u[0..2].copy_from_slice(&UE_PORT.to_be_bytes());
    u[2..4].copy_from_slice(&dn.port().to_be_bytes());
    u[4..6].copy_from_slice(
        &u16::try_from(udp_len)
            .map_err(|_| upf_wire::Error::BufferTooSmall)?
            .to_be_bytes(),
    );
    let s = &mut u[udp::HEADER_LEN..];
    s[0..4].copy_from_slice(&MAGIC);
    s[4..8].copy_from_slice(&index.to_be_bytes());
    s[8..16].copy_from_slice(&seq.to_be_bytes());
    s[16..24].copy_from_slice(&now.to_be_bytes());
    udp::Packet::new_unchecked(&mut u[..]).fill_checksum_v4(ue, *dn.ip());
    Ok(())
}

/// Sends `plan.rate` G-PDUs a second, round robin over the UEs, until `stop`.
fn generate(sock: &UdpSocket, plan: &Plan, st: &Stats, stop: &AtomicBool, epoch: Instant) {
    let sessions = plan.table.sessions();
    if sessions.is_empty() || plan.rate == 0 {
        return;
    }
    let mut buf = vec![0u8; HEADROOM + 1500];
    let rate = plan.rate as f64;
    // At most 100 ms of backlog is caught up after a stall; the rest is skipped.
    let max_backlog = (plan.rate / 10).max(64);
    let start = Instant::now();
    let mut scheduled = 0u64; // packets due so far, less the skipped ones
    let mut skipped = 0u64;
    let mut seq = 0u64;
    while !stop.load(Relaxed) {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let due = ((start.elapsed().as_secs_f64() * rate) as u64).saturating_sub(skipped);
        if due <= scheduled {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        if due - scheduled > max_backlog {
            skipped += due - scheduled - max_backlog;
        }
        let burst = (due - scheduled).min(64);
        for _ in 0..burst {
            let n = usize::try_from(seq % sessions.len() as u64).unwrap_or(0);
            let s = &sessions[n];
            let size = SIZES[usize::try_from(seq % SIZES.len() as u64).unwrap_or(0)];
            let index = u32::try_from(n).unwrap_or(u32::MAX);
            let now = nanos_since(epoch);
            let sent = inner_packet(&mut buf, size, s.ue, plan.dn, index, seq, now)
                .and_then(|()| encap_uplink(&mut buf, HEADROOM, size, s))
                .map_err(|e| std::io::Error::other(e.to_string()))
                .and_then(|at| sock.send_to(&buf[at..HEADROOM + size], plan.upf_n3));
            match sent {
                Ok(_) => {
                    st.ul_sent.fetch_add(1, Relaxed);
                    st.ul_sent_bytes.fetch_add(size as u64, Relaxed);
                }
                Err(_) => {
                    st.send_errors.fetch_add(1, Relaxed);
                }
            }
            seq += 1;
            scheduled += 1;
        }
    }
}

fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// The data network: every datagram goes back where it came from.
fn reflect(sock: &UdpSocket, st: &Stats, stop: &AtomicBool) {
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Relaxed) {
        match sock.recv_from(&mut buf) {
            Ok((n, peer)) => {
                st.dn_received.fetch_add(1, Relaxed);
                if sock.send_to(&buf[..n], peer).is_ok() {
                    st.dn_echoed.fetch_add(1, Relaxed);
                }
            }
            Err(e) if transient(&e) => {}
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// The gNB's downlink: decapsulate, check the stamp, time the round trip.
fn receive(sock: &UdpSocket, plan: &Plan, st: &Stats, stop: &AtomicBool, epoch: Instant) {
    let mut buf = vec![0u8; 65_536];
    let mut out = [0u8; 32];
    while !stop.load(Relaxed) {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if transient(&e) => continue,
            Err(_) => {
                // ICMP errors of earlier sends surface here.
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        };
        let now = nanos_since(epoch);
        match classify_downlink(&plan.table, &buf[..n]) {
            Ok(Received::ToUe { inner, .. }) => match stamp(inner) {
                Some(sent) => {
                    st.dl_received.fetch_add(1, Relaxed);
                    st.dl_received_bytes.fetch_add(inner.len() as u64, Relaxed);
                    st.rtt.record(now.saturating_sub(sent));
                }
                None => {
                    st.dl_other.fetch_add(1, Relaxed);
                }
            },
            Ok(Received::EchoRequest { seq }) => {
                if let Ok(len) = gtpu_msg::emit_echo_response(0, seq, &mut out) {
                    let _ = sock.send_to(&out[..len], peer);
                }
            }
            _ => {
                st.dl_other.fetch_add(1, Relaxed);
            }
        }
    }
}

/// The send time in a reflected demo packet (IPv4/UDP with the stamp).
fn stamp(inner: &[u8]) -> Option<u64> {
    let ip = ipv4::Packet::new_checked(inner).ok()?;
    if ip.protocol() != ip_proto::UDP {
        return None;
    }
    let u = udp::Packet::new_checked(ip.payload()).ok()?;
    let s = u.payload();
    if s.len() < STAMP_LEN || s[0..4] != MAGIC {
        return None;
    }
    Some(u64::from_be_bytes(s[16..24].try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let c = h.snapshot();
        assert_eq!(c.total(), 1000);
        let p50 = c.quantile(0.5).unwrap();
        assert!((499_500..=500_500).contains(&p50), "{p50}");
        let p99 = c.quantile(0.99).unwrap();
        assert!((989_000..=991_000).contains(&p99), "{p99}");
        assert!((1_000_000..=1_001_000).contains(&h.max()), "{}", h.max());
        assert_eq!(c.since(&c).quantile(0.5), None);
        // The last second's share: only what came after the earlier snapshot.
        h.record(7_000_000);
        let d = h.snapshot().since(&c);
        assert_eq!(d.total(), 1);
        assert!((6_990_000..=7_010_000).contains(&d.quantile(0.99).unwrap()));
        assert_eq!(Counts::default().quantile(0.5), None);
    }

    #[test]
    fn packets_carry_a_stamp_that_reads_back() {
        let mut buf = vec![0u8; HEADROOM + 1500];
        let ue = Ipv4Addr::new(10, 60, 0, 7);
        let dn = SocketAddrV4::new(Ipv4Addr::new(192, 168, 6, 2), REFLECTOR_PORT);
        for size in [64, 576, 1400] {
            inner_packet(&mut buf, size, ue, dn, 3, 99, 123_456).unwrap();
            let p = &buf[HEADROOM..HEADROOM + size];
            let ip = ipv4::Packet::new_checked(p).unwrap();
            assert!(ip.verify_checksum());
            assert_eq!(usize::from(ip.total_len()), size);
            let u = udp::Packet::new_checked(ip.payload()).unwrap();
            assert!(u.verify_checksum_v4(ue, *dn.ip()));
            assert_eq!(u.dst_port(), REFLECTOR_PORT);
            assert_eq!(stamp(p), Some(123_456));
        }
    }
}
