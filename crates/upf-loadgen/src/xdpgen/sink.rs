//! The counting sink: its program (`bpf/sink.bpf.c`) attached to an interface, and what its
//! maps hold.

use super::object::{load_xdp, u32_at, u64_at, ArrayMap};
use super::stats::{ClassLatency, Count, JitterSummary, Latency, BUCKETS};
use crate::sys;
use aya::programs::XdpMode;
use aya::{Ebpf, EbpfLoader};
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use upf_io::bpf;

static SINK_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sink.bpf.o"));
/// Destination ports the sink counts at most.
pub const MAX_PORTS: usize = 8;

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

/// What the sink measures beside counting; each costs per packet only when asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measures {
    /// Latency and jitter per class.
    pub latency: Option<LatencyConfig>,
    /// The longest gap between two consecutive counted arrivals ([`Counter::max_gap_ns`]).
    pub gap: bool,
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
// The gap map: last arrival u64, longest gap u64 (ns).
const GAP_BYTES: usize = 16;

/// The counting sink: counts and drops IPv4 UDP packets to the given ports on one interface,
/// and measures their latency if asked; detached when dropped (a BPF link).
#[derive(Debug)]
pub struct Counter {
    counts: ArrayMap<16>,
    latency: Option<SinkLatency>,
    gap: Option<ArrayMap<GAP_BYTES>>,
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

impl Counter {
    /// Attaches to interface `dev` of the calling thread's network namespace (native XDP).
    pub fn attach(dev: &str, ports: &[u16]) -> io::Result<Counter> {
        Counter::attach_with(dev, ports, Measures::default())
    }

    /// Attaches, measuring what `m` asks for.
    pub fn attach_with(dev: &str, ports: &[u16], m: Measures) -> io::Result<Counter> {
        let ifindex = sys::ifindex(dev)?;
        Counter::load(ports, m, Some((ifindex, dev)))
    }

    /// Loads the program and its maps and attaches it to `attach` (ifindex, name; tests: none).
    fn load(ports: &[u16], m: Measures, attach: Option<(u32, &str)>) -> io::Result<Counter> {
        let latency = m.latency;
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
            .override_global("gap", &u32::from(m.gap), true)
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
        let gap = if m.gap {
            Some(ArrayMap::take(&mut ebpf, "gaps")?)
        } else {
            None
        };
        let c = Counter {
            counts,
            latency,
            gap,
            generation: std::sync::atomic::AtomicU32::new(0),
            ebpf,
        };
        c.reset_latency()?;
        Ok(c)
    }

    /// Attaches inside network namespace `netns`.
    pub fn attach_in(netns: &str, dev: &str, ports: &[u16]) -> io::Result<Counter> {
        upf_netns::in_netns(netns, || Counter::attach(dev, ports))?
    }

    /// Attaches inside network namespace `netns`, measuring what `m` asks for.
    pub fn attach_in_with(
        netns: &str,
        dev: &str,
        ports: &[u16],
        m: Measures,
    ) -> io::Result<Counter> {
        upf_netns::in_netns(netns, || Counter::attach_with(dev, ports, m))?
    }

    pub fn read(&self) -> io::Result<Count> {
        let v = self.counts.get(0)?;
        Ok(Count {
            packets: u64_at(&v, 0),
            octets: u64_at(&v, 8),
        })
    }

    /// Forgets the last arrival and the longest gap: the next arrival starts over. Call it
    /// while no packets arrive.
    pub fn reset_gap(&self) -> io::Result<()> {
        match &self.gap {
            Some(g) => g.set(0, &[0; GAP_BYTES]),
            None => Ok(()),
        }
    }

    /// The longest gap between two consecutive counted arrivals since the last reset, ns
    /// (0: fewer than two arrivals; `None`: not measuring gaps).
    pub fn max_gap_ns(&self) -> io::Result<Option<u64>> {
        match &self.gap {
            Some(g) => Ok(Some(u64_at(&g.get(0)?, 8))),
            None => Ok(None),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdpgen::object::xdp;
    use crate::xdpgen::stats::{bucket, jitter_update};
    use crate::xdpgen::template::{ethernet, ipv4_header, udp_header};
    use crate::xdpgen::{Template, DST_PORT, GTPU_PORT, STAMP_MAGIC, XDP_DROP, XDP_PASS};
    use upf_netns::is_root;

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
        let c = Counter::load(
            &[GTPU_PORT, DST_PORT],
            Measures {
                latency: Some(cfg),
                gap: false,
            },
            None,
        )
        .unwrap();
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

    /// The gap measure (root only): the longest time between two consecutive counted
    /// arrivals lies between what clock reads around the runs allow; frames to other ports
    /// are not arrivals; a reset starts over; off, there is none.
    #[test]
    #[ignore = "needs root"]
    fn sink_measures_the_longest_gap() {
        assert!(is_root(), "needs root");
        let m = Measures {
            latency: None,
            gap: true,
        };
        let c = Counter::load(&[DST_PORT], m, None).unwrap();
        let prog = xdp(&c.ebpf, SINK_PROGRAM).unwrap();
        let counted = stamped(0, None, STAMP_MAGIC, 0);
        let mut other = counted.clone();
        other[36..38].copy_from_slice(&7777u16.to_be_bytes());
        // (before, after) each counted run, clock reads.
        let run = |f: &[u8]| {
            let t0 = sys::monotonic_ns();
            let r = bpf::run(prog, f, &mut [], 1, None).unwrap();
            (t0, sys::monotonic_ns(), r.retval)
        };
        assert_eq!(c.max_gap_ns().unwrap(), Some(0));
        let mut times = Vec::new();
        for pause_us in [0u64, 3000, 200, 0, 1500] {
            std::thread::sleep(std::time::Duration::from_micros(pause_us));
            // Not an arrival: ends no gap, starts none.
            assert_eq!(run(&other).2, XDP_PASS as u32);
            let (t0, t1, v) = run(&counted);
            assert_eq!(v, XDP_DROP as u32);
            times.push((t0, t1));
            if times.len() == 1 {
                assert_eq!(c.max_gap_ns().unwrap(), Some(0), "one arrival, no gap");
            }
        }
        let lo = times.windows(2).map(|w| w[1].0 - w[0].1).max().unwrap();
        let hi = times.windows(2).map(|w| w[1].1 - w[0].0).max().unwrap();
        let got = c.max_gap_ns().unwrap().unwrap();
        assert!((lo..=hi).contains(&got), "{lo} <= {got} <= {hi}");
        assert!(got >= 3_000_000, "the 3 ms pause: {got}");
        c.reset_gap().unwrap();
        let (a0, a1, _) = run(&counted);
        assert_eq!(c.max_gap_ns().unwrap(), Some(0), "starts over");
        let (b0, b1, _) = run(&counted);
        let got = c.max_gap_ns().unwrap().unwrap();
        assert!((b0 - a1..=b1 - a0).contains(&got), "{got}");
        assert_eq!(c.read().unwrap().packets, 7);
        // Off: no map, no measure.
        let off = Counter::load(&[DST_PORT], Measures::default(), None).unwrap();
        assert_eq!(off.max_gap_ns().unwrap(), None);
        off.reset_gap().unwrap();
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
        let c = Counter::load(
            &[GTPU_PORT, DST_PORT],
            Measures {
                latency: Some(cfg),
                gap: false,
            },
            None,
        )
        .unwrap();
        let prog = xdp(&c.ebpf, SINK_PROGRAM).unwrap();
        let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(7);
        let mut next = move || rand::Rng::next_u64(&mut rng);
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
