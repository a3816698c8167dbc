//! UE pinning for AF_PACKET without XDP: a PACKET_FANOUT_EBPF program that returns the index
//! of the worker owning a packet's UE, by the same hash as `upf_packet::steer`:
//!
//! - N3/N9 ([`Ingress::Gtpu`]): a G-PDU on UDP port 2152 over IPv4 or IPv6 hashes the inner
//!   packet's source address (IPv4: the address as a 64-bit number; IPv6: its upper 64 bits).
//!   The GTP-U header is 8 octets, 12 when any of E/S/PN is set; with E the extension headers
//!   are walked (each one's length in 4-octet units in its first octet, the next type in its
//!   last), at most [`MAX_EXT`] of them. Anything else (not UDP/2152, not a G-PDU, a non-first
//!   IPv4 fragment, an IPv6 outer header with extension headers, truncated) goes to worker 0.
//! - N6 ([`Ingress::Ip`]): IPv4/IPv6 hashes the destination address; anything else → 0.
//!
//! `ue_hash(k) = (k * 0x9E3779B97F4A7C15 mod 2^64) >> 32`, `worker = (hash * n) >> 32`.
//!
//! The program is built here as raw eBPF instructions (BPF_PROG_TYPE_SOCKET_FILTER, loaded with
//! bpf(2) through libc): no clang, no build dependency. It reads the packet with the legacy
//! LD_ABS/LD_IND loads, which end the program with 0 when a read falls outside the packet: that
//! is exactly "unparsable goes to worker 0", and [`fanout_worker`] (the plain-Rust reference)
//! treats every out-of-range read the same way. A test runs both over generated frames with
//! BPF_PROG_TEST_RUN.
//!
//! On receive the kernel runs the program with the packet starting at the network header and
//! `skb->protocol` the Ethertype (VLAN tags already taken off); BPF_PROG_TEST_RUN starts it after
//! the Ethernet header with a tag still in place, so the program also skips one 802.1Q/802.1ad
//! tag, like the reference.

use crate::Port;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use upf_packet::steer::{ue_hash_key, worker_of};

/// Extension headers walked at most (the chain is unrolled in the program).
pub const MAX_EXT: usize = 8;

/// The GTP-U port.
const GTPU_PORT: u16 = 2152;
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// What a fanout group receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingress {
    /// N3/N9: GTP-U, steered by the inner source address.
    Gtpu,
    /// N6: plain IP, steered by the destination address.
    Ip,
}

impl Ingress {
    pub fn of(port: Port) -> Ingress {
        match port {
            Port::N3 | Port::N9 => Ingress::Gtpu,
            Port::N6 => Ingress::Ip,
        }
    }
}

/// The steering key (UE address as a number) of an Ethernet frame, or `None` when it goes to
/// worker 0. Mirrors the eBPF program read for read.
pub fn fanout_key(ingress: Ingress, frame: &[u8]) -> Option<u64> {
    let b = |o: usize| frame.get(o).copied().map(u64::from);
    let h = |o: usize| Some(b(o)? << 8 | b(o + 1)?);
    let w = |o: usize| Some(h(o)? << 16 | h(o + 2)?);
    let mut proto = h(12)?;
    let mut l3 = 14;
    if proto == 0x8100 || proto == 0x88a8 {
        proto = h(l3 + 2)?;
        l3 += 4;
    }
    let v4 = match proto {
        0x0800 => true,
        0x86dd => false,
        _ => return None,
    };
    match ingress {
        Ingress::Ip => {
            if v4 {
                (b(l3)? >> 4 == 4).then_some(())?;
                w(l3 + 16)
            } else {
                (b(l3)? >> 4 == 6).then_some(())?;
                Some(w(l3 + 24)? << 32 | w(l3 + 28)?)
            }
        }
        Ingress::Gtpu => {
            let udp = if v4 {
                let vihl = b(l3)?;
                (vihl >> 4 == 4).then_some(())?;
                let ihl = usize::try_from((vihl & 0xf) << 2).ok()?;
                (ihl >= 20).then_some(())?;
                (b(l3 + 9)? == 17).then_some(())?;
                (h(l3 + 6)? & 0x1fff == 0).then_some(())?;
                l3 + ihl
            } else {
                (b(l3)? >> 4 == 6).then_some(())?;
                (b(l3 + 6)? == 17).then_some(())?;
                l3 + 40
            };
            (h(udp + 2)? == u64::from(GTPU_PORT)).then_some(())?;
            let gtp = udp + 8;
            let flags = b(gtp)?;
            (flags & 0xf0 == 0x30).then_some(())?;
            (b(gtp + 1)? == 255).then_some(())?;
            let inner = if flags & 0x07 == 0 {
                gtp + 8
            } else if flags & 0x04 == 0 {
                gtp + 12
            } else {
                let mut cur = gtp + 12;
                let mut done = false;
                for _ in 0..MAX_EXT {
                    if b(cur - 1)? == 0 {
                        done = true;
                        break;
                    }
                    let len = usize::try_from(b(cur)?).ok()?;
                    (len != 0).then_some(())?;
                    cur += len * 4;
                }
                if !done {
                    (b(cur - 1)? == 0).then_some(())?;
                }
                cur
            };
            match b(inner)? >> 4 {
                4 => w(inner + 12),
                6 => Some(w(inner + 8)? << 32 | w(inner + 12)?),
                _ => None,
            }
        }
    }
}

/// The worker (of `n`) that owns an Ethernet frame arriving on `port`: the plain-Rust
/// reference of the fanout program.
pub fn fanout_worker(port: Port, frame: &[u8], n: usize) -> usize {
    match fanout_key(Ingress::of(port), frame) {
        Some(k) => worker_of(ue_hash_key(k), n),
        None => 0,
    }
}

// ---- a tiny eBPF assembler ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const BPF_LD: u8 = 0x00;
const BPF_LDX: u8 = 0x01;
const BPF_ALU: u8 = 0x04;
const BPF_JMP: u8 = 0x05;
const BPF_ALU64: u8 = 0x07;
const BPF_W: u8 = 0x00;
const BPF_H: u8 = 0x08;
const BPF_B: u8 = 0x10;
const BPF_DW: u8 = 0x18;
const BPF_IMM: u8 = 0x00;
const BPF_ABS: u8 = 0x20;
const BPF_IND: u8 = 0x40;
const BPF_MEM: u8 = 0x60;
const BPF_K: u8 = 0x00;
const BPF_X: u8 = 0x08;
const ADD: u8 = 0x00;
const MUL: u8 = 0x20;
const OR: u8 = 0x40;
const AND: u8 = 0x50;
const LSH: u8 = 0x60;
const RSH: u8 = 0x70;
const MOV: u8 = 0xb0;
const END: u8 = 0xd0;
const TO_BE: u8 = 0x08;
const JA: u8 = 0x00;
const JEQ: u8 = 0x10;
const JNE: u8 = 0x50;
const JLT: u8 = 0xa0;
const EXIT: u8 = 0x90;

#[derive(Debug, Clone, Copy)]
struct Label(usize);

#[derive(Debug, Default)]
struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
}

impl Asm {
    fn raw(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(Insn {
            code,
            regs: (src << 4) | (dst & 0xf),
            off,
            imm,
        });
    }
    fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }
    fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.insns.len());
    }
    fn alu_k(&mut self, op: u8, dst: u8, imm: i32) {
        self.raw(BPF_ALU64 | op | BPF_K, dst, 0, 0, imm);
    }
    fn alu_x(&mut self, op: u8, dst: u8, src: u8) {
        self.raw(BPF_ALU64 | op | BPF_X, dst, src, 0, 0);
    }
    /// r0 = packet[src + off] (host order); ends the program with 0 when out of range.
    fn ld_ind(&mut self, size: u8, src: u8, off: i32) {
        self.raw(BPF_LD | size | BPF_IND, 0, src, 0, off);
    }
    fn ld_abs(&mut self, size: u8, off: i32) {
        self.raw(BPF_LD | size | BPF_ABS, 0, 0, 0, off);
    }
    fn jmp_k(&mut self, op: u8, dst: u8, imm: i32, to: Label) {
        self.fixups.push((self.insns.len(), to));
        self.raw(BPF_JMP | op | BPF_K, dst, 0, 0, imm);
    }
    fn ja(&mut self, to: Label) {
        self.jmp_k(JA, 0, 0, to);
    }
    fn ld_imm64(&mut self, dst: u8, v: u64) {
        // Two slots: low then high 32 bits (bit patterns, hence the casts).
        self.raw(BPF_LD | BPF_DW | BPF_IMM, dst, 0, 0, v as u32 as i32);
        self.raw(0, 0, 0, 0, (v >> 32) as u32 as i32);
    }
    fn exit(&mut self) {
        self.raw(BPF_JMP | EXIT, 0, 0, 0, 0);
    }
    fn finish(mut self) -> Vec<Insn> {
        for (at, l) in std::mem::take(&mut self.fixups) {
            let target = self.labels[l.0].expect("unbound label");
            let off = i16::try_from(target as isize - at as isize - 1).expect("jump too far");
            self.insns[at].off = off;
        }
        self.insns
    }
}

/// The fanout program for `ingress` and `n` workers (see the module documentation).
pub fn program(ingress: Ingress, n: usize) -> Vec<Insn> {
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    let mut a = Asm::default();
    let (zero, hash, vlan, l3, v4, v6) = (
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
    );
    // r6 = ctx (LD_ABS/LD_IND need it there), r7 = offset of the IP header.
    a.alu_x(MOV, 6, 1);
    // r2 = skb->protocol (struct __sk_buff offset 16, network order) in host order.
    a.raw(BPF_LDX | BPF_W | BPF_MEM, 2, 6, 16, 0);
    a.raw(BPF_ALU | END | TO_BE, 2, 0, 0, 16);
    a.alu_k(MOV, 7, 0);
    a.jmp_k(JEQ, 2, 0x8100, vlan);
    a.jmp_k(JEQ, 2, 0x88a8, vlan);
    a.ja(l3);
    a.bind(vlan);
    a.ld_abs(BPF_H, 2);
    a.alu_x(MOV, 2, 0);
    a.alu_k(MOV, 7, 4);
    a.bind(l3);
    a.jmp_k(JEQ, 2, 0x0800, v4);
    a.jmp_k(JEQ, 2, 0x86dd, v6);
    a.ja(zero);
    match ingress {
        Ingress::Ip => {
            a.bind(v4);
            a.ld_ind(BPF_B, 7, 0);
            a.alu_k(RSH, 0, 4);
            a.jmp_k(JNE, 0, 4, zero);
            a.ld_ind(BPF_W, 7, 16);
            a.alu_x(MOV, 9, 0);
            a.ja(hash);
            a.bind(v6);
            a.ld_ind(BPF_B, 7, 0);
            a.alu_k(RSH, 0, 4);
            a.jmp_k(JNE, 0, 6, zero);
            a.ld_ind(BPF_W, 7, 24);
            a.alu_x(MOV, 9, 0);
            a.alu_k(LSH, 9, 32);
            a.ld_ind(BPF_W, 7, 28);
            a.alu_x(OR, 9, 0);
            a.ja(hash);
        }
        Ingress::Gtpu => {
            let (udp, noopt, optnoext, inner, in4, in6) = (
                a.label(),
                a.label(),
                a.label(),
                a.label(),
                a.label(),
                a.label(),
            );
            // Outer IPv4: version, IHL >= 5, UDP, first fragment; r8 = UDP offset.
            a.bind(v4);
            a.ld_ind(BPF_B, 7, 0);
            a.alu_x(MOV, 8, 0);
            a.alu_k(RSH, 0, 4);
            a.jmp_k(JNE, 0, 4, zero);
            a.alu_k(AND, 8, 0xf);
            a.alu_k(LSH, 8, 2);
            a.jmp_k(JLT, 8, 20, zero);
            a.ld_ind(BPF_B, 7, 9);
            a.jmp_k(JNE, 0, 17, zero);
            a.ld_ind(BPF_H, 7, 6);
            a.alu_k(AND, 0, 0x1fff);
            a.jmp_k(JNE, 0, 0, zero);
            a.alu_x(ADD, 8, 7);
            a.ja(udp);
            // Outer IPv6: next header UDP directly.
            a.bind(v6);
            a.ld_ind(BPF_B, 7, 0);
            a.alu_k(RSH, 0, 4);
            a.jmp_k(JNE, 0, 6, zero);
            a.ld_ind(BPF_B, 7, 6);
            a.jmp_k(JNE, 0, 17, zero);
            a.alu_x(MOV, 8, 7);
            a.alu_k(ADD, 8, 40);
            // UDP to 2152; r8 = GTP-U header, r9 = its flags.
            a.bind(udp);
            a.ld_ind(BPF_H, 8, 2);
            a.jmp_k(JNE, 0, i32::from(GTPU_PORT), zero);
            a.alu_k(ADD, 8, 8);
            a.ld_ind(BPF_B, 8, 0);
            a.alu_x(MOV, 9, 0);
            a.alu_k(AND, 0, 0xf0);
            a.jmp_k(JNE, 0, 0x30, zero);
            a.ld_ind(BPF_B, 8, 1);
            a.jmp_k(JNE, 0, 255, zero);
            a.alu_x(MOV, 1, 9);
            a.alu_k(AND, 1, 0x07);
            a.jmp_k(JEQ, 1, 0, noopt);
            a.alu_x(MOV, 1, 9);
            a.alu_k(AND, 1, 0x04);
            a.jmp_k(JEQ, 1, 0, optnoext);
            // Extension headers: r8 = cursor; the next type is the octet before it.
            a.alu_k(ADD, 8, 12);
            for _ in 0..MAX_EXT {
                a.ld_ind(BPF_B, 8, -1);
                a.jmp_k(JEQ, 0, 0, inner);
                a.ld_ind(BPF_B, 8, 0);
                a.jmp_k(JEQ, 0, 0, zero);
                a.alu_k(LSH, 0, 2);
                a.alu_x(ADD, 8, 0);
            }
            a.ld_ind(BPF_B, 8, -1);
            a.jmp_k(JNE, 0, 0, zero);
            a.ja(inner);
            a.bind(optnoext);
            a.alu_k(ADD, 8, 12);
            a.ja(inner);
            a.bind(noopt);
            a.alu_k(ADD, 8, 8);
            // Inner packet: its source address.
            a.bind(inner);
            a.ld_ind(BPF_B, 8, 0);
            a.alu_k(RSH, 0, 4);
            a.jmp_k(JEQ, 0, 4, in4);
            a.jmp_k(JEQ, 0, 6, in6);
            a.ja(zero);
            a.bind(in4);
            a.ld_ind(BPF_W, 8, 12);
            a.alu_x(MOV, 9, 0);
            a.ja(hash);
            a.bind(in6);
            a.ld_ind(BPF_W, 8, 8);
            a.alu_x(MOV, 9, 0);
            a.alu_k(LSH, 9, 32);
            a.ld_ind(BPF_W, 8, 12);
            a.alu_x(OR, 9, 0);
            a.ja(hash);
        }
    }
    // worker = (((k * GOLDEN) >> 32) * n) >> 32
    a.bind(hash);
    a.ld_imm64(1, GOLDEN);
    a.alu_x(MUL, 9, 1);
    a.alu_k(RSH, 9, 32);
    a.alu_k(MUL, 9, n);
    a.alu_k(RSH, 9, 32);
    a.alu_x(MOV, 0, 9);
    a.exit();
    a.bind(zero);
    a.alu_k(MOV, 0, 0);
    a.exit();
    a.finish()
}

// ---- bpf(2) ----

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

#[repr(C, align(8))]
#[derive(Debug, Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

#[repr(C, align(8))]
#[derive(Debug, Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
}

fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: attr is a valid, initialised bpf_attr prefix of the size passed; the kernel
    // reads it (and writes output fields within it) during the call only. Pointers inside it
    // are valid for the call (guaranteed by the callers).
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            std::mem::size_of::<T>(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A loaded socket-filter program.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Verifies and loads `insns`; the error carries the end of the verifier's log.
    pub fn load(insns: &[Insn], name: &str) -> io::Result<Program> {
        let license = b"GPL\0";
        let mut pname = [0u8; 16];
        for (d, s) in pname.iter_mut().zip(name.bytes().take(15)) {
            *d = s;
        }
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
            insn_cnt: u32::try_from(insns.len()).map_err(io::Error::other)?,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            prog_name: pname,
            ..Default::default()
        };
        let fd = match sys_bpf(BPF_PROG_LOAD, &mut attr) {
            Ok(fd) => fd,
            Err(e) => {
                // Again with the verifier's log, for the message.
                let mut log = vec![0u8; 64 * 1024];
                attr.log_level = 1;
                attr.log_size = u32::try_from(log.len()).unwrap_or(0);
                attr.log_buf = log.as_mut_ptr() as u64;
                let _ = sys_bpf(BPF_PROG_LOAD, &mut attr);
                let end = log.iter().position(|&c| c == 0).unwrap_or(0);
                let text = String::from_utf8_lossy(&log[..end]);
                let tail: Vec<&str> = text.lines().rev().take(4).collect();
                return Err(io::Error::new(
                    e.kind(),
                    format!("BPF_PROG_LOAD: {e}; verifier: {}", tail.join(" | ")),
                ));
            }
        };
        let fd = RawFd::try_from(fd).map_err(io::Error::other)?;
        // SAFETY: bpf(BPF_PROG_LOAD) returned a fresh descriptor that we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Program { fd })
    }

    /// The fanout program for packets arriving on `port`, for `n` workers.
    pub fn fanout(port: Port, n: usize) -> io::Result<Program> {
        Program::load(&program(Ingress::of(port), n), "upf_fanout")
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Runs the program once over `frame` (an Ethernet frame) with BPF_PROG_TEST_RUN and
    /// returns its return value.
    pub fn test_run(&self, frame: &[u8]) -> io::Result<u32> {
        use std::os::fd::AsRawFd;
        let mut attr = TestRunAttr {
            prog_fd: u32::try_from(self.fd.as_raw_fd()).map_err(io::Error::other)?,
            data_size_in: u32::try_from(frame.len()).map_err(io::Error::other)?,
            data_in: frame.as_ptr() as u64,
            repeat: 1,
            ..Default::default()
        };
        sys_bpf(BPF_PROG_TEST_RUN, &mut attr)?;
        Ok(attr.retval)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::IpAddr;

    /// A small deterministic generator (no dependency).
    pub(crate) struct Rng(u64);
    impl Rng {
        pub(crate) fn new(seed: u64) -> Self {
            Rng(seed | 1)
        }
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    pub(crate) fn eth(ethertype: u16, vlan: bool) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    pub(crate) fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
        let total = u16::try_from(20 + payload.len()).unwrap();
        let mut p = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0];
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        let c = checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    pub(crate) fn checksum(b: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in b.chunks(2) {
            s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    pub(crate) fn ipv6(src: [u8; 16], dst: [u8; 16], nh: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
        p.extend_from_slice(&[nh, 64]);
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(payload);
        p
    }

    pub(crate) fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = sport.to_be_bytes().to_vec();
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(payload);
        u
    }

    /// A G-PDU: flags (S/PN bits as given), optional extension headers of the given
    /// lengths (in 4-octet units), then `inner`.
    pub(crate) fn gtpu(teid: u32, sp: u8, exts: &[u8], inner: &[u8]) -> Vec<u8> {
        let e = !exts.is_empty();
        let flags = 0x30 | (sp & 0x03) | if e { 0x04 } else { 0 };
        let mut g = vec![flags, 255, 0, 0];
        g.extend_from_slice(&teid.to_be_bytes());
        if flags & 0x07 != 0 {
            g.extend_from_slice(&[0, 1, 0, if e { 0x85 } else { 0 }]);
        }
        for (i, &len) in exts.iter().enumerate() {
            let mut x = vec![0u8; usize::from(len) * 4];
            x[0] = len;
            let last = x.len() - 1;
            x[last] = if i + 1 < exts.len() { 0x85 } else { 0 };
            g.extend_from_slice(&x);
        }
        g.extend_from_slice(inner);
        let l = u16::try_from(g.len() - 8).unwrap();
        g[2..4].copy_from_slice(&l.to_be_bytes());
        g
    }

    pub(crate) fn inner_packet(ue: IpAddr, rng: &mut Rng) -> Vec<u8> {
        let len = usize::try_from(rng.below(40)).unwrap();
        let pl = rng.bytes(len);
        match ue {
            IpAddr::V4(a) => ipv4(a.octets(), [8, 8, 8, 8], 17, &udp(1000, 53, &pl)),
            IpAddr::V6(a) => ipv6(
                a.octets(),
                [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                17,
                &udp(1000, 53, &pl),
            ),
        }
    }

    pub(crate) fn random_ue(rng: &mut Rng) -> IpAddr {
        if rng.below(2) == 0 {
            let r = rng.next().to_be_bytes();
            IpAddr::from([10, 45, r[0], r[1]])
        } else {
            let mut a = [0u8; 16];
            a[..2].copy_from_slice(&[0x20, 0x01]);
            a[2..8].copy_from_slice(&rng.bytes(6));
            a[8..].copy_from_slice(&rng.bytes(8));
            IpAddr::from(a)
        }
    }

    /// A GTP-U frame (IPv4 or IPv6 outer) carrying a packet of `ue`.
    pub(crate) fn gtpu_frame(ue: IpAddr, rng: &mut Rng, outer6: bool, vlan: bool) -> Vec<u8> {
        let nexts = usize::try_from(rng.below(4)).unwrap();
        let exts: Vec<u8> = (0..nexts).map(|_| 1 + rng.below(3) as u8).collect();
        let sp = rng.below(4) as u8;
        let inner = inner_packet(ue, rng);
        let g = gtpu(rng.next() as u32, sp, &exts, &inner);
        let u = udp(2152, 2152, &g);
        let mut f;
        if outer6 {
            f = eth(0x86dd, vlan);
            let mut s = [0u8; 16];
            s[0] = 0xfd;
            s[15] = 1;
            let mut d = s;
            d[15] = 2;
            f.extend_from_slice(&ipv6(s, d, 17, &u));
        } else {
            f = eth(0x0800, vlan);
            f.extend_from_slice(&ipv4([192, 168, 1, 1], [192, 168, 1, 2], 17, &u));
        }
        f
    }

    /// A plain IP (N6) frame to `ue`.
    pub(crate) fn n6_frame(ue: IpAddr, rng: &mut Rng, vlan: bool) -> Vec<u8> {
        let len = usize::try_from(rng.below(40)).unwrap();
        let pl = rng.bytes(len);
        match ue {
            IpAddr::V4(a) => {
                let mut f = eth(0x0800, vlan);
                f.extend_from_slice(&ipv4([1, 1, 1, 1], a.octets(), 17, &udp(53, 1000, &pl)));
                f
            }
            IpAddr::V6(a) => {
                let mut f = eth(0x86dd, vlan);
                let s = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
                f.extend_from_slice(&ipv6(s, a.octets(), 17, &udp(53, 1000, &pl)));
                f
            }
        }
    }

    /// Well-formed frames with their UE, then malformed variants of them.
    pub(crate) fn corpus(count: usize) -> Vec<(Port, Vec<u8>, Option<IpAddr>)> {
        let mut rng = Rng::new(0x5eed);
        let mut out = Vec::new();
        for i in 0..count {
            let ue = random_ue(&mut rng);
            let vlan = i % 7 == 3;
            match i % 3 {
                0 => out.push((Port::N3, gtpu_frame(ue, &mut rng, false, vlan), Some(ue))),
                1 => out.push((Port::N9, gtpu_frame(ue, &mut rng, true, vlan), Some(ue))),
                _ => out.push((Port::N6, n6_frame(ue, &mut rng, vlan), Some(ue))),
            }
        }
        // Malformed: truncations, flipped octets, too many extension headers, wrong port.
        let good: Vec<_> = out.clone();
        for (port, f, _) in &good {
            let cut = 14 + usize::try_from(rng.below(f.len() as u64 - 14)).unwrap();
            out.push((*port, f[..cut].to_vec(), None));
            let mut g = f.clone();
            let at = 12 + usize::try_from(rng.below(70.min(f.len() as u64 - 12))).unwrap();
            g[at] ^= 1 << rng.below(8);
            out.push((*port, g, None));
            // Every frame also on the other kind of port.
            let other = if *port == Port::N6 {
                Port::N3
            } else {
                Port::N6
            };
            out.push((other, f.clone(), None));
        }
        let ue: IpAddr = "10.45.0.9".parse().unwrap();
        let inner = inner_packet(ue, &mut rng);
        for n in [MAX_EXT - 1, MAX_EXT, MAX_EXT + 1] {
            let g = gtpu(1, 0, &vec![1; n], &inner);
            let mut f = eth(0x0800, false);
            f.extend_from_slice(&ipv4(
                [192, 168, 1, 1],
                [192, 168, 1, 2],
                17,
                &udp(2152, 2152, &g),
            ));
            out.push((Port::N3, f, if n <= MAX_EXT { Some(ue) } else { None }));
        }
        let mut f = eth(0x0800, false);
        f.extend_from_slice(&ipv4(
            [192, 168, 1, 1],
            [192, 168, 1, 2],
            17,
            &udp(2152, 2153, &gtpu(1, 0, &[], &inner)),
        ));
        out.push((Port::N3, f, None));
        let mut f = eth(0x0806, false);
        f.extend_from_slice(&[0; 28]);
        out.push((Port::N6, f, None));
        out
    }

    #[test]
    fn reference_agrees_with_runtime_steering() {
        for (port, frame, ue) in corpus(300) {
            let Some(ue) = ue else { continue };
            let want_hash = upf_packet::steer::ue_hash(ue);
            let k = fanout_key(Ingress::of(port), &frame).expect("well-formed frame");
            assert_eq!(ue_hash_key(k), want_hash, "{port:?} {ue}");
            for n in 1..=5 {
                assert_eq!(
                    fanout_worker(port, &frame, n),
                    upf_packet::steer::worker_of(want_hash, n)
                );
            }
        }
    }

    #[test]
    fn reference_never_panics_on_short_frames() {
        let mut rng = Rng::new(7);
        for (port, f, _) in corpus(60) {
            for n in 0..f.len() {
                let _ = fanout_worker(port, &f[..n], 3);
            }
            let junk = rng.bytes(f.len());
            let _ = fanout_worker(port, &junk, 3);
        }
    }

    #[test]
    fn program_shape() {
        // Straight-line apart from forward jumps; ends with exit.
        for ingress in [Ingress::Gtpu, Ingress::Ip] {
            let p = program(ingress, 4);
            assert!(p.len() < 4096);
            assert_eq!(p.last().unwrap().code, BPF_JMP | EXIT);
            for i in &p {
                if i.code & 0x07 == BPF_JMP && i.code != BPF_JMP | EXIT {
                    assert!(i.off >= 0);
                }
            }
        }
    }

    pub(crate) fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    #[ignore = "needs root"]
    fn bpf_program_agrees_with_reference() {
        assert!(is_root(), "needs root");
        let frames = corpus(300);
        let mut checked = 0;
        let mut refused = 0;
        for n in [1usize, 2, 3, 4, 7] {
            for port in [Port::N3, Port::N6] {
                let prog = Program::fanout(port, n).expect("load fanout program");
                for (p, f, _) in &frames {
                    if Ingress::of(*p) != Ingress::of(port) {
                        continue;
                    }
                    let got = match prog.test_run(f) {
                        Ok(r) => r,
                        // Newer kernels refuse to test-run an IPv4/IPv6 frame shorter than the
                        // fixed header (a harness limit; the receive path has no such check).
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                            let l3 = if f[12..14] == [0x81, 0] { 18 } else { 14 };
                            assert!(f.len() < l3 + 40, "EINVAL on a {}-octet frame", f.len());
                            refused += 1;
                            continue;
                        }
                        Err(e) => panic!("BPF_PROG_TEST_RUN: {e}"),
                    };
                    let got = usize::try_from(got).unwrap();
                    assert_eq!(
                        got,
                        fanout_worker(port, f, n),
                        "n={n} {port:?} frame {f:02x?}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(
            checked > 1000 && refused < checked / 10,
            "{checked} {refused}"
        );
    }
}
