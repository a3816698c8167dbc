//! The generator: its program (`bpf/gen.bpf.c`) loaded for a template, run with live frames.

use super::object::{load_xdp, u64_at, xdp, ArrayMap};
use super::template::{Mark, Template};
use super::STAMP_LEN;
use crate::sys;
use aya::{Ebpf, EbpfLoader};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use upf_io::bpf::{self, LiveFrames};

static GEN_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gen.bpf.o"));
/// Template header octets the generator program holds at most.
pub const MAX_HEADER: usize = 128;

impl Template {
    /// The generator program's globals for this template (see `bpf/gen.bpf.c`): an error when
    /// the headers are longer than [`MAX_HEADER`] or an offset lies outside the frame.
    fn globals(&self) -> io::Result<GenGlobals> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if self.header_len > MAX_HEADER || self.header_len > self.frame.len() {
            return Err(bad(format!(
                "template headers of {} octets: at most {MAX_HEADER} and the frame's",
                self.header_len
            )));
        }
        let mut octets = [0u8; MAX_HEADER];
        octets[..self.header_len].copy_from_slice(&self.frame[..self.header_len]);
        let mut hdr = [0u64; MAX_HEADER / 8];
        for (w, c) in hdr.iter_mut().zip(octets.chunks_exact(8)) {
            *w = u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
        }
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
                (1, o, u64::from(q), 0, thr)
            }
            Some((Mark::Dscp(d), thr)) => {
                let tos = d << 2;
                let delta = i64::from(tos) - i64::from(self.frame[self.ip + 1]);
                (2, self.ip + 1, u64::from(tos), delta.cast_unsigned(), thr)
            }
        };
        let (teid_off, teid_base) = self.teid.unwrap_or((0, 0));
        let offset = |v: usize| u64::try_from(v).map_err(|_| bad(format!("offset {v}")));
        // In the order of the CFG_ names of bpf/gen.bpf.c.
        let cfg = [
            offset(self.header_len)?,
            offset(need)?,
            u64::from(self.count.max(1)),
            offset(self.ip)?,
            offset(self.addr_off)?,
            u64::from(self.addr_base),
            u64::from(self.teid.is_some()),
            offset(teid_off)?,
            u64::from(teid_base),
            u64::from(self.partial_sum()),
            mark,
            offset(mark_off)?,
            mark_val,
            mark_csum,
            threshold,
            u64::from(self.stamp.is_some()),
            offset(self.stamp.unwrap_or(0))?,
        ];
        Ok(GenGlobals { cfg, hdr })
    }
}

/// The generator program's read-only globals (`bpf/gen.bpf.c`): the template's numbers and
/// its header octets (native-order words).
#[derive(Debug)]
struct GenGlobals {
    cfg: [u64; 17],
    hdr: [u64; MAX_HEADER / 8],
}

impl GenGlobals {
    fn load(&self) -> io::Result<Ebpf> {
        EbpfLoader::new()
            .override_global("cfg", &self.cfg, true)
            .override_global("hdr", &self.hdr, true)
            .load(GEN_OBJECT)
            .map_err(|e| bpf::error("loading the generator object", &e))
    }
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

/// Octets of the generator's state (`struct gen_state` of `bpf/gen.bpf.c`, its .bss): the session index
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
        let state = ArrayMap::take(&mut ebpf, ".bss")?;
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
    /// A BPF_PROG_RUN call sets up and tears down its live frames, sending nothing meanwhile,
    /// so there is one call, as long as it takes: a helper thread interrupts it with
    /// [`WAKE_SIGNAL`] at the deadline (the kernel's loop stops on a pending signal). Paced, the program drops the runs before their frame is
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
        let over = || Instant::now() >= deadline || stop.load(Ordering::Relaxed);
        let r = sys::with_interrupts(WAKE_SIGNAL, over, || loop {
            if over() {
                break Ok(());
            }
            match bpf::run(prog, frame, &mut [], u32::MAX, live) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
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
    upf_netns::in_netns(netns, || {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdpgen::testutil::{dl, ul};
    use crate::xdpgen::{XDP_DROP, XDP_TX};
    use upf_netns::is_root;

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
}
