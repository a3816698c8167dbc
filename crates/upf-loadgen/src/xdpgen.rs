//! A generator fast enough not to be the bottleneck on veth, and a counting sink.
//!
//! [`Generator`]: `BPF_PROG_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` runs an XDP program on
//! frames made from a template, as if they arrived on a veth; the program returns XDP_TX, so
//! the kernel sends each frame out of that veth to its peer (4–8 Mpps from one core, where an
//! AF_PACKET sender makes ~1). Live frames come from a page pool and are recycled, and the
//! receiver may have changed them (the kernel decrements the TTL when it forwards), so the
//! program rewrites every header octet from immediates on every frame, then the per-frame
//! fields from a counter kept in an array map: frame k carries session `k mod N`: its IPv4
//! address (`addr_base + i`, source or destination, with the header checksum recomputed) and
//! its GTP-U TEID (`teid_base + i`). The peer veth needs an XDP program (or GRO on) to accept
//! redirected frames.
//!
//! [`Counter`]: an XDP program that counts (packets, octets) the IPv4 UDP packets to the ports
//! given, atomically in an array map, and drops them; everything else (ARP, ICMP, …) passes,
//! so the kernel behind it keeps resolving neighbours. Count at the receiver: a sender's own
//! count says nothing about what arrived.
#![forbid(unsafe_code)]

use crate::sys;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use upf_io::af_xdp::bpf::{self, Asm, Insn, ADD, AND, B, DW, H, JGT, JNE, R0, R1, R2};
use upf_io::af_xdp::bpf::{R3, R4, R5, R6, R7, R8, RSH, W, XOR};

pub const XDP_DROP: i32 = 1;
pub const XDP_PASS: i32 = 2;
pub const XDP_TX: i32 = 3;
pub const GTPU_PORT: u16 = 2152;
/// Inner UDP ports of the generated packets.
pub const SRC_PORT: u16 = 5000;
pub const DST_PORT: u16 = 5001;
/// Largest inner packet a live frame holds comfortably (a 4 KiB page less headroom and
/// skb_shared_info).
pub const MAX_INNER: usize = 3000;

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
        let ip = f.len();
        inner(&mut f, size, ue_base, dn);
        Ok(Template {
            header_len: ip + 28,
            ip,
            addr_off: ip + 12,
            addr_base: u32::from(ue_base),
            teid: Some((teid_off, teid_base)),
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
            count: count.max(1),
            frame: f,
        })
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

    /// The XDP program: rewrite the headers, then the session's fields, XDP_TX. `state` is
    /// an array map of one 8-octet value: the session index of the next frame.
    pub fn program(&self, state: &OwnedFd) -> io::Result<Vec<Insn>> {
        let mut a = Asm::new();
        let drop = a.new_label();
        a.mov_reg(R6, R1);
        a.ldx(W, R2, R6, 0);
        a.ldx(W, R3, R6, 4);
        a.mov_reg(R4, R2);
        a.alu(
            ADD,
            R4,
            i32::try_from(self.header_len).map_err(io::Error::other)?,
        );
        a.jmp_reg(JGT, R4, R3, drop);
        // Every header octet, from immediates.
        let h = &self.frame[..self.header_len];
        let mut off = 0;
        while off < h.len() {
            let o = i16::try_from(off).map_err(io::Error::other)?;
            let rest = h.len() - off;
            if rest >= 8 {
                let v = u64::from_le_bytes(h[off..off + 8].try_into().unwrap_or([0; 8]));
                a.ld_imm64(R1, v);
                a.stx(DW, R2, o, R1);
                off += 8;
            } else if rest >= 4 {
                let v = u32::from_le_bytes(h[off..off + 4].try_into().unwrap_or([0; 4]));
                a.ld_imm64(R1, u64::from(v));
                a.stx(W, R2, o, R1);
                off += 4;
            } else if rest >= 2 {
                a.st(
                    H,
                    R2,
                    o,
                    i32::from(u16::from_le_bytes([h[off], h[off + 1]])),
                );
                off += 2;
            } else {
                a.st(B, R2, o, i32::from(h[off]));
                off += 1;
            }
        }
        // r8 = this frame's session index; the next one's back into the map.
        a.ld_map_value(R7, state.as_raw_fd(), 0);
        a.ldx(W, R8, R7, 0);
        let keep = a.new_label();
        a.mov_reg(R1, R8);
        a.alu(ADD, R1, 1);
        a.ld_imm64(R4, u64::from(self.count));
        a.jmp_reg(bpf::JLT, R1, R4, keep);
        a.mov(R1, 0);
        a.label(keep);
        a.stx(W, R7, 0, R1);
        if let Some((toff, base)) = self.teid {
            a.ld_imm64(R4, u64::from(base));
            a.mov_reg(R1, R8);
            a.alu_reg(ADD, R1, R4);
            a.be(R1, 32);
            a.stx(W, R2, i16::try_from(toff).map_err(io::Error::other)?, R1);
        }
        a.ld_imm64(R4, u64::from(self.addr_base));
        a.mov_reg(R1, R8);
        a.alu_reg(ADD, R1, R4);
        // 32-bit wrap, like the specification.
        a.ld_imm64(R4, 0xffff_ffff);
        a.alu_reg(AND, R1, R4);
        a.mov_reg(R5, R1);
        a.be(R5, 32);
        a.stx(
            W,
            R2,
            i16::try_from(self.addr_off).map_err(io::Error::other)?,
            R5,
        );
        // Header checksum: the fixed words' sum plus the address's halves, folded, inverted.
        a.mov_reg(R4, R1);
        a.alu(RSH, R4, 16);
        a.alu(AND, R1, 0xffff);
        a.alu_reg(ADD, R1, R4);
        a.alu(
            ADD,
            R1,
            i32::try_from(self.partial_sum()).map_err(io::Error::other)?,
        );
        for _ in 0..2 {
            a.mov_reg(R4, R1);
            a.alu(RSH, R4, 16);
            a.alu(AND, R1, 0xffff);
            a.alu_reg(ADD, R1, R4);
        }
        a.alu(XOR, R1, 0xffff);
        a.be(R1, 16);
        a.stx(
            H,
            R2,
            i16::try_from(self.ip + 10).map_err(io::Error::other)?,
            R1,
        );
        a.mov(R0, XDP_TX);
        a.exit();
        a.label(drop);
        a.mov(R0, XDP_DROP);
        a.exit();
        a.finish()
    }
}

/// A loaded generator: program, state map and template.
#[derive(Debug)]
pub struct Generator {
    template: Template,
    state: OwnedFd,
    prog: OwnedFd,
}

/// What one run sent.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GenStats {
    /// Frames the program ran on (each one XDP_TX'd; the veth may still drop some when its
    /// peer's ring is full: count at the receiver).
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
        let state = bpf::create_array(8, 1, "upfgen_state")?;
        let prog = bpf::load_xdp(&template.program(&state)?, "upf_gen")?;
        Ok(Generator {
            template,
            state,
            prog,
        })
    }

    pub fn template(&self) -> &Template {
        &self.template
    }

    /// The loaded program (a caller may keep it attached somewhere, see `run`).
    pub fn program_fd(&self) -> &OwnedFd {
        &self.prog
    }

    /// Runs the program once on the template through BPF_PROG_TEST_RUN (no live frames):
    /// the verdict and the frame it made (for tests).
    pub fn test_once(&self) -> io::Result<(u32, Vec<u8>)> {
        bpf::test_run(&self.prog, &self.template.frame)
    }

    /// Sends frames out of interface `dev` of the calling thread's network namespace for
    /// `seconds`: `rate` frames/s (0: as fast as it goes), until `stop`. Pin the thread first.
    pub fn run(
        &self,
        dev: &str,
        seconds: f64,
        rate: u64,
        stop: &AtomicBool,
    ) -> io::Result<GenStats> {
        let ifindex = sys::ifindex(dev)?;
        let frame = &self.template.frame;
        let cpu0 = thread_cpu();
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(seconds.max(0.0));
        let mut sent = 0u64;
        // Flat out: 64k frames a call (~10–20 ms); paced: up to 1 ms of frames a call.
        let chunk = if rate == 0 {
            1 << 16
        } else {
            (rate / 1000).clamp(1, 1 << 16)
        };
        loop {
            let now = Instant::now();
            if now >= deadline || stop.load(Ordering::Relaxed) {
                break;
            }
            let mut n = chunk;
            if rate > 0 {
                let due = (now - start).as_secs_f64() * rate as f64;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let due = due as u64;
                if due <= sent {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                n = n.min(due - sent);
            }
            let n32 = u32::try_from(n).unwrap_or(u32::MAX);
            bpf::test_run_live(&self.prog, frame, ifindex, n32, 64)?;
            sent += u64::from(n32);
        }
        Ok(GenStats {
            frames: sent,
            elapsed: start.elapsed(),
            cpu: thread_cpu().saturating_sub(cpu0),
        })
    }

    /// Sets the session index of the next frame.
    pub fn reset(&self) -> io::Result<()> {
        bpf::map_update_u64(&self.state, 0, 0)
    }
}

/// Runs `g` on a new thread inside network namespace `netns`, pinned to `cpu`, out of `dev`.
pub fn run_in(
    g: &Generator,
    netns: &str,
    cpu: Option<usize>,
    dev: &str,
    seconds: f64,
    rate: u64,
    stop: &AtomicBool,
) -> io::Result<GenStats> {
    crate::in_netns(netns, || {
        if let Some(c) = cpu {
            sys::pin_to_cpu(c).map_err(|e| io::Error::new(e.kind(), format!("CPU {c}: {e}")))?;
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

/// The counting sink: counts and drops IPv4 UDP packets to the given ports on one interface;
/// detached when dropped (a BPF link).
#[derive(Debug)]
pub struct Counter {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
}

/// The counting program (see [`Counter`]); `map` holds one value: packets, octets (u64 each).
pub fn counter_program(map: &OwnedFd, ports: &[u16]) -> io::Result<Vec<Insn>> {
    let mut a = Asm::new();
    let pass = a.new_label();
    let count = a.new_label();
    a.ldx(W, R2, R1, 0);
    a.ldx(W, R3, R1, 4);
    a.mov_reg(R4, R2);
    a.alu(ADD, R4, 42);
    a.jmp_reg(JGT, R4, R3, pass);
    // Octets as loaded from the wire, little-endian: 08 00 is 0x0008.
    a.ldx(H, R4, R2, 12);
    a.jmp(JNE, R4, 0x0008, pass);
    a.ldx(B, R4, R2, 14);
    a.jmp(JNE, R4, 0x45, pass);
    a.ldx(B, R4, R2, 23);
    a.jmp(JNE, R4, 17, pass);
    a.ldx(H, R4, R2, 36);
    for p in ports {
        a.jmp(bpf::JEQ, R4, i32::from(p.swap_bytes()), count);
    }
    a.label(pass);
    a.mov(R0, XDP_PASS);
    a.exit();
    a.label(count);
    a.mov_reg(R5, R3);
    a.alu_reg(bpf::SUB, R5, R2);
    a.ld_map_value(R7, map.as_raw_fd(), 0);
    a.mov(R1, 1);
    a.atomic_add(DW, R7, 0, R1);
    a.atomic_add(DW, R7, 8, R5);
    a.mov(R0, XDP_DROP);
    a.exit();
    a.finish()
}

impl Counter {
    /// Attaches to interface `dev` of the calling thread's network namespace (native XDP).
    pub fn attach(dev: &str, ports: &[u16]) -> io::Result<Counter> {
        let ifindex = sys::ifindex(dev)?;
        let map = bpf::create_array(16, 1, "upf_sink")?;
        let prog = bpf::load_xdp(&counter_program(&map, ports)?, "upf_sink")?;
        let link =
            bpf::attach_xdp(&prog, ifindex, upf_io::af_xdp::XDP_FLAGS_DRV_MODE).map_err(|e| {
                io::Error::new(e.kind(), format!("attaching the counter to {dev}: {e}"))
            })?;
        Ok(Counter {
            map,
            _prog: prog,
            _link: link,
        })
    }

    /// Attaches inside network namespace `netns`.
    pub fn attach_in(netns: &str, dev: &str, ports: &[u16]) -> io::Result<Counter> {
        crate::in_netns(netns, || Counter::attach(dev, ports))?
    }

    pub fn read(&self) -> io::Result<Count> {
        let mut v = [0u8; 16];
        bpf::map_lookup(&self.map, 0, &mut v)?;
        Ok(Count {
            packets: u64::from_ne_bytes(v[0..8].try_into().unwrap_or([0; 8])),
            octets: u64::from_ne_bytes(v[8..16].try_into().unwrap_or([0; 8])),
        })
    }
}

/// An XDP program returning `verdict` (XDP_PASS: lets a veth accept redirected frames and
/// hand them to the kernel; XDP_DROP), attached to `dev` of `netns` while the value lives.
#[derive(Debug)]
pub struct Fixed {
    _prog: OwnedFd,
    _link: OwnedFd,
}

impl Fixed {
    pub fn attach_in(netns: &str, dev: &str, verdict: i32) -> io::Result<Fixed> {
        crate::in_netns(netns, || {
            let ifindex = sys::ifindex(dev)?;
            let mut a = Asm::new();
            a.mov(R0, verdict);
            a.exit();
            let prog = bpf::load_xdp(&a.finish()?, "upf_fixed")?;
            let link = bpf::attach_xdp(&prog, ifindex, upf_io::af_xdp::XDP_FLAGS_DRV_MODE)?;
            Ok(Fixed {
                _prog: prog,
                _link: link,
            })
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

    /// The program against its specification, through BPF_PROG_TEST_RUN (root only).
    #[test]
    fn program_matches_the_specification() {
        if !std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        {
            eprintln!("skipped: needs root (bpf)");
            return;
        }
        let t = ul();
        let g = Generator::new(t.clone()).unwrap();
        for k in 0..3 {
            let (verdict, out) = g.test_once().unwrap();
            assert_eq!(verdict, XDP_TX as u32);
            assert_eq!(out, t.frame(k), "frame {k}");
        }
        g.reset().unwrap();
        assert_eq!(g.test_once().unwrap().1, t.frame(0));
    }
}
