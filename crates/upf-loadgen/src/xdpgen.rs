//! A generator fast enough not to be the bottleneck on veth, and a counting sink that
//! measures latency.
//!
//! [`Generator`]: `BPF_PROG_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` runs an XDP program on
//! frames made from a template, as if they arrived on a veth; the program returns XDP_TX, so
//! the kernel sends each frame out of that veth to its peer (4–8 Mpps from one core, where an
//! AF_PACKET sender makes ~1). Live frames come from a page pool and are recycled, and the
//! receiver may have changed them (the kernel decrements the TTL when it forwards), so the
//! program rewrites every header octet from immediates on every frame, then the per-frame
//! fields from counters kept in an array map: frame k carries session `k mod N`: its IPv4
//! address (`addr_base + i`, source or destination, with the header checksum recomputed) and
//! its GTP-U TEID (`teid_base + i`). A share of the frames is high priority (see
//! [`Template::with_high_priority`]: QFI in the uplink PDU Session Container, or DSCP in the
//! IPv4 header), chosen by a hash of k so that the classes interleave within every session.
//! When the inner payload has room, its first 12 octets are a stamp: `bpf_ktime_get_ns()`
//! (CLOCK_MONOTONIC, 8 octets, host order) and a class word ([`STAMP_MAGIC`] + class, 4
//! octets). The peer veth needs an XDP program (or GRO on) to accept redirected frames.
//!
//! The programs are C (`bpf/gen.bpf.c`, `bpf/sink.bpf.c`, `bpf/verdict.bpf.c`), built by
//! clang and loaded with aya; what varies (the template, the ports, the latency settings) is
//! set at load as read-only globals, so the verifier keeps only the code a template needs.
//!
//! [`Counter`]: an XDP program that counts (packets, octets) the IPv4 UDP packets to the ports
//! given, atomically in an array map, and drops them; everything else (ARP, ICMP, …) passes,
//! so the kernel behind it keeps resolving neighbours. Count at the receiver: a sender's own
//! count says nothing about what arrived. With a [`LatencyConfig`] it also reads the stamp of
//! every counted packet (inside a G-PDU with up to one extension header, or a plain IPv4/UDP
//! packet), adds `now − stamp` to its class's log-linear histogram ([`bucket`]) and keeps
//! RFC 3550 §A.8 interarrival jitter per flow (session × class, [`jitter_update`]).
#![forbid(unsafe_code)]

use crate::sys;
use aya::maps::{Array, MapData};
use aya::programs::{Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use upf_io::bpf::{self, LiveFrames};

pub const XDP_DROP: i32 = 1;
pub const XDP_PASS: i32 = 2;
pub const XDP_TX: i32 = 3;
pub const GTPU_PORT: u16 = 2152;
static GEN_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gen.bpf.o"));
static SINK_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sink.bpf.o"));
static VERDICT_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/verdict.bpf.o"));
/// Template header octets the generator program holds at most.
pub const MAX_HEADER: usize = 128;
/// Destination ports the sink counts at most.
pub const MAX_PORTS: usize = 8;
/// Inner UDP ports of the generated packets.
pub const SRC_PORT: u16 = 5000;
pub const DST_PORT: u16 = 5001;
/// Largest inner packet a live frame holds comfortably (a 4 KiB page less headroom and
/// skb_shared_info).
pub const MAX_INNER: usize = 3000;

/// The class word of a stamp is `STAMP_MAGIC + class` (0 low, 1 high priority): a receiver
/// tells a stamp from whatever a recycled page held before.
pub const STAMP_MAGIC: u32 = 0x5550_4c00;
/// Octets of a stamp: CLOCK_MONOTONIC nanoseconds (8) and the class word (4).
pub const STAMP_LEN: usize = 12;
pub const CLASS_LOW: usize = 0;
pub const CLASS_HIGH: usize = 1;
/// The multiplier of the class hash: frame k is high priority iff
/// `(k as u32) * GOLDEN mod 2^32 < share * 2^32` (a Weyl sequence: the classes interleave
/// evenly within every session, whatever the session count).
const GOLDEN: u64 = 0x9e37_79b9;

/// How high-priority frames differ from the template's (low-priority) ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// The QFI of the uplink PDU Session Container.
    Qfi(u8),
    /// The DSCP of the IPv4 header (`addr_off`'s header; its checksum follows).
    Dscp(u8),
}

/// A frame and what changes from frame to frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub frame: Vec<u8>,
    /// Octets rewritten on every frame (every header; the payload is left as it was).
    pub header_len: usize,
    /// Offset of the IPv4 header whose address varies, and of that address.
    pub ip: usize,
    pub addr_off: usize,
    pub addr_base: u32,
    /// Offset of the GTP-U TEID (`teid_base + i`), if any.
    pub teid: Option<(usize, u32)>,
    /// Offset of the QFI octet of the uplink PDU Session Container, if any.
    pub psc_qfi: Option<usize>,
    /// Offset of the stamp (the inner UDP payload), when the payload has room for it.
    pub stamp: Option<usize>,
    /// High-priority frames: their mark and their share of all frames, in 1/2^32.
    pub high: Option<(Mark, u64)>,
    /// Sessions the frames go round (N).
    pub count: u32,
}

fn ipv4_header(total: usize, ttl: u8, src: Ipv4Addr, dst: Ipv4Addr) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&u16::try_from(total).unwrap_or(u16::MAX).to_be_bytes());
    h[8] = ttl;
    h[9] = 17;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let c = upf_wire::checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

fn udp_header(sport: u16, dport: u16, len: usize) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[4..6].copy_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_be_bytes());
    h
}

fn ethernet(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = Vec::with_capacity(1600);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    f
}

/// An inner IPv4/UDP packet of `size` octets (at least 28) from `src` to `dst` (ports
/// [`SRC_PORT`] → [`DST_PORT`], UDP checksum 0), appended to `f`.
fn inner(f: &mut Vec<u8>, size: usize, src: Ipv4Addr, dst: Ipv4Addr) {
    f.extend_from_slice(&ipv4_header(size, 64, src, dst));
    f.extend_from_slice(&udp_header(SRC_PORT, DST_PORT, size - 20));
    f.resize(f.len() + size - 28, 0);
}

fn check_size(size: usize) -> io::Result<()> {
    if !(28..=MAX_INNER).contains(&size) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("inner packet size {size}: must be 28..={MAX_INNER} (IPv4 + UDP)"),
        ));
    }
    Ok(())
}

impl Template {
    /// Uplink G-PDUs: Ethernet, outer IPv4/UDP from `gnb` to `upf_n3`:2152, GTP-U with an
    /// uplink PDU Session Container (QFI `qfi`) and TEID `teid_base + i`, and an inner
    /// IPv4/UDP packet of `size` octets from UE `ue_base + i` to `dn`.
    #[allow(clippy::too_many_arguments)]
    pub fn uplink_gtpu(
        macs: ([u8; 6], [u8; 6]),
        gnb: Ipv4Addr,
        upf_n3: Ipv4Addr,
        teid_base: u32,
        qfi: u8,
        ue_base: Ipv4Addr,
        dn: Ipv4Addr,
        size: usize,
        count: u32,
    ) -> io::Result<Template> {
        check_size(size)?;
        let (dst, src) = macs;
        let mut f = ethernet(dst, src);
        // GTP-U: 8 octets, sequence/N-PDU/next-type 4, the PDU Session Container 4.
        let gtp = 16;
        f.extend_from_slice(&ipv4_header(20 + 8 + gtp + size, 64, gnb, upf_n3));
        f.extend_from_slice(&udp_header(GTPU_PORT, GTPU_PORT, 8 + gtp + size));
        let teid_off = f.len() + 4;
        let len = u16::try_from(8 + size).unwrap_or(u16::MAX);
        f.extend_from_slice(&[0x34, 0xff]);
        f.extend_from_slice(&len.to_be_bytes());
        f.extend_from_slice(&teid_base.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0x85, 1, 0x10, qfi & 0x3f, 0]);
        let psc_qfi = f.len() - 2;
        let ip = f.len();
        inner(&mut f, size, ue_base, dn);
        Ok(Template {
            header_len: ip + 28,
            ip,
            addr_off: ip + 12,
            addr_base: u32::from(ue_base),
            teid: Some((teid_off, teid_base)),
            psc_qfi: Some(psc_qfi),
            stamp: (size >= 28 + STAMP_LEN).then_some(ip + 28),
            high: None,
            count: count.max(1),
            frame: f,
        })
    }

    /// Plain IPv4/UDP packets of `size` octets: to UE `ue_base + i` from `peer` (downlink, the
    /// DN's packets), or from UE `ue_base + i` to `peer` (uplink without GTP-U: what Linux
    /// forwards in the baseline).
    pub fn plain(
        macs: ([u8; 6], [u8; 6]),
        ue_base: Ipv4Addr,
        peer: Ipv4Addr,
        to_ue: bool,
        size: usize,
        count: u32,
    ) -> io::Result<Template> {
        check_size(size)?;
        let (dst, src) = macs;
        let mut f = ethernet(dst, src);
        let ip = f.len();
        if to_ue {
            inner(&mut f, size, peer, ue_base);
        } else {
            inner(&mut f, size, ue_base, peer);
        }
        Ok(Template {
            header_len: ip + 28,
            ip,
            addr_off: ip + if to_ue { 16 } else { 12 },
            addr_base: u32::from(ue_base),
            teid: None,
            psc_qfi: None,
            stamp: (size >= 28 + STAMP_LEN).then_some(ip + 28),
            high: None,
            count: count.max(1),
            frame: f,
        })
    }

    /// Marks a `share` (0..=1) of the frames high priority with `mark` (the others keep the
    /// template's QFI / DSCP). A QFI mark needs a PDU Session Container.
    pub fn with_high_priority(mut self, share: f64, mark: Mark) -> io::Result<Template> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if !(0.0..=1.0).contains(&share) {
            return Err(bad(format!("high-priority share {share}: must be 0..=1")));
        }
        match mark {
            Mark::Qfi(q) if self.psc_qfi.is_none() || q > 63 => {
                return Err(bad(format!(
                    "QFI mark {q}: no PDU Session Container, or > 63"
                )))
            }
            Mark::Dscp(d) if d > 63 => return Err(bad(format!("DSCP {d} > 63"))),
            _ => {}
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let threshold = (share * 4_294_967_296.0).round() as u64;
        self.high = Some((mark, threshold));
        Ok(self)
    }

    /// Whether frame `k` is high priority.
    pub fn is_high(&self, k: u64) -> bool {
        self.high.is_some_and(|(_, thr)| {
            #[allow(clippy::cast_possible_truncation)]
            let k32 = k as u32;
            (u64::from(k32) * GOLDEN) & 0xffff_ffff < thr
        })
    }

    /// The octets of frame `k`'s stamp that hold the time (the program writes the clock).
    pub fn stamp_time(&self) -> Option<std::ops::Range<usize>> {
        self.stamp.map(|s| s..s + 8)
    }

    /// Frame `k` as the program makes it (the specification of [`Template::program`]).
    pub fn frame(&self, k: u64) -> Vec<u8> {
        let i = u32::try_from(k % u64::from(self.count)).unwrap_or(0);
        let mut f = self.frame.clone();
        if let Some((off, base)) = self.teid {
            f[off..off + 4].copy_from_slice(&base.wrapping_add(i).to_be_bytes());
        }
        let a = self.addr_base.wrapping_add(i);
        f[self.addr_off..self.addr_off + 4].copy_from_slice(&a.to_be_bytes());
        let high = self.is_high(k);
        match self.high {
            Some((Mark::Qfi(q), _)) if high => {
                if let Some(o) = self.psc_qfi {
                    f[o] = q;
                }
            }
            Some((Mark::Dscp(d), _)) if high => f[self.ip + 1] = d << 2,
            _ => {}
        }
        if let Some(s) = self.stamp {
            // The time is the program's clock: zero here (see `stamp_time`).
            f[s..s + 8].fill(0);
            let w = STAMP_MAGIC + u32::from(high);
            f[s + 8..s + 12].copy_from_slice(&w.to_ne_bytes());
        }
        f[self.ip + 10..self.ip + 12].fill(0);
        let c = upf_wire::checksum::checksum(&f[self.ip..self.ip + 20]);
        f[self.ip + 10..self.ip + 12].copy_from_slice(&c.to_be_bytes());
        f
    }

    /// Sum of the 16-bit words of the varying IPv4 header without its checksum and address.
    fn partial_sum(&self) -> u32 {
        let h = &self.frame[self.ip..self.ip + 20];
        let rel = self.addr_off - self.ip;
        (0..10)
            .filter(|w| *w != 5 && *w * 2 != rel && *w * 2 != rel + 2)
            .map(|w| u32::from(u16::from_be_bytes([h[2 * w], h[2 * w + 1]])))
            .sum()
    }

    /// The generator program's globals for this template (see `bpf/gen.bpf.c`): an error when
    /// the headers are longer than [`MAX_HEADER`].
    fn globals(&self) -> io::Result<GenGlobals> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        let u32_of = |v: usize| u32::try_from(v).map_err(|_| bad(format!("offset {v}")));
        if self.header_len > MAX_HEADER || self.header_len > self.frame.len() {
            return Err(bad(format!(
                "template headers of {} octets: at most {MAX_HEADER} and the frame's",
                self.header_len
            )));
        }
        let mut hdr = [0u8; MAX_HEADER];
        hdr[..self.header_len].copy_from_slice(&self.frame[..self.header_len]);
        let need = self
            .stamp
            .map_or(self.header_len, |s| s + STAMP_LEN)
            .max(self.header_len);
        let (mark, mark_off, mark_val, mark_csum, threshold) = match self.high {
            None => (0, 0, 0, 0, 0),
            Some((Mark::Qfi(q), thr)) => {
                let o = self
                    .psc_qfi
                    .ok_or_else(|| bad("QFI mark without PSC".into()))?;
                (1, o, u32::from(q), 0, thr)
            }
            Some((Mark::Dscp(d), thr)) => {
                let tos = d << 2;
                let delta = i32::from(tos) - i32::from(self.frame[self.ip + 1]);
                (2, self.ip + 1, u32::from(tos), delta, thr)
            }
        };
        let (teid_off, teid_base) = self.teid.unwrap_or((0, 0));
        Ok(GenGlobals {
            hdr,
            hdr_len: u32_of(self.header_len)?,
            need: u32_of(need)?,
            sessions: self.count.max(1),
            ip_off: u32_of(self.ip)?,
            addr_off: u32_of(self.addr_off)?,
            addr_base: self.addr_base,
            has_teid: u32::from(self.teid.is_some()),
            teid_off: u32_of(teid_off)?,
            teid_base,
            partial_sum: self.partial_sum(),
            mark,
            mark_off: u32_of(mark_off)?,
            mark_val,
            mark_csum,
            threshold,
            has_stamp: u32::from(self.stamp.is_some()),
            stamp_off: u32_of(self.stamp.unwrap_or(0))?,
        })
    }
}

/// The generator program's read-only globals (`bpf/gen.bpf.c`).
#[derive(Debug)]
struct GenGlobals {
    hdr: [u8; MAX_HEADER],
    hdr_len: u32,
    need: u32,
    sessions: u32,
    ip_off: u32,
    addr_off: u32,
    addr_base: u32,
    has_teid: u32,
    teid_off: u32,
    teid_base: u32,
    partial_sum: u32,
    mark: u32,
    mark_off: u32,
    mark_val: u32,
    mark_csum: i32,
    threshold: u64,
    has_stamp: u32,
    stamp_off: u32,
}

impl GenGlobals {
    fn load(&self) -> io::Result<Ebpf> {
        EbpfLoader::new()
            .override_global("hdr", &self.hdr, true)
            .override_global("hdr_len", &self.hdr_len, true)
            .override_global("need", &self.need, true)
            .override_global("sessions", &self.sessions, true)
            .override_global("ip_off", &self.ip_off, true)
            .override_global("addr_off", &self.addr_off, true)
            .override_global("addr_base", &self.addr_base, true)
            .override_global("has_teid", &self.has_teid, true)
            .override_global("teid_off", &self.teid_off, true)
            .override_global("teid_base", &self.teid_base, true)
            .override_global("partial_sum", &self.partial_sum, true)
            .override_global("mark", &self.mark, true)
            .override_global("mark_off", &self.mark_off, true)
            .override_global("mark_val", &self.mark_val, true)
            .override_global("mark_csum", &self.mark_csum, true)
            .override_global("threshold", &self.threshold, true)
            .override_global("has_stamp", &self.has_stamp, true)
            .override_global("stamp_off", &self.stamp_off, true)
            .load(GEN_OBJECT)
            .map_err(|e| bpf::error("loading the generator object", &e))
    }
}

/// Loads XDP program `name` of `ebpf` into the kernel.
fn load_xdp<'a>(ebpf: &'a mut Ebpf, name: &str) -> io::Result<&'a mut Xdp> {
    let prog: &mut Xdp = ebpf
        .program_mut(name)
        .ok_or_else(|| io::Error::other(format!("object without {name}")))?
        .try_into()
        .map_err(|e| bpf::error(name, &e))?;
    prog.load()
        .map_err(|e| bpf::error(&format!("BPF_PROG_LOAD (XDP {name})"), &e))?;
    Ok(prog)
}

/// XDP program `name` of `ebpf`, loaded.
fn xdp<'a>(ebpf: &'a Ebpf, name: &str) -> io::Result<&'a Xdp> {
    ebpf.program(name)
        .ok_or_else(|| io::Error::other(format!("object without {name}")))?
        .try_into()
        .map_err(|e| bpf::error(name, &e))
}

/// An array map of `N`-octet values (u32 keys), taken out of its object; the threads that
/// read and reset it share it.
struct ArrayMap<const N: usize> {
    name: &'static str,
    map: Mutex<Array<MapData, [u8; N]>>,
}

impl<const N: usize> std::fmt::Debug for ArrayMap<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ArrayMap({}, {N} octets)", self.name)
    }
}

impl<const N: usize> ArrayMap<N> {
    /// Map `name` of `ebpf` (after its programs are loaded: they hold the map from then on).
    fn take(ebpf: &mut Ebpf, name: &'static str) -> io::Result<Self> {
        let m = ebpf
            .take_map(name)
            .ok_or_else(|| io::Error::other(format!("object without map {name}")))?;
        let map = Array::try_from(m).map_err(|e| bpf::error(name, &e))?;
        Ok(ArrayMap {
            name,
            map: Mutex::new(map),
        })
    }

    fn lock(&self) -> io::Result<std::sync::MutexGuard<'_, Array<MapData, [u8; N]>>> {
        self.map
            .lock()
            .map_err(|_| io::Error::other(format!("map {} lock poisoned", self.name)))
    }

    fn get(&self, i: u32) -> io::Result<[u8; N]> {
        self.lock()?
            .get(&i, 0)
            .map_err(|e| bpf::error(&format!("reading map {}", self.name), &e))
    }

    fn set(&self, i: u32, v: &[u8; N]) -> io::Result<()> {
        self.lock()?
            .set(i, v, 0)
            .map_err(|e| bpf::error(&format!("writing map {}", self.name), &e))
    }
}

/// CLOCK_MONOTONIC now, ns: the clock of the stamps (`bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    sys::monotonic_ns()
}

/// The signal that ends a generator's BPF_PROG_RUN call at its deadline (a no-op handler is
/// installed for it: the process must not use it otherwise).
pub const WAKE_SIGNAL: i32 = signal_hook::consts::SIGUSR2;

/// Installs the handler of [`WAKE_SIGNAL`] once (a flag nobody reads: the point is that the
/// signal interrupts the call instead of killing the process).
fn wake_handler() -> io::Result<()> {
    static ONCE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let flag = std::sync::Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(WAKE_SIGNAL, flag)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(io::Error::other)
}

/// Octets of the generator's state (`struct gen_state` of `bpf/gen.bpf.c`): the session index
/// of the next frame (u32), the frame counter k (u32), the time the next frame is due (ps,
/// u64), the interval between frames (ps, u64; 0: not paced) and the frames sent (u64). A run
/// before its frame is due returns XDP_DROP and changes nothing: a paced generator spins
/// through the kernel's loop and sends on time.
pub const STATE_LEN: usize = 32;

/// A loaded generator: program, state map and template.
#[derive(Debug)]
pub struct Generator {
    template: Template,
    state: ArrayMap<STATE_LEN>,
    ebpf: Ebpf,
}

const GEN_PROGRAM: &str = "upf_gen";

/// What one run sent.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GenStats {
    /// Frames the program sent (XDP_TX; the veth may still drop some when its peer's ring is
    /// full: count at the receiver).
    pub frames: u64,
    pub elapsed: Duration,
    /// CPU time of the generating thread (user + system, from its schedstat).
    pub cpu: Duration,
}

impl GenStats {
    pub fn mpps(&self) -> f64 {
        self.frames as f64 / self.elapsed.as_secs_f64().max(1e-9) / 1e6
    }
}

/// CPU time of the calling thread, from /proc/thread-self/schedstat (nanoseconds on a CPU).
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

impl Generator {
    pub fn new(template: Template) -> io::Result<Generator> {
        let mut ebpf = template.globals()?.load()?;
        load_xdp(&mut ebpf, GEN_PROGRAM)?;
        let state = ArrayMap::take(&mut ebpf, "state")?;
        Ok(Generator {
            template,
            state,
            ebpf,
        })
    }

    pub fn template(&self) -> &Template {
        &self.template
    }

    /// Runs the program once on the template through BPF_PROG_TEST_RUN (no live frames):
    /// the verdict and the frame it made (for tests).
    pub fn test_once(&self) -> io::Result<(u32, Vec<u8>)> {
        let frame = &self.template.frame;
        let mut out = vec![0u8; frame.len() + 512];
        let r = bpf::run(xdp(&self.ebpf, GEN_PROGRAM)?, frame, &mut out, 1, None)?;
        out.truncate(r.out_len);
        Ok((r.retval, out))
    }

    fn state(&self) -> io::Result<[u8; STATE_LEN]> {
        self.state.get(0)
    }

    fn set_state(&self, v: &[u8; STATE_LEN]) -> io::Result<()> {
        self.state.set(0, v)
    }

    /// Paces the program at `rate` frames/s (0: not paced), the next frame due now.
    pub fn set_rate(&self, rate: u64) -> io::Result<()> {
        let mut v = self.state()?;
        let interval_ps = 1_000_000_000_000u64
            .checked_div(rate)
            .map_or(0, |i| i.max(1));
        v[8..16].fill(0);
        v[16..24].copy_from_slice(&interval_ps.to_ne_bytes());
        self.set_state(&v)
    }

    /// Frames sent since the generator was made (runs that returned XDP_TX).
    pub fn sent(&self) -> io::Result<u64> {
        Ok(u64_at(&self.state()?, 24))
    }

    /// Sends frames out of interface `dev` of the calling thread's network namespace for
    /// `seconds`: `rate` frames/s (0: as fast as it goes), until `stop`. Pin the thread first.
    ///
    /// Each BPF_PROG_RUN call costs ~25 ms on top of its frames here (the live-frames set-up
    /// and tear-down: nothing is sent meanwhile), so there is one call, as long as it takes:
    /// a helper thread interrupts it with [`WAKE_SIGNAL`] at the deadline (the kernel's loop
    /// stops on a pending signal). Paced, the program drops the runs before their frame is
    /// due (see [`STATE_LEN`]).
    pub fn run(
        &self,
        dev: &str,
        seconds: f64,
        rate: u64,
        stop: &AtomicBool,
    ) -> io::Result<GenStats> {
        wake_handler()?;
        let ifindex = sys::ifindex(dev)?;
        let frame = &self.template.frame;
        let prog = xdp(&self.ebpf, GEN_PROGRAM)?;
        let live = Some(LiveFrames { ifindex, batch: 64 });
        self.set_rate(rate)?;
        let sent0 = self.sent()?;
        let cpu0 = thread_cpu();
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(seconds.max(0.0));
        let me = sys::this_thread();
        let done = AtomicBool::new(false);
        let r = std::thread::scope(|sc| {
            sc.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    let now = Instant::now();
                    if now >= deadline || stop.load(Ordering::Relaxed) {
                        // Again every 5 ms: the signal may come between two calls.
                        let _ = sys::interrupt(me, WAKE_SIGNAL);
                        std::thread::sleep(Duration::from_millis(5));
                    } else {
                        std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
                    }
                }
            });
            let r = loop {
                if Instant::now() >= deadline || stop.load(Ordering::Relaxed) {
                    break Ok(());
                }
                match bpf::run(prog, frame, &mut [], u32::MAX, live) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            done.store(true, Ordering::Release);
            r
        });
        let elapsed = start.elapsed();
        let cpu = thread_cpu().saturating_sub(cpu0);
        let frames = self.sent()?.saturating_sub(sent0);
        self.set_rate(0)?;
        r?;
        Ok(GenStats {
            frames,
            elapsed,
            cpu,
        })
    }

    /// Sets the session index and the frame counter of the next frame to 0.
    pub fn reset(&self) -> io::Result<()> {
        let mut v = self.state()?;
        v[0..8].fill(0);
        self.set_state(&v)
    }
}

/// Runs `g` on a new thread inside network namespace `netns`, pinned to `cpu`, at nice value
/// `nice` (0: as inherited), out of `dev`.
#[allow(clippy::too_many_arguments)]
pub fn run_in(
    g: &Generator,
    netns: &str,
    cpu: Option<usize>,
    nice: i32,
    dev: &str,
    seconds: f64,
    rate: u64,
    stop: &AtomicBool,
) -> io::Result<GenStats> {
    crate::in_netns(netns, || {
        if let Some(c) = cpu {
            sys::pin_to_cpu(c).map_err(|e| io::Error::new(e.kind(), format!("CPU {c}: {e}")))?;
        }
        if nice != 0 {
            sys::set_thread_nice(nice)
                .map_err(|e| io::Error::new(e.kind(), format!("nice {nice}: {e}")))?;
        }
        g.run(dev, seconds, rate, stop)
    })?
}

/// Packets and octets counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Count {
    pub packets: u64,
    pub octets: u64,
}

impl Count {
    pub fn since(&self, earlier: &Count) -> Count {
        Count {
            packets: self.packets.saturating_sub(earlier.packets),
            octets: self.octets.saturating_sub(earlier.octets),
        }
    }
}

/// Histogram buckets per class: 0..32 ns one each, then 32 per power of two up to 2^37 ns
/// (~137 s; the last bucket takes everything above): a bucket is 1.6–3.1 % of its values
/// wide.
pub const BUCKETS: usize = 1056;
const SUB_BITS: u32 = 5;
const MAX_EXP: u32 = 36;

/// The histogram bucket of a transit time of `v` ns (the specification of the sink's).
pub fn bucket(v: u64) -> usize {
    if v < 32 {
        return usize::try_from(v).unwrap_or(0);
    }
    let e = 63 - v.leading_zeros();
    if e > MAX_EXP {
        return BUCKETS - 1;
    }
    usize::try_from(u64::from((e - SUB_BITS) * 32) + (v >> (e - SUB_BITS))).unwrap_or(0)
}

/// The values of bucket `b`: `lo..hi` ns (the last one is open above).
pub fn bucket_bounds(b: usize) -> (u64, u64) {
    let b64 = b as u64;
    if b < 32 {
        return (b64, b64 + 1);
    }
    let e = b64 / 32 + 4;
    let m = b64 % 32 + 32;
    let hi = if b + 1 >= BUCKETS {
        u64::MAX
    } else {
        (m + 1) << (e - 5)
    };
    (m << (e - 5), hi)
}

/// RFC 3550 §A.8: the interarrival jitter (times 16, ns) after a packet of transit `transit`
/// following one of transit `last`: J += (|D| − J)/16 in fixed point.
pub fn jitter_update(j16: u64, last: u64, transit: u64) -> u64 {
    let d = transit.abs_diff(last);
    j16.wrapping_add(d).wrapping_sub((j16 + 8) >> 4)
}

/// What the sink needs to measure latency: where a packet's session is (UE address =
/// `ue_base + session`) and which QFI a downlink G-PDU of each class should carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyConfig {
    pub ue_base: Ipv4Addr,
    pub sessions: u32,
    /// The UE is the inner packet's destination (downlink) rather than its source.
    pub ue_is_dst: bool,
    /// (low, high): a G-PDU whose PDU Session Container carries another QFI than its class's
    /// is counted in [`ClassLatency::qfi_mismatch`].
    pub qfi: Option<(u8, u8)>,
}

// The latency map: one value of a 64-octet header (generation u32 at 0, transits below zero
// at 8), then per class [count, sum ns, max ns, QFI mismatches, 4 spare] and the buckets.
const LAT_HEADER: usize = 64;
const CLASS_FIELDS: usize = 64;
const CLASS_BYTES: usize = CLASS_FIELDS + BUCKETS * 8;
const LAT_BYTES: usize = LAT_HEADER + 2 * CLASS_BYTES;
// The jitter map: per flow (session × 2 + class) last transit u64, J × 16 u64, generation
// u32, packets u32. A flow whose generation is not the map's starts over.
const JIT_BYTES: usize = 24;

/// One class's latency since the last reset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassLatency {
    /// Stamped packets of the class.
    pub count: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
    /// Downlink G-PDUs whose QFI is not the class's.
    pub qfi_mismatch: u64,
    pub buckets: Vec<u64>,
}

impl ClassLatency {
    /// The `p` quantile (0..=1): the middle of the bucket that holds it (capped at the
    /// maximum), `None` without packets.
    pub fn quantile(&self, p: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let total: u64 = self.buckets.iter().sum();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = ((p * total as f64).ceil() as u64).clamp(1, total.max(1));
        let mut cum = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            cum += n;
            if cum >= rank {
                let (lo, hi) = bucket_bounds(b);
                let mid = if hi == u64::MAX {
                    lo
                } else {
                    lo + (hi - lo) / 2
                };
                return Some(mid.min(self.max_ns));
            }
        }
        Some(self.max_ns)
    }

    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64)
    }
}

/// What the sink measured since the last reset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Latency {
    pub classes: [ClassLatency; 2],
    /// Stamps later than the sink's clock (should not happen: one clock).
    pub negative: u64,
}

/// Interarrival jitter of one class over its flows (those with two packets or more).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct JitterSummary {
    pub flows: u64,
    pub mean_ns: f64,
    pub max_ns: f64,
}

/// The counting sink: counts and drops IPv4 UDP packets to the given ports on one interface,
/// and measures their latency if asked; detached when dropped (a BPF link).
#[derive(Debug)]
pub struct Counter {
    counts: ArrayMap<16>,
    latency: Option<SinkLatency>,
    generation: std::sync::atomic::AtomicU32,
    /// The program and its link (dropping it detaches the program); the tests run it.
    #[cfg_attr(not(test), allow(dead_code))]
    ebpf: Ebpf,
}

/// The sink's latency maps (`bpf/sink.bpf.c`) and settings.
#[derive(Debug)]
struct SinkLatency {
    lat: ArrayMap<LAT_BYTES>,
    jit: ArrayMap<JIT_BYTES>,
    cfg: LatencyConfig,
}

const SINK_PROGRAM: &str = "upf_sink";

fn u64_at(v: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(v[off..off + 8].try_into().unwrap_or([0; 8]))
}

fn u32_at(v: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(v[off..off + 4].try_into().unwrap_or([0; 4]))
}

impl Counter {
    /// Attaches to interface `dev` of the calling thread's network namespace (native XDP).
    pub fn attach(dev: &str, ports: &[u16]) -> io::Result<Counter> {
        Counter::attach_with(dev, ports, None)
    }

    /// Attaches, measuring latency as `latency` says.
    pub fn attach_with(
        dev: &str,
        ports: &[u16],
        latency: Option<LatencyConfig>,
    ) -> io::Result<Counter> {
        let ifindex = sys::ifindex(dev)?;
        Counter::load(ports, latency, Some((ifindex, dev)))
    }

    /// Loads the program and its maps and attaches it to `attach` (ifindex, name; tests: none).
    fn load(
        ports: &[u16],
        latency: Option<LatencyConfig>,
        attach: Option<(u32, &str)>,
    ) -> io::Result<Counter> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        let mut stored = [0u16; MAX_PORTS];
        if ports.len() > MAX_PORTS {
            return Err(bad(format!("the sink counts at most {MAX_PORTS} ports")));
        }
        for (s, p) in stored.iter_mut().zip(ports) {
            *s = u16::from_ne_bytes(p.to_be_bytes());
        }
        let n_ports = u32::try_from(ports.len()).unwrap_or(0);
        let cfg = latency.unwrap_or(LatencyConfig {
            ue_base: Ipv4Addr::UNSPECIFIED,
            sessions: 1,
            ue_is_dst: false,
            qfi: None,
        });
        let flows = cfg
            .sessions
            .max(1)
            .checked_mul(2)
            .ok_or_else(|| bad("too many sessions".into()))?;
        let (qlo, qhi) = cfg.qfi.unwrap_or((0, 0));
        let mut ebpf = EbpfLoader::new()
            .override_global("n_ports", &n_ports, true)
            .override_global("ports", &stored, true)
            .override_global("latency", &u32::from(latency.is_some()), true)
            .override_global("ue_base", &u32::from(cfg.ue_base), true)
            .override_global("ue_is_dst", &u32::from(cfg.ue_is_dst), true)
            .override_global("sessions", &cfg.sessions, true)
            .override_global("has_qfi", &u32::from(cfg.qfi.is_some()), true)
            .override_global("qfi_low", &u32::from(qlo), true)
            .override_global("qfi_high", &u32::from(qhi), true)
            .map_max_entries("jit", flows)
            .load(SINK_OBJECT)
            .map_err(|e| bpf::error("loading the sink object", &e))?;
        let prog = load_xdp(&mut ebpf, SINK_PROGRAM)?;
        if let Some((ifindex, dev)) = attach {
            prog.attach_to_if_index(ifindex, XdpMode::Driver)
                .map_err(|e| bpf::error(&format!("attaching the counter to {dev}"), &e))?;
        }
        let counts = ArrayMap::take(&mut ebpf, "counts")?;
        let latency = match latency {
            None => None,
            Some(cfg) => Some(SinkLatency {
                lat: ArrayMap::take(&mut ebpf, "lat")?,
                jit: ArrayMap::take(&mut ebpf, "jit")?,
                cfg,
            }),
        };
        let c = Counter {
            counts,
            latency,
            generation: std::sync::atomic::AtomicU32::new(0),
            ebpf,
        };
        c.reset_latency()?;
        Ok(c)
    }

    /// Attaches inside network namespace `netns`.
    pub fn attach_in(netns: &str, dev: &str, ports: &[u16]) -> io::Result<Counter> {
        crate::in_netns(netns, || Counter::attach(dev, ports))?
    }

    /// Attaches inside network namespace `netns`, measuring latency.
    pub fn attach_latency_in(
        netns: &str,
        dev: &str,
        ports: &[u16],
        cfg: LatencyConfig,
    ) -> io::Result<Counter> {
        crate::in_netns(netns, || Counter::attach_with(dev, ports, Some(cfg)))?
    }

    pub fn read(&self) -> io::Result<Count> {
        let v = self.counts.get(0)?;
        Ok(Count {
            packets: u64_at(&v, 0),
            octets: u64_at(&v, 8),
        })
    }

    /// Empties the histograms and starts a new generation of jitter state (every flow
    /// starts over at its next packet). Call it while no packets arrive.
    pub fn reset_latency(&self) -> io::Result<()> {
        let Some(l) = &self.latency else {
            return Ok(());
        };
        let g = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut v = Box::new([0u8; LAT_BYTES]);
        v[0..4].copy_from_slice(&g.to_ne_bytes());
        l.lat.set(0, &v)
    }

    /// The histograms since the last reset (`None`: not measuring latency).
    pub fn latency(&self) -> io::Result<Option<Latency>> {
        let Some(l) = &self.latency else {
            return Ok(None);
        };
        let v = l.lat.get(0)?;
        let class = |c: usize| {
            let base = LAT_HEADER + c * CLASS_BYTES;
            ClassLatency {
                count: u64_at(&v, base),
                sum_ns: u64_at(&v, base + 8),
                max_ns: u64_at(&v, base + 16),
                qfi_mismatch: u64_at(&v, base + 24),
                buckets: (0..BUCKETS)
                    .map(|b| u64_at(&v, base + CLASS_FIELDS + 8 * b))
                    .collect(),
            }
        };
        Ok(Some(Latency {
            classes: [class(0), class(1)],
            negative: u64_at(&v, 8),
        }))
    }

    /// Per flow of this generation with two packets or more: (session, class, J in ns,
    /// packets).
    pub fn flows(&self) -> io::Result<Vec<(u32, usize, f64, u32)>> {
        let Some(l) = &self.latency else {
            return Ok(Vec::new());
        };
        let g = self.generation.load(Ordering::Relaxed);
        let mut out = Vec::new();
        for f in 0..l.cfg.sessions.max(1) * 2 {
            let v = l.jit.get(f)?;
            let packets = u32_at(&v, 20);
            if u32_at(&v, 16) == g && packets >= 2 {
                out.push((
                    f / 2,
                    (f % 2) as usize,
                    u64_at(&v, 8) as f64 / 16.0,
                    packets,
                ));
            }
        }
        Ok(out)
    }

    /// Jitter per class over the flows of this generation.
    pub fn jitter(&self) -> io::Result<[JitterSummary; 2]> {
        let mut out = [JitterSummary::default(); 2];
        for (_, c, j, _) in self.flows()? {
            let s = &mut out[c];
            s.flows += 1;
            s.mean_ns += j;
            s.max_ns = s.max_ns.max(j);
        }
        for s in &mut out {
            if s.flows > 0 {
                s.mean_ns /= s.flows as f64;
            }
        }
        Ok(out)
    }
}

/// An XDP program returning `verdict` (XDP_PASS: lets a veth accept redirected frames and
/// hand them to the kernel; XDP_DROP), attached to `dev` of `netns` while the value lives.
#[derive(Debug)]
pub struct Fixed {
    _ebpf: Ebpf,
}

impl Fixed {
    pub fn attach_in(netns: &str, dev: &str, verdict: i32) -> io::Result<Fixed> {
        crate::in_netns(netns, || {
            let ifindex = sys::ifindex(dev)?;
            let verdict = u32::try_from(verdict)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "XDP verdict"))?;
            let mut ebpf = EbpfLoader::new()
                .override_global("verdict", &verdict, true)
                .load(VERDICT_OBJECT)
                .map_err(|e| bpf::error("loading the verdict object", &e))?;
            load_xdp(&mut ebpf, "upf_verdict")?
                .attach_to_if_index(ifindex, XdpMode::Driver)
                .map_err(|e| bpf::error(&format!("attaching XDP to {dev}"), &e))?;
            Ok(Fixed { _ebpf: ebpf })
        })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ul() -> Template {
        Template::uplink_gtpu(
            ([2; 6], [4; 6]),
            Ipv4Addr::new(192, 168, 3, 2),
            Ipv4Addr::new(192, 168, 3, 1),
            0x1000,
            9,
            Ipv4Addr::new(10, 60, 0, 0),
            Ipv4Addr::new(192, 168, 6, 2),
            64,
            1000,
        )
        .unwrap()
    }

    #[test]
    fn uplink_template_decodes_as_a_gpdu() {
        let t = ul();
        assert_eq!(t.frame.len(), 14 + 20 + 8 + 16 + 64);
        let f = t.frame(7);
        let d = upf_wire::encap::decapsulate(&f[14..]).unwrap();
        assert_eq!(d.gtpu.teid, 0x1000 + 7);
        let inner = &f[14 + d.inner.start..];
        assert_eq!(&inner[12..16], &[10, 60, 0, 7]);
        assert_eq!(upf_wire::checksum::checksum(&inner[..20]), 0);
        assert_eq!(&f[t.teid.unwrap().0..][..4], &(0x1000u32 + 7).to_be_bytes());
        // Wraps at N.
        assert_eq!(t.frame(1007), f);
    }

    #[test]
    fn plain_template_checksums() {
        let t = Template::plain(
            ([2; 6], [4; 6]),
            Ipv4Addr::new(10, 60, 0, 255),
            Ipv4Addr::new(192, 168, 6, 2),
            true,
            1400,
            1000,
        )
        .unwrap();
        let f = t.frame(3);
        assert_eq!(f.len(), 14 + 1400);
        assert_eq!(&f[14 + 16..14 + 20], &[10, 60, 1, 2]);
        assert_eq!(upf_wire::checksum::checksum(&f[14..34]), 0);
        assert!(Template::plain(
            ([0; 6], [0; 6]),
            t.frame_addr(),
            t.frame_addr(),
            true,
            20,
            1
        )
        .is_err());
    }

    impl Template {
        fn frame_addr(&self) -> Ipv4Addr {
            Ipv4Addr::from(self.addr_base)
        }
    }

    /// Root, for bpf(2).
    fn is_root() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    }

    fn dl() -> Template {
        Template::plain(
            ([2; 6], [4; 6]),
            Ipv4Addr::new(10, 128, 0, 1),
            Ipv4Addr::new(192, 168, 6, 2),
            true,
            64,
            4,
        )
        .unwrap()
    }

    #[test]
    fn classes_interleave_within_every_session() {
        let t = ul().with_high_priority(0.25, Mark::Qfi(1)).unwrap();
        let n = 200_000u64;
        let high = (0..n).filter(|k| t.is_high(*k)).count() as f64 / n as f64;
        assert!((high - 0.25).abs() < 0.005, "{high}");
        for s in 0..20u64 {
            let h = (0..200).filter(|m| t.is_high(s + 1000 * m)).count();
            assert!((20..=80).contains(&h), "session {s}: {h} of 200 high");
        }
        let none = ul().with_high_priority(0.0, Mark::Qfi(1)).unwrap();
        let all = ul().with_high_priority(1.0, Mark::Qfi(1)).unwrap();
        assert!((0..5000).all(|k| !none.is_high(k) && all.is_high(k)));
        assert!(!ul().is_high(0), "no marks: low");
        // The marks land where the specification says.
        let f = t.frame((0..).find(|k| t.is_high(*k)).unwrap());
        assert_eq!(f[t.psc_qfi.unwrap()], 1);
        let d = dl().with_high_priority(0.5, Mark::Dscp(46)).unwrap();
        let k = (0..).find(|k| d.is_high(*k)).unwrap();
        let f = d.frame(k);
        assert_eq!(f[14 + 1], 46 << 2);
        assert_eq!(upf_wire::checksum::checksum(&f[14..34]), 0);
        let w = u32::from_ne_bytes(f[42 + 8..42 + 12].try_into().unwrap());
        assert_eq!(w, STAMP_MAGIC + 1);
        assert!(dl().with_high_priority(0.5, Mark::Qfi(1)).is_err());
        assert!(ul().with_high_priority(1.5, Mark::Qfi(1)).is_err());
        // 40 octets have room for a stamp, 39 not.
        let p = |n| Template::plain(([0; 6], [0; 6]), d.frame_addr(), d.frame_addr(), true, n, 1);
        assert_eq!(p(40).unwrap().stamp, Some(42));
        assert_eq!(p(39).unwrap().stamp, None);
    }

    #[test]
    fn buckets_tile_the_line_finely() {
        let mut prev_hi = 0;
        for b in 0..BUCKETS {
            let (lo, hi) = bucket_bounds(b);
            assert_eq!(
                lo,
                prev_hi,
                "bucket {b} starts where {} ended",
                b.max(1) - 1
            );
            assert_eq!(bucket(lo), b);
            if hi != u64::MAX {
                assert_eq!(bucket(hi - 1), b);
                if lo >= 32 {
                    assert!(
                        (hi - lo) as f64 / lo as f64 <= 1.0 / 32.0 + 1e-12,
                        "bucket {b}"
                    );
                }
            }
            prev_hi = hi;
        }
        assert_eq!(prev_hi, u64::MAX);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(
            (bucket(992), bucket(1_007), bucket(1_008)),
            (bucket(1_000), bucket(1_000), bucket(1_000) + 1)
        );
        assert!(
            bucket(100_000_000) < BUCKETS - 1,
            "100 ms is inside the range"
        );
    }

    #[test]
    fn jitter_follows_rfc3550() {
        // Constant transit: no jitter.
        assert_eq!(jitter_update(0, 5000, 5000), 0);
        // Alternating ±1 µs converges to ~1 µs (J×16 → 16,000).
        let (mut j, mut last) = (0u64, 10_000u64);
        for i in 0..400 {
            let t = if i % 2 == 0 { 11_000 } else { 10_000 };
            j = jitter_update(j, last, t);
            last = t;
        }
        assert!((15_900..=16_100).contains(&j), "{j}");
        // One step of 1,600 ns from zero: J = 100 ns.
        assert_eq!(jitter_update(0, 1000, 2600), 1600);
    }

    #[test]
    fn quantiles_from_buckets() {
        let mut c = ClassLatency {
            buckets: vec![0; BUCKETS],
            ..Default::default()
        };
        for v in (1..=1000u64).map(|i| i * 1000) {
            c.buckets[bucket(v)] += 1;
            c.count += 1;
            c.sum_ns += v;
            c.max_ns = c.max_ns.max(v);
        }
        for (p, want) in [(0.5, 500_000.0), (0.99, 990_000.0), (0.999, 999_000.0)] {
            let q = c.quantile(p).unwrap() as f64;
            assert!((q - want).abs() / want < 0.02, "p{p}: {q} vs {want}");
        }
        assert_eq!(c.quantile(1.0), Some(1_000_000));
        assert_eq!(ClassLatency::default().quantile(0.5), None);
    }

    /// The generator against its specification, through BPF_PROG_TEST_RUN (root only): every
    /// octet but the stamp's clock, which lies between two reads of CLOCK_MONOTONIC.
    #[test]
    #[ignore = "needs root"]
    fn program_matches_the_specification() {
        assert!(is_root(), "needs root");
        const FRAMES: u64 = 2500;
        for t in [
            ul(),
            ul().with_high_priority(0.5, Mark::Qfi(1)).unwrap(),
            dl().with_high_priority(0.3, Mark::Dscp(46)).unwrap(),
        ] {
            let g = Generator::new(t.clone()).unwrap();
            let mut classes = [0; 2];
            // More frames than sessions (1,000 for the uplink): the index wraps.
            for k in 0..FRAMES {
                let t0 = sys::monotonic_ns();
                let (verdict, mut out) = g.test_once().unwrap();
                let t1 = sys::monotonic_ns();
                assert_eq!(verdict, XDP_TX as u32);
                let r = t.stamp_time().unwrap();
                let ts = u64::from_ne_bytes(out[r.clone()].try_into().unwrap());
                assert!(
                    (t0..=t1).contains(&ts),
                    "frame {k}: stamp {ts} not in {t0}..={t1}"
                );
                out[r].fill(0);
                assert_eq!(out, t.frame(k), "frame {k}");
                classes[usize::from(t.is_high(k))] += 1;
            }
            if t.high.is_some() {
                assert!(classes[0] > 0 && classes[1] > 0, "{classes:?}");
            }
            g.reset().unwrap();
            let mut out = g.test_once().unwrap().1;
            out[t.stamp_time().unwrap()].fill(0);
            assert_eq!(out, t.frame(0));
            assert_eq!(g.sent().unwrap(), FRAMES + 1);
            // Paced at 1 frame/s: the first run sends frame 1, the next ones are early and
            // change nothing; unpaced again, frame 2.
            g.set_rate(1).unwrap();
            for (i, want) in [XDP_TX, XDP_DROP, XDP_DROP].into_iter().enumerate() {
                let (verdict, mut out) = g.test_once().unwrap();
                assert_eq!(verdict, want.cast_unsigned(), "paced run {i}");
                if want == XDP_TX {
                    out[t.stamp_time().unwrap()].fill(0);
                    assert_eq!(out, t.frame(1));
                }
            }
            assert_eq!(g.sent().unwrap(), FRAMES + 2);
            g.set_rate(0).unwrap();
            let mut out = g.test_once().unwrap().1;
            out[t.stamp_time().unwrap()].fill(0);
            assert_eq!(out, t.frame(2));
        }
    }

    const UE0: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 1);

    /// A frame the sink counts: plain IPv4/UDP to UE0 + session (port 5001), or that packet
    /// in a G-PDU with a downlink PDU Session Container carrying `qfi`; stamped with `ts` and
    /// the class word `word`.
    fn stamped(session: u32, gtp_qfi: Option<u8>, word: u32, ts: u64) -> Vec<u8> {
        let ue = Ipv4Addr::from(u32::from(UE0) + session);
        let t = Template::plain(
            ([2; 6], [4; 6]),
            ue,
            Ipv4Addr::new(192, 168, 6, 2),
            true,
            64,
            1,
        )
        .unwrap();
        let mut f = t.frame(0);
        f[42..50].copy_from_slice(&ts.to_ne_bytes());
        f[50..54].copy_from_slice(&word.to_ne_bytes());
        let Some(qfi) = gtp_qfi else { return f };
        let inner = &f[14..];
        let mut g = ethernet([2; 6], [4; 6]);
        let n = 20 + 8 + 16 + inner.len();
        g.extend_from_slice(&ipv4_header(
            n,
            64,
            Ipv4Addr::new(192, 168, 3, 1),
            Ipv4Addr::new(192, 168, 3, 2),
        ));
        g.extend_from_slice(&udp_header(GTPU_PORT, GTPU_PORT, n - 20));
        g.extend_from_slice(&[0x34, 0xff]);
        g.extend_from_slice(&u16::try_from(8 + inner.len()).unwrap().to_be_bytes());
        g.extend_from_slice(&0x0100_0001u32.to_be_bytes());
        g.extend_from_slice(&[0, 0, 0, 0x85, 1, 0x00, qfi, 0]);
        g.extend_from_slice(inner);
        g
    }

    /// The sink against its specification (root only): each frame's transit is read back
    /// from the class's sum; histograms, maxima, mismatches and every flow's jitter must be
    /// what `bucket` and `jitter_update` make of those transits.
    #[test]
    #[ignore = "needs root"]
    fn sink_matches_the_specification() {
        assert!(is_root(), "needs root");
        let cfg = LatencyConfig {
            ue_base: UE0,
            sessions: 4,
            ue_is_dst: true,
            qfi: Some((9, 1)),
        };
        let c = Counter::load(&[GTPU_PORT, DST_PORT], Some(cfg), None).unwrap();
        let run = |f: &[u8]| {
            let prog = xdp(&c.ebpf, SINK_PROGRAM).unwrap();
            let r = bpf::run(prog, f, &mut [], 1, None).unwrap();
            assert_eq!(r.retval, XDP_DROP as u32);
        };
        let magic = |class: u32| STAMP_MAGIC + class;
        let mut want = [
            ClassLatency {
                buckets: vec![0; BUCKETS],
                ..Default::default()
            },
            ClassLatency {
                buckets: vec![0; BUCKETS],
                ..Default::default()
            },
        ];
        // (session, class) → (last transit, J×16, packets)
        let mut flows: std::collections::BTreeMap<(u32, usize), (u64, u64, u32)> =
            Default::default();
        let frames: [(u32, Option<u8>, usize, u64); 7] = [
            (2, Some(1), 1, 1_000_000),
            (2, Some(1), 1, 3_000_000),
            (2, Some(1), 1, 2_000),
            (3, Some(1), 0, 10_000),
            (1, None, 0, 50_000),
            (1, None, 0, 40_000),
            (7, Some(9), 0, 70_000),
        ];
        for (session, qfi, class, age) in frames {
            let before = c.latency().unwrap().unwrap();
            let t0 = sys::monotonic_ns();
            run(&stamped(
                session,
                qfi,
                magic(u32::try_from(class).unwrap()),
                t0 - age,
            ));
            let t1 = sys::monotonic_ns();
            let after = c.latency().unwrap().unwrap();
            let transit = after.classes[class].sum_ns - before.classes[class].sum_ns;
            assert!(
                (age..=age + (t1 - t0)).contains(&transit),
                "{transit} vs {age}"
            );
            let w = &mut want[class];
            w.count += 1;
            w.sum_ns += transit;
            w.max_ns = w.max_ns.max(transit);
            w.buckets[bucket(transit)] += 1;
            if qfi.is_some_and(|q| q != [9, 1][class]) {
                w.qfi_mismatch += 1;
            }
            if session < cfg.sessions {
                flows
                    .entry((session, class))
                    .and_modify(|(last, j, n)| {
                        *j = jitter_update(*j, *last, transit);
                        *last = transit;
                        *n += 1;
                    })
                    .or_insert((transit, 0, 1));
            }
        }
        // Not stamps the sink understands: counted, not measured.
        let t0 = sys::monotonic_ns();
        run(&stamped(2, Some(1), magic(2), t0));
        run(&stamped(2, Some(1), 0, t0));
        // A stamp from the future.
        run(&stamped(2, Some(1), magic(1), t0 + 10_000_000_000));
        let got = c.latency().unwrap().unwrap();
        assert_eq!(got.classes, want);
        assert_eq!(got.classes[0].qfi_mismatch, 1);
        assert_eq!(got.negative, 1);
        assert_eq!(c.read().unwrap().packets, 10);
        let want_flows: Vec<(u32, usize, f64, u32)> = flows
            .iter()
            .filter(|(_, v)| v.2 >= 2)
            .map(|(&(s, cl), &(_, j, n))| (s, cl, j as f64 / 16.0, n))
            .collect();
        assert_eq!(c.flows().unwrap(), want_flows);
        assert_eq!(want_flows.len(), 2, "session 2 high, session 1 low");
        // A reset empties the histograms and starts every flow over.
        c.reset_latency().unwrap();
        run(&stamped(2, Some(1), magic(1), sys::monotonic_ns()));
        let got = c.latency().unwrap().unwrap();
        assert_eq!(got.classes[1].count, 1);
        assert!(c.flows().unwrap().is_empty());
    }

    /// The sink against its specification on thousands of random frames (root only): plain
    /// and G-PDU, both classes, stamps it must ignore, sessions beyond the configured ones,
    /// QFIs right and wrong, stamps from the future, ports it does not count.
    #[test]
    #[ignore = "needs root"]
    fn sink_matches_the_specification_on_random_frames() {
        assert!(is_root(), "needs root");
        let cfg = LatencyConfig {
            ue_base: UE0,
            sessions: 5,
            ue_is_dst: true,
            qfi: Some((9, 1)),
        };
        let c = Counter::load(&[GTPU_PORT, DST_PORT], Some(cfg), None).unwrap();
        let prog = xdp(&c.ebpf, SINK_PROGRAM).unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut want: [ClassLatency; 2] = Default::default();
        for w in &mut want {
            w.buckets = vec![0; BUCKETS];
        }
        let mut flows: std::collections::BTreeMap<(u32, usize), (u64, u64, u32)> =
            Default::default();
        let (mut negative, mut counted) = (0u64, 0u64);
        for _ in 0..3000 {
            let session = u32::try_from(next() % 7).unwrap();
            let qfi = [None, Some(1), Some(9), Some(5)][usize::try_from(next() % 4).unwrap()];
            let word_class = next() % 5;
            let word = match word_class {
                0 | 1 => STAMP_MAGIC + u32::try_from(word_class).unwrap(),
                2 => STAMP_MAGIC + 1,
                3 => STAMP_MAGIC + 2,
                _ => u32::try_from(next() >> 32).unwrap(),
            };
            let age = (1u64 << (next() % 30)) + next() % 1000;
            let future = next() % 50 == 0;
            let t0 = sys::monotonic_ns();
            let ts = if future {
                t0 + 10_000_000_000
            } else {
                t0 - age
            };
            let mut f = stamped(session, qfi, word, ts);
            let other_port = next() % 20 == 0;
            if other_port {
                // The UDP destination port of the outer (or only) header.
                f[36..38].copy_from_slice(&7777u16.to_be_bytes());
            }
            let before = c.latency().unwrap().unwrap();
            let r = bpf::run(prog, &f, &mut [], 1, None).unwrap();
            let after = c.latency().unwrap().unwrap();
            if other_port {
                assert_eq!(r.retval, XDP_PASS as u32);
                assert_eq!(after, before);
                continue;
            }
            assert_eq!(r.retval, XDP_DROP as u32);
            counted += 1;
            let class = word.wrapping_sub(STAMP_MAGIC);
            if class > 1 {
                assert_eq!(after, before, "not a stamp");
                continue;
            }
            let class = usize::try_from(class).unwrap();
            let w = &mut want[class];
            if qfi.is_some_and(|q| q != [9, 1][class]) {
                w.qfi_mismatch += 1;
            }
            if future {
                negative += 1;
                continue;
            }
            let transit = after.classes[class].sum_ns - before.classes[class].sum_ns;
            assert!(transit >= age, "{transit} < {age}");
            w.count += 1;
            w.sum_ns += transit;
            w.max_ns = w.max_ns.max(transit);
            w.buckets[bucket(transit)] += 1;
            if session < cfg.sessions {
                flows
                    .entry((session, class))
                    .and_modify(|(last, j, n)| {
                        *j = jitter_update(*j, *last, transit);
                        *last = transit;
                        *n += 1;
                    })
                    .or_insert((transit, 0, 1));
            }
        }
        let got = c.latency().unwrap().unwrap();
        assert_eq!(got.classes, want);
        assert_eq!(got.negative, negative);
        assert_eq!(c.read().unwrap().packets, counted);
        let want_flows: Vec<(u32, usize, f64, u32)> = flows
            .iter()
            .filter(|(_, v)| v.2 >= 2)
            .map(|(&(s, cl), &(_, j, n))| (s, cl, j as f64 / 16.0, n))
            .collect();
        assert_eq!(c.flows().unwrap(), want_flows);
        assert!(want_flows.len() >= 8, "{want_flows:?}");
        assert!(want[0].count > 300 && want[1].count > 300, "{want:?}");
    }
}
