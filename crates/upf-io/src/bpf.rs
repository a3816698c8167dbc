//! What the crates share about BPF programs: loading an object built from `bpf/*.bpf.c` with
//! aya, errors that keep the kernel's errno and say what was being done, and [`run`], the one
//! way to run a loaded program with BPF_PROG_RUN (tests against the Rust references, and the
//! load generator's live frames).

use aya::programs::{TestRun, TestRunAttrs, TestRunOptions, TestRunResult};
use std::io;
use std::time::Duration;

/// The errno at the bottom of an aya error (or of any error with `io::Error` sources).
pub fn errno(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(e);
    while let Some(s) = cur {
        if let Some(n) = s
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
        {
            return Some(n);
        }
        cur = s.source();
    }
    None
}

/// An `io::Error` saying what was being done, with every cause of `e` (a verifier refusal
/// ends with the last lines of the verifier's log) and the kind of its errno.
pub fn error(what: &str, e: &(dyn std::error::Error + 'static)) -> io::Error {
    let mut msg = format!("{what}: {e}");
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !msg.contains(&t) {
            msg.push_str(": ");
            msg.push_str(&t);
        }
        cur = s.source();
    }
    // A verifier log can be long: its end says why.
    let lines: Vec<&str> = msg.lines().collect();
    if lines.len() > 40 {
        msg = format!("{}\n…\n{}", lines[0], lines[lines.len() - 30..].join("\n"));
    }
    let n = errno(e);
    let hint = match n {
        Some(libc::EPERM) | Some(libc::EACCES) if !msg.contains("Verifier output") => {
            " (needs root: CAP_BPF, CAP_NET_ADMIN)"
        }
        Some(libc::ENODEV) => " (no such interface)",
        Some(libc::EBUSY) => " (another XDP program is attached)",
        _ => "",
    };
    let kind = n.map_or(io::ErrorKind::Other, |n| {
        io::Error::from_raw_os_error(n).kind()
    });
    io::Error::new(kind, format!("{msg}{hint}"))
}

/// Frames that BPF_PROG_RUN makes live: XDP_TX and XDP_REDIRECT really send them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveFrames {
    /// The interface they arrive on (queue 0), in the calling thread's network namespace.
    pub ifindex: u32,
    /// Frames per flush (1..=256).
    pub batch: u32,
}

/// What one [`run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunResult {
    /// The program's return value (of the last run).
    pub retval: u32,
    /// Mean time per run, as the kernel measured it.
    pub duration: Duration,
    /// Octets of the packet written to the output slice (never more than its length).
    pub out_len: usize,
}

/// Runs a loaded program (socket filter, XDP, …) `repeat` times on `input` with
/// BPF_PROG_RUN. The packet as the program left it (for XDP: from its metadata on) goes to
/// `output` (empty: not asked for; a packet longer than `output` is an error, ENOSPC).
/// With `live`, XDP frames are made from `input` and really sent or redirected (the kernel
/// recycles their pages: the program sees whatever the previous frame left there); there is no
/// output then. A pending signal ends a long run with `ErrorKind::Interrupted`.
pub fn run<P>(
    prog: &P,
    input: &[u8],
    output: &mut [u8],
    repeat: u32,
    live: Option<LiveFrames>,
) -> io::Result<RunResult>
where
    P: for<'a> TestRun<Opts<'a> = TestRunOptions<'a>, Result = TestRunResult>,
{
    let out_cap = output.len();
    let mut opts = TestRunOptions {
        data_in: Some(input),
        repeat: repeat.max(1),
        ..TestRunOptions::new()
    };
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
    // egress_ifindex (native order).
    let mut ctx = [0u8; 24];
    if let Some(l) = live {
        if out_cap > 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "BPF_PROG_RUN: live frames have no output",
            ));
        }
        let len = u32::try_from(input.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too long"))?;
        ctx[4..8].copy_from_slice(&len.to_ne_bytes());
        ctx[12..16].copy_from_slice(&l.ifindex.to_ne_bytes());
        opts.ctx_in = Some(&ctx);
        opts.attrs = TestRunAttrs::new().xdp_live_frames(l.batch.clamp(1, 256));
    } else if out_cap > 0 {
        opts.data_out = Some(output);
    }
    let r = prog.test_run(opts).map_err(|e| error("BPF_PROG_RUN", &e))?;
    Ok(RunResult {
        retval: r.return_value,
        duration: r.duration,
        out_len: usize::try_from(r.data_size_out).map_or(out_cap, |n| n.min(out_cap)),
    })
}
