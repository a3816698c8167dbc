//! The gNB/UE emulator: UEs are addresses on a TUN device (IFF_TUN | IFF_NO_PI), the gNB is a
//! UDP socket on port 2152. What the UE stack sends into the TUN (ping, iperf3, curl run in the
//! UE namespace) is looked up by source address, encapsulated in GTP-U with a PDU Session
//! Container (UL, the session's QFI) and sent to the UPF's N3 address with the session's
//! uplink TEID. GTP-U from the UPF is looked up by TEID, checked (the inner destination must be
//! that session's UE) and written to the TUN. Echo Requests are answered. Two threads (uplink,
//! downlink) sleep in poll/recv with a timeout, so an idle emulator costs nothing and a stop
//! flag ends them within one poll interval.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use upf_wire::ext::{Extensions, PduSessionContainer, PduType};
use upf_wire::gtpu::{self, MessageType};
use upf_wire::gtpu_msg::{self, Message};
use upf_wire::ipv4;

/// Headroom kept in front of a packet read from the TUN for the GTP-U header:
/// 12 octets + PDU Session Container (UL: 4 octets).
pub const HEADROOM: usize = 16;
/// GTP-U UDP port (TS 29.281 §4.4.2).
pub const GTPU_PORT: u16 = gtpu::PORT;

/// One UE's tunnel pair as the gNB sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UeSession {
    pub ue: Ipv4Addr,
    /// Uplink: TEID at the UPF and its N3 address (port 2152).
    pub ul_teid: u32,
    pub upf_n3: SocketAddr,
    /// Downlink: our TEID.
    pub dl_teid: u32,
    /// QFI put in the uplink PDU Session Container.
    pub qfi: u8,
    /// The high-priority QoS flow: an uplink packet with its DSCP gets its QFI instead.
    pub high: Option<crate::smf::HighPriority>,
}

impl From<&crate::smf::Session> for UeSession {
    fn from(s: &crate::smf::Session) -> Self {
        Self {
            ue: s.ue,
            ul_teid: s.ul_teid,
            upf_n3: SocketAddr::new(IpAddr::V4(s.upf_n3), GTPU_PORT),
            dl_teid: s.dl_teid,
            qfi: s.qfi,
            high: s.high,
        }
    }
}

/// Why [`SessionTable::new`] refused its sessions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionTableError {
    #[error("UE address {0} in two sessions")]
    DuplicateUe(Ipv4Addr),
    #[error("downlink TEID {0:#x} in two sessions")]
    DuplicateTeid(u32),
}

/// Sessions indexed by UE address (uplink) and downlink TEID.
#[derive(Debug, Clone, Default)]
pub struct SessionTable {
    sessions: Vec<UeSession>,
    by_ue: HashMap<Ipv4Addr, usize>,
    by_teid: HashMap<u32, usize>,
}

impl SessionTable {
    /// Fails if two sessions share a UE address or a downlink TEID.
    pub fn new(sessions: Vec<UeSession>) -> Result<Self, SessionTableError> {
        let mut by_ue = HashMap::with_capacity(sessions.len());
        let mut by_teid = HashMap::with_capacity(sessions.len());
        for (i, s) in sessions.iter().enumerate() {
            if by_ue.insert(s.ue, i).is_some() {
                return Err(SessionTableError::DuplicateUe(s.ue));
            }
            if by_teid.insert(s.dl_teid, i).is_some() {
                return Err(SessionTableError::DuplicateTeid(s.dl_teid));
            }
        }
        Ok(Self {
            sessions,
            by_ue,
            by_teid,
        })
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    pub fn sessions(&self) -> &[UeSession] {
        &self.sessions
    }

    pub fn by_ue(&self, ue: Ipv4Addr) -> Option<(usize, &UeSession)> {
        let i = *self.by_ue.get(&ue)?;
        Some((i, &self.sessions[i]))
    }

    pub fn by_teid(&self, teid: u32) -> Option<(usize, &UeSession)> {
        let i = *self.by_teid.get(&teid)?;
        Some((i, &self.sessions[i]))
    }
}

/// The GTP-U header of an uplink G-PDU of `len` octets for `s`, its QoS flow `qfi`.
fn ul_header(s: &UeSession, qfi: u8, len: usize) -> gtpu::Repr {
    gtpu::Repr {
        msg_type: MessageType::GPdu,
        teid: s.ul_teid,
        seq_number: None,
        npdu_number: None,
        ext: Extensions {
            psc: Some(PduSessionContainer::ul(qfi)),
            ..Extensions::default()
        },
        payload_len: len,
    }
}

/// Encapsulates `buf[start .. start + len]` (an inner packet) in place: the GTP-U header with
/// the uplink PDU Session Container is written into the headroom in front of it. Returns the
/// offset of the GTP-U message (the UDP payload to send).
pub fn encap_uplink(
    buf: &mut [u8],
    start: usize,
    len: usize,
    s: &UeSession,
) -> Result<usize, upf_wire::Error> {
    // The QoS flow by the inner packet's DSCP, as a UE's NAS QoS rules would map it.
    let dscp = (buf.get(start..start + len))
        .filter(|ip| ip.len() >= 20 && ip[0] >> 4 == 4)
        .map(|ip| ip[1] >> 2);
    let qfi = match s.high {
        Some(h) if dscp == Some(h.dscp) => h.qfi,
        _ => s.qfi,
    };
    let h = ul_header(s, qfi, len);
    let at = start
        .checked_sub(h.header_len())
        .ok_or(upf_wire::Error::NoHeadroom)?;
    if start.checked_add(len).is_none_or(|e| e > buf.len()) {
        return Err(upf_wire::Error::Truncated);
    }
    h.emit(&mut gtpu::Packet::new_unchecked(&mut buf[at..start]))?;
    Ok(at)
}

/// A GTP-U message received from the UPF, classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received<'a> {
    /// A G-PDU for a known session whose inner IPv4 destination is that session's UE.
    ToUe {
        index: usize,
        qfi: Option<u8>,
        inner: &'a [u8],
    },
    UnknownTeid(u32),
    /// Inner packet not IPv4, or not addressed to the session's UE.
    WrongUe {
        index: usize,
    },
    EchoRequest {
        seq: u16,
    },
    EchoResponse,
    ErrorIndication {
        teid: u32,
    },
    EndMarker {
        teid: u32,
    },
    Other,
}

/// Classifies a GTP-U message (the UDP payload) received on the gNB's N3 socket.
pub fn classify_downlink<'a>(
    table: &SessionTable,
    msg: &'a [u8],
) -> Result<Received<'a>, upf_wire::Error> {
    let (repr, m) = Message::parse(msg)?;
    Ok(match m {
        Message::GPdu { payload } => match table.by_teid(repr.teid) {
            None => Received::UnknownTeid(repr.teid),
            Some((index, s)) => {
                let to_ue = ipv4::Packet::new_checked(payload)
                    .is_ok_and(|p| p.version() == 4 && p.dst_addr() == s.ue);
                if to_ue {
                    Received::ToUe {
                        index,
                        qfi: repr
                            .ext
                            .psc
                            .filter(|p| p.pdu_type == PduType::Dl)
                            .map(|p| p.qfi),
                        inner: payload,
                    }
                } else {
                    Received::WrongUe { index }
                }
            }
        },
        Message::EchoRequest => Received::EchoRequest {
            seq: repr.seq_number.unwrap_or(0),
        },
        Message::EchoResponse { .. } => Received::EchoResponse,
        Message::ErrorIndication { teid_data_i, .. } => {
            Received::ErrorIndication { teid: teid_data_i }
        }
        Message::EndMarker => Received::EndMarker { teid: repr.teid },
        Message::SupportedExtHeadersNotification { .. } => Received::Other,
    })
}

/// The source address of an IPv4 packet read from the TUN (None: not IPv4, e.g. the
/// kernel's IPv6 router solicitations).
pub fn uplink_source(pkt: &[u8]) -> Option<Ipv4Addr> {
    ipv4::Packet::new_checked(pkt)
        .ok()
        .filter(|p| p.version() == 4)
        .map(|p| p.src_addr())
}

macro_rules! counters {
    ($($(#[$m:meta])* $f:ident,)*) => {
        /// Counters of the emulator, updated by its threads.
        #[derive(Debug, Default)]
        pub struct Counters { $($(#[$m])* pub $f: AtomicU64,)* }

        /// A copy of [`Counters`] at one moment.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct Snapshot { $($(#[$m])* pub $f: u64,)* }

        impl Counters {
            pub fn snapshot(&self) -> Snapshot {
                Snapshot { $($f: self.$f.load(Relaxed),)* }
            }
        }

        impl Snapshot {
            /// Field-wise difference (for rates).
            pub fn since(&self, earlier: &Snapshot) -> Snapshot {
                Snapshot { $($f: self.$f.wrapping_sub(earlier.$f),)* }
            }

            /// (name, value) of every counter.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($f), self.$f),)*]
            }
        }
    };
}

counters! {
    /// Uplink: packets read from the TUN and sent as G-PDUs, and their inner octets.
    ul_packets,
    ul_bytes,
    /// Uplink: TUN packets that were not IPv4 (IPv6 neighbour discovery and the like).
    ul_not_ipv4,
    /// Uplink: IPv4 from a source address that is no session's UE.
    ul_no_session,
    /// Downlink: G-PDUs decapsulated and written to the TUN, and their inner octets.
    dl_packets,
    dl_bytes,
    /// Downlink G-PDUs with a TEID of no session.
    dl_unknown_teid,
    /// Downlink G-PDUs whose inner packet is not IPv4 to the session's UE.
    dl_wrong_ue,
    /// Downlink G-PDUs without a DL PDU Session Container (delivered all the same).
    dl_no_psc,
    /// Datagrams on the N3 socket that are not GTP-U we understand.
    dl_malformed,
    echo_requests,
    echo_responses,
    error_indications,
    end_markers,
    /// Read/write errors on the TUN, send/receive errors on the socket.
    tun_errors,
    udp_errors,
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "UL {} pkts {} B | DL {} pkts {} B",
            self.ul_packets, self.ul_bytes, self.dl_packets, self.dl_bytes
        )?;
        for (name, v) in self.fields().into_iter().skip(4) {
            if v != 0 && name != "dl_packets" && name != "dl_bytes" {
                write!(f, " | {name} {v}")?;
            }
        }
        Ok(())
    }
}

/// Per-session packet counts.
#[derive(Debug, Default)]
pub struct SessionCounters {
    pub ul_packets: AtomicU64,
    pub dl_packets: AtomicU64,
}

/// Options of a running emulator.
#[derive(Debug, Clone)]
pub struct GnbConfig {
    /// TUN device name (created if it does not exist, attached if it does).
    pub tun: String,
    /// The gNB's N3 address (port 2152 normally).
    pub local: SocketAddr,
    /// How long a thread sleeps in poll/recv before looking at the stop flag.
    pub poll_interval: Duration,
}

impl GnbConfig {
    pub fn new(tun: &str, local: SocketAddr) -> Self {
        Self {
            tun: tun.into(),
            local,
            poll_interval: Duration::from_millis(100),
        }
    }
}

struct Shared {
    table: SessionTable,
    counters: Counters,
    per_session: Vec<SessionCounters>,
    stop: AtomicBool,
}

/// A running emulator; stops (and joins its threads) on [`Gnb::stop`] or drop.
pub struct Gnb {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    tun_name: String,
    local: SocketAddr,
}

impl fmt::Debug for Gnb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gnb")
            .field("tun", &self.tun_name)
            .field("local", &self.local)
            .field("sessions", &self.shared.table.len())
            .finish()
    }
}

/// Opens (creating if needed) the TUN device `name` in the calling thread's network namespace,
/// non-blocking, single-queue ([`upf_io::tun::open`]); returns the file and the device's name.
pub fn open_tun(name: &str) -> io::Result<(File, String)> {
    let file = upf_io::tun::open(name, upf_io::tun::Queues::One)?;
    Ok((file, name.to_string()))
}

impl Gnb {
    /// Creates the TUN and binds the N3 socket in the calling thread's network namespace (call
    /// it inside [`upf_netns::in_netns`] for another one), then starts the threads.
    pub fn start(cfg: &GnbConfig, table: SessionTable) -> io::Result<Self> {
        let (tun, name) = open_tun(&cfg.tun)?;
        let sock = UdpSocket::bind(cfg.local)
            .map_err(|e| io::Error::new(e.kind(), format!("bind {}: {e}", cfg.local)))?;
        Self::with_io(tun, name, sock, table, cfg.poll_interval)
    }

    /// Starts the threads on an open TUN (from [`open_tun`]) and a bound UDP socket.
    pub fn with_io(
        tun: File,
        tun_name: String,
        sock: UdpSocket,
        table: SessionTable,
        poll_interval: Duration,
    ) -> io::Result<Self> {
        let local = sock.local_addr()?;
        let per_session = (0..table.len())
            .map(|_| SessionCounters::default())
            .collect();
        let shared = Arc::new(Shared {
            table,
            counters: Counters::default(),
            per_session,
            stop: AtomicBool::new(false),
        });
        sock.set_read_timeout(Some(poll_interval))?;
        let tun_w = tun.try_clone()?;
        let sock_w = sock.try_clone()?;
        let s1 = shared.clone();
        let ul = std::thread::Builder::new()
            .name("gnb-uplink".into())
            .spawn(move || uplink(&s1, tun, &sock_w, poll_interval))?;
        let s2 = shared.clone();
        let dl = std::thread::Builder::new()
            .name("gnb-downlink".into())
            .spawn(move || downlink(&s2, tun_w, &sock))?;
        Ok(Self {
            shared,
            threads: vec![ul, dl],
            tun_name,
            local,
        })
    }

    pub fn tun_name(&self) -> &str {
        &self.tun_name
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn table(&self) -> &SessionTable {
        &self.shared.table
    }

    pub fn counters(&self) -> Snapshot {
        self.shared.counters.snapshot()
    }

    /// (uplink, downlink) packets of session `i` of the table.
    pub fn session_counters(&self, i: usize) -> Option<(u64, u64)> {
        self.shared
            .per_session
            .get(i)
            .map(|c| (c.ul_packets.load(Relaxed), c.dl_packets.load(Relaxed)))
    }

    /// Stops the threads and waits for them; returns the final counters.
    pub fn stop(mut self) -> Snapshot {
        self.halt();
        self.counters()
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Gnb {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Packets taken from the TUN per wake-up before looking at the stop flag again.
const BURST: usize = 256;

fn uplink(sh: &Shared, mut tun: File, sock: &UdpSocket, poll: Duration) {
    let c = &sh.counters;
    let mut buf = vec![0u8; HEADROOM + 65_536];
    while !sh.stop.load(Relaxed) {
        match upf_io::wait_readable(&[tun.as_fd()], poll) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => {
                c.tun_errors.fetch_add(1, Relaxed);
                std::thread::sleep(poll);
                continue;
            }
        }
        for _ in 0..BURST {
            let n = match tun.read(&mut buf[HEADROOM..]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    c.tun_errors.fetch_add(1, Relaxed);
                    break;
                }
            };
            let pkt = &buf[HEADROOM..HEADROOM + n];
            let Some(src) = uplink_source(pkt) else {
                c.ul_not_ipv4.fetch_add(1, Relaxed);
                continue;
            };
            let Some((i, s)) = sh.table.by_ue(src) else {
                c.ul_no_session.fetch_add(1, Relaxed);
                continue;
            };
            let s = *s;
            let Ok(at) = encap_uplink(&mut buf, HEADROOM, n, &s) else {
                c.udp_errors.fetch_add(1, Relaxed);
                continue;
            };
            match sock.send_to(&buf[at..HEADROOM + n], s.upf_n3) {
                Ok(_) => {
                    c.ul_packets.fetch_add(1, Relaxed);
                    c.ul_bytes.fetch_add(n as u64, Relaxed);
                    sh.per_session[i].ul_packets.fetch_add(1, Relaxed);
                }
                Err(_) => {
                    c.udp_errors.fetch_add(1, Relaxed);
                }
            }
        }
    }
}

fn downlink(sh: &Shared, mut tun: File, sock: &UdpSocket) {
    let c = &sh.counters;
    let mut buf = vec![0u8; 65_536];
    let mut out = [0u8; 32];
    while !sh.stop.load(Relaxed) {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(_) => {
                // ICMP errors of earlier sends surface here; count and go on.
                c.udp_errors.fetch_add(1, Relaxed);
                continue;
            }
        };
        match classify_downlink(&sh.table, &buf[..n]) {
            Ok(Received::ToUe { index, qfi, inner }) => {
                if qfi.is_none() {
                    c.dl_no_psc.fetch_add(1, Relaxed);
                }
                // A TUN write takes one whole packet or fails.
                match tun.write(inner) {
                    Ok(w) if w == inner.len() => {
                        c.dl_packets.fetch_add(1, Relaxed);
                        c.dl_bytes.fetch_add(inner.len() as u64, Relaxed);
                        sh.per_session[index].dl_packets.fetch_add(1, Relaxed);
                    }
                    _ => {
                        c.tun_errors.fetch_add(1, Relaxed);
                    }
                }
            }
            Ok(Received::UnknownTeid(_)) => {
                c.dl_unknown_teid.fetch_add(1, Relaxed);
            }
            Ok(Received::WrongUe { .. }) => {
                c.dl_wrong_ue.fetch_add(1, Relaxed);
            }
            Ok(Received::EchoRequest { seq }) => {
                c.echo_requests.fetch_add(1, Relaxed);
                let sent = gtpu_msg::emit_echo_response(0, seq, &mut out)
                    .ok()
                    .map(|len| sock.send_to(&out[..len], peer));
                if !matches!(sent, Some(Ok(_))) {
                    c.udp_errors.fetch_add(1, Relaxed);
                }
            }
            Ok(Received::EchoResponse) => {
                c.echo_responses.fetch_add(1, Relaxed);
            }
            Ok(Received::ErrorIndication { .. }) => {
                c.error_indications.fetch_add(1, Relaxed);
            }
            Ok(Received::EndMarker { .. }) => {
                c.end_markers.fetch_add(1, Relaxed);
            }
            Ok(Received::Other) | Err(_) => {
                c.dl_malformed.fetch_add(1, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sess(ue: [u8; 4], ul: u32, dl: u32) -> UeSession {
        UeSession {
            ue: Ipv4Addr::from(ue),
            ul_teid: ul,
            upf_n3: "192.168.3.1:2152".parse().unwrap(),
            dl_teid: dl,
            qfi: 9,
            high: None,
        }
    }

    /// IPv4/UDP from `src` to `dst` with payload "ping".
    fn ip_udp(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
        let mut p = vec![0u8; 32];
        let repr = ipv4::Repr {
            src,
            dst,
            protocol: upf_wire::ip_proto::UDP,
            payload_len: 12,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 1,
            dont_frag: true,
        };
        repr.emit(&mut ipv4::Packet::new_unchecked(&mut p[..]))
            .unwrap();
        p[20..28].copy_from_slice(&[0x0f, 0xa0, 0x13, 0x89, 0, 12, 0, 0]);
        p[28..].copy_from_slice(b"ping");
        p
    }

    #[test]
    fn table_lookup_and_duplicates() {
        let t = SessionTable::new(vec![
            sess([10, 60, 0, 1], 1, 100),
            sess([10, 60, 0, 2], 2, 200),
        ])
        .unwrap();
        assert_eq!(t.by_ue(Ipv4Addr::new(10, 60, 0, 2)).unwrap().0, 1);
        assert_eq!(t.by_teid(100).unwrap().1.ue, Ipv4Addr::new(10, 60, 0, 1));
        assert!(t.by_ue(Ipv4Addr::new(10, 60, 0, 3)).is_none());
        assert!(t.by_teid(300).is_none());
        assert!(SessionTable::new(vec![
            sess([10, 60, 0, 1], 1, 100),
            sess([10, 60, 0, 1], 2, 200)
        ])
        .is_err());
        assert!(SessionTable::new(vec![
            sess([10, 60, 0, 1], 1, 100),
            sess([10, 60, 0, 2], 2, 100)
        ])
        .is_err());
    }

    #[test]
    fn uplink_encap_marks_the_high_flow_by_dscp() {
        let mut s = sess([10, 60, 0, 1], 7, 100);
        s.high = Some(crate::smf::HighPriority { qfi: 1, dscp: 46 });
        for (tos, qfi) in [(46 << 2, 1), ((46 << 2) | 1, 1), (0, 9), (34 << 2, 9)] {
            let mut inner = ip_udp(s.ue, Ipv4Addr::new(192, 168, 6, 2));
            inner[1] = tos;
            let mut buf = vec![0u8; HEADROOM + inner.len()];
            buf[HEADROOM..].copy_from_slice(&inner);
            let at = encap_uplink(&mut buf, HEADROOM, inner.len(), &s).unwrap();
            let (repr, _) = Message::parse(&buf[at..]).unwrap();
            assert_eq!(
                repr.ext.psc,
                Some(PduSessionContainer::ul(qfi)),
                "ToS {tos:#x}"
            );
        }
    }

    #[test]
    fn uplink_encap_has_teid_and_psc() {
        let s = sess([10, 60, 0, 1], 0x1122_3344, 100);
        let inner = ip_udp(s.ue, Ipv4Addr::new(192, 168, 6, 2));
        assert_eq!(uplink_source(&inner), Some(s.ue));
        let mut buf = vec![0u8; HEADROOM + inner.len()];
        buf[HEADROOM..].copy_from_slice(&inner);
        let at = encap_uplink(&mut buf, HEADROOM, inner.len(), &s).unwrap();
        assert_eq!(at, 0, "the UL header fills the headroom exactly");
        let (repr, m) = Message::parse(&buf[at..]).unwrap();
        assert_eq!(repr.teid, 0x1122_3344);
        assert_eq!(repr.ext.psc, Some(PduSessionContainer::ul(9)));
        assert_eq!(m, Message::GPdu { payload: &inner });
        // Same octets as scapy's GTP_U_Header(teid=0x11223344,next_ex=0x85)/
        // GTPPDUSessionContainer(type=1,QFI=9) header (see upf-wire's encap tests).
        assert_eq!(
            &buf[..16],
            &[
                0x34, 0xff, 0x00, 0x28, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0x85, 0x01, 0x10, 0x09,
                0x00
            ]
        );
        // No headroom, no encapsulation.
        assert_eq!(
            encap_uplink(&mut buf, 8, inner.len(), &s),
            Err(upf_wire::Error::NoHeadroom)
        );
        assert!(uplink_source(&[0x60; 40]).is_none());
    }

    #[test]
    fn downlink_classification() {
        let t = SessionTable::new(vec![
            sess([10, 60, 0, 1], 1, 100),
            sess([10, 60, 0, 2], 2, 200),
        ])
        .unwrap();
        let dl = |teid: u32, dst: [u8; 4], psc: Option<PduSessionContainer>| {
            let inner = ip_udp(Ipv4Addr::new(192, 168, 6, 2), Ipv4Addr::from(dst));
            let h = gtpu::Repr {
                msg_type: MessageType::GPdu,
                teid,
                seq_number: None,
                npdu_number: None,
                ext: Extensions {
                    psc,
                    ..Extensions::default()
                },
                payload_len: inner.len(),
            };
            let mut b = vec![0u8; h.buffer_len()];
            h.emit(&mut gtpu::Packet::new_unchecked(&mut b[..]))
                .unwrap();
            let hl = h.header_len();
            b[hl..].copy_from_slice(&inner);
            (b, inner)
        };
        let (b, inner) = dl(200, [10, 60, 0, 2], Some(PduSessionContainer::dl(5)));
        assert_eq!(
            classify_downlink(&t, &b).unwrap(),
            Received::ToUe {
                index: 1,
                qfi: Some(5),
                inner: &inner
            }
        );
        let (b, _) = dl(200, [10, 60, 0, 1], None);
        assert_eq!(
            classify_downlink(&t, &b).unwrap(),
            Received::WrongUe { index: 1 }
        );
        let (b, _) = dl(999, [10, 60, 0, 1], None);
        assert_eq!(
            classify_downlink(&t, &b).unwrap(),
            Received::UnknownTeid(999)
        );
        let (b, inner) = dl(100, [10, 60, 0, 1], None);
        assert_eq!(
            classify_downlink(&t, &b).unwrap(),
            Received::ToUe {
                index: 0,
                qfi: None,
                inner: &inner
            }
        );
        let mut e = [0u8; 16];
        let n = gtpu_msg::emit_echo_request(77, &mut e).unwrap();
        assert_eq!(
            classify_downlink(&t, &e[..n]).unwrap(),
            Received::EchoRequest { seq: 77 }
        );
        assert!(classify_downlink(&t, &[1, 2, 3]).is_err());
    }
}
