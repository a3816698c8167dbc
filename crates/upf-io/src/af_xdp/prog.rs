//! The XDP program in front of the sockets, generated as eBPF instructions (no compiler
//! needed), and [`xdp_worker`], its specification in plain Rust.
//!
//! What goes to the UPF (XDP_REDIRECT into the socket of the arriving queue):
//! - on N3/N9 (`Filter::gtpu`): unfragmented IPv4/IPv6 UDP to port 2152 addressed to one of
//!   the local addresses;
//! - on N6: IPv4/IPv6 not addressed to a local address, except multicast/broadcast
//!   (224.0.0.0/4 and above, ff00::/8), IPv6 link-local destinations and ICMPv6
//!   router/neighbour discovery (types 133–137).
//!
//! Everything else (ARP, ND, PFCP, ping to the host, …) gets XDP_PASS: the kernel keeps
//! working, and neighbour resolution with it. One VLAN tag (802.1Q or 802.1ad) is skipped.
//!
//! Steering: the program computes the worker that owns the packet's UE exactly like
//! `upf_packet::steer::{ue_hash, worker_of}` (key: the IPv4 address, or the upper 64 bits of
//! the IPv6 address; the inner source of a G-PDU, the destination of plain IP), and writes it
//! into the frame's XDP metadata (`[META_MAGIC, worker]`, 8 octets in front of the frame),
//! which AF_XDP copies into the UMEM ahead of the frame. The kernel redirects a frame only to
//! a socket bound to the queue it arrived on, so the program cannot move a frame to another
//! worker's queue; the receiving socket reports each packet's owner and the runtime hands
//! packets of other workers over in software. GTP-U messages that are not G-PDUs (Echo, Error
//! Indication, End Marker) and G-PDUs whose header or inner packet cannot be read go to
//! worker 0, like the software steering.

use super::bpf::*;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use upf_packet::steer;

/// First word of the metadata the program writes in front of a frame.
pub const META_MAGIC: u32 = 0x5550_4658;
/// Octets of metadata: magic, worker.
pub const META_LEN: usize = 8;
pub const GTPU_PORT: u16 = 2152;
/// Extension headers followed at most; a longer chain steers to worker 0.
pub const MAX_EXT: usize = 8;
/// Bound on header offsets (keeps the verifier's ranges finite; beyond it: worker 0).
const MAX_OFF: usize = 1600;

const XDP_PASS: i32 = 2;
const HELPER_REDIRECT_MAP: i32 = 51;
const HELPER_XDP_ADJUST_META: i32 = 54;

/// What the program lets through to the sockets of one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// N3/N9: GTP-U to `local`; otherwise (N6): IP not addressed to `local`.
    pub gtpu: bool,
    /// The interface's own addresses (N3/N9: the GTP-U endpoints).
    pub local: Vec<IpAddr>,
    /// Workers to steer to (at least 1).
    pub workers: u32,
}

impl Filter {
    pub fn new(gtpu: bool, local: Vec<IpAddr>, workers: u32) -> Self {
        Self {
            gtpu,
            local,
            workers: workers.clamp(1, 1 << 16),
        }
    }

    fn v4(&self) -> impl Iterator<Item = [u8; 4]> + '_ {
        self.local.iter().filter_map(|a| match a {
            IpAddr::V4(v) => Some(v.octets()),
            IpAddr::V6(_) => None,
        })
    }

    fn v6(&self) -> impl Iterator<Item = [u8; 16]> + '_ {
        self.local.iter().filter_map(|a| match a {
            IpAddr::V6(v) => Some(v.octets()),
            IpAddr::V4(_) => None,
        })
    }
}

/// The worker (of `n`) owning a steering key: [`upf_packet::steer`]'s hash.
pub fn worker_of_key(key: u64, n: u32) -> u32 {
    let w = steer::worker_of(steer::ue_hash_key(key), n.max(1) as usize);
    u32::try_from(w).unwrap_or(0)
}

fn be16(f: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*f.get(o)?, *f.get(o + 1)?]))
}

fn key_of(f: &[u8], o: usize, len: usize) -> Option<u64> {
    let b = f.get(o..o + len)?;
    Some(b.iter().fold(0u64, |k, &x| (k << 8) | u64::from(x)))
}

/// The program's decision on an Ethernet frame, in plain Rust: `None` for XDP_PASS, else the
/// worker owning the packet (among `filter.workers`). The loaded program agrees with it on
/// every frame (tested through BPF_PROG_TEST_RUN).
pub fn xdp_worker(frame: &[u8], filter: &Filter) -> Option<u32> {
    let n = filter.workers;
    let mut et = be16(frame, 12)?;
    let mut l3 = 14;
    if et == 0x8100 || et == 0x88a8 {
        et = be16(frame, 16)?;
        l3 = 18;
    }
    match et {
        0x0800 => {
            let ip = frame.get(l3..l3 + 20)?;
            if ip[0] >> 4 != 4 || ip[0] & 0xf < 5 {
                return None;
            }
            let ihl = usize::from(ip[0] & 0xf) * 4;
            let dst = [ip[16], ip[17], ip[18], ip[19]];
            let local = filter.v4().any(|a| a == dst);
            if filter.gtpu {
                if be16(ip, 6)? & 0x3fff != 0 || !local || ip[9] != 17 {
                    return None;
                }
                udp(frame, l3 + ihl, n)
            } else {
                if dst[0] >= 224 || local {
                    return None;
                }
                Some(worker_of_key(u64::from(u32::from_be_bytes(dst)), n))
            }
        }
        0x86dd => {
            let ip = frame.get(l3..l3 + 40)?;
            if ip[0] >> 4 != 6 {
                return None;
            }
            let mut dst = [0u8; 16];
            dst.copy_from_slice(&ip[24..40]);
            let local = filter.v6().any(|a| a == dst);
            if filter.gtpu {
                if !local || ip[6] != 17 {
                    return None;
                }
                udp(frame, l3 + 40, n)
            } else {
                if dst[0] == 0xff || (dst[0] == 0xfe && dst[1] & 0xc0 == 0x80) || local {
                    return None;
                }
                if ip[6] == 58 && frame.get(l3 + 40).is_some_and(|t| (133..=137).contains(t)) {
                    return None;
                }
                Some(worker_of_key(key_of(ip, 24, 8)?, n))
            }
        }
        _ => None,
    }
}

fn udp(frame: &[u8], l4: usize, n: u32) -> Option<u32> {
    if l4 + 8 > frame.len() || be16(frame, l4 + 2)? != GTPU_PORT {
        return None;
    }
    Some(gtp_worker(frame, l4 + 8, n).unwrap_or(0))
}

/// The owner of a GTP-U message at `g`; `None` (worker 0) when it is not a readable G-PDU.
fn gtp_worker(f: &[u8], g: usize, n: u32) -> Option<u32> {
    let len = f.len();
    if g + 8 > len {
        return None;
    }
    let flags = f[g];
    if flags >> 5 != 1 || flags & 0x10 == 0 || f[g + 1] != 255 {
        return None;
    }
    let mut off = g + 8;
    if flags & 7 != 0 {
        if g + 12 > len {
            return None;
        }
        let mut next = f[g + 11];
        off = g + 12;
        if flags & 4 != 0 {
            for _ in 0..MAX_EXT {
                if next == 0 {
                    break;
                }
                let l = usize::from(*f.get(off)?);
                if l == 0 {
                    return None;
                }
                off += 4 * l;
                if off > MAX_OFF || off > len {
                    return None;
                }
                next = f[off - 1];
            }
            if next != 0 {
                return None;
            }
        }
    }
    if off > MAX_OFF {
        return None;
    }
    let key = match f.get(off)? >> 4 {
        4 => key_of(f, off + 12, 4).filter(|_| off + 20 <= len)?,
        6 => key_of(f, off + 8, 8).filter(|_| off + 40 <= len)?,
        _ => return None,
    };
    Some(worker_of_key(key, n))
}

/// The program for `filter`, redirecting into `xsk_map` (indexed by receive queue).
pub fn program(filter: &Filter, xsk_map: &OwnedFd) -> io::Result<Vec<Insn>> {
    let mut a = Asm::new();
    let pass = a.new_label();
    let w0 = a.new_label();
    let hash = a.new_label();
    let meta = a.new_label();
    let redir = a.new_label();
    let l3 = a.new_label();
    let v4 = a.new_label();
    let v6 = a.new_label();
    let udp = a.new_label();

    // r6 = ctx, r2 = data, r3 = data_end.
    a.mov_reg(R6, R1);
    a.ldx(W, R2, R6, 0);
    a.ldx(W, R3, R6, 4);
    // Ethernet, one optional VLAN tag; r8 = offset of the IP header, r5 = EtherType.
    bound(&mut a, R2, 14, pass);
    a.ldx(H, R5, R2, 12);
    a.be(R5, 16);
    a.mov(R8, 14);
    let vlan = a.new_label();
    a.jmp(JEQ, R5, 0x8100, vlan);
    a.jmp(JEQ, R5, 0x88a8, vlan);
    a.ja(l3);
    a.label(vlan);
    bound(&mut a, R2, 18, pass);
    a.ldx(H, R5, R2, 16);
    a.be(R5, 16);
    a.mov(R8, 18);
    a.label(l3);
    a.jmp(JEQ, R5, 0x0800, v4);
    a.jmp(JEQ, R5, 0x86dd, v6);
    a.ja(pass);

    // IPv4: r7 = header.
    a.label(v4);
    a.mov_reg(R7, R2);
    a.alu_reg(ADD, R7, R8);
    bound(&mut a, R7, 20, pass);
    a.ldx(B, R5, R7, 0);
    a.mov_reg(R4, R5);
    a.alu(RSH, R4, 4);
    a.jmp(JNE, R4, 4, pass);
    a.alu(AND, R5, 0xf);
    a.jmp(JLT, R5, 5, pass);
    a.alu(LSH, R5, 2); // header length, 20..60
    a.ldx(W, R9, R7, 16); // destination, as stored
    if filter.gtpu {
        a.ldx(H, R4, R7, 6);
        a.be(R4, 16);
        a.alu(AND, R4, 0x3fff);
        a.jmp(JNE, R4, 0, pass);
        let local = a.new_label();
        for addr in filter.v4() {
            a.jmp32(JEQ, R9, u32::from_ne_bytes(addr), local);
        }
        a.ja(pass);
        a.label(local);
        a.ldx(B, R4, R7, 9);
        a.jmp(JNE, R4, 17, pass);
        a.alu_reg(ADD, R8, R5);
        a.ja(udp);
    } else {
        a.ldx(B, R4, R7, 16);
        a.jmp(JGT, R4, 223, pass);
        for addr in filter.v4() {
            a.jmp32(JEQ, R9, u32::from_ne_bytes(addr), pass);
        }
        a.mov_reg(R1, R9);
        a.be(R1, 32);
        a.ja(hash);
    }

    // IPv6: r7 = header.
    a.label(v6);
    a.mov_reg(R7, R2);
    a.alu_reg(ADD, R7, R8);
    bound(&mut a, R7, 40, pass);
    a.ldx(B, R5, R7, 0);
    a.alu(RSH, R5, 4);
    a.jmp(JNE, R5, 6, pass);
    let local = a.new_label();
    for addr in filter.v6() {
        let next = a.new_label();
        for (i, w) in addr.chunks_exact(4).enumerate() {
            let word = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
            a.ldx(W, R4, R7, 24 + 4 * i as i16);
            a.jmp32(JNE, R4, word, next);
        }
        a.ja(local);
        a.label(next);
    }
    if filter.gtpu {
        a.ja(pass);
        a.label(local);
        a.ldx(B, R4, R7, 6);
        a.jmp(JNE, R4, 17, pass);
        a.alu(ADD, R8, 40);
        a.ja(udp);
    } else {
        let not_ll = a.new_label();
        let not_nd = a.new_label();
        a.ldx(B, R4, R7, 24);
        a.jmp(JEQ, R4, 0xff, pass);
        a.jmp(JNE, R4, 0xfe, not_ll);
        a.ldx(B, R4, R7, 25);
        a.alu(AND, R4, 0xc0);
        a.jmp(JEQ, R4, 0x80, pass);
        a.label(not_ll);
        a.ldx(B, R4, R7, 6);
        a.jmp(JNE, R4, 58, not_nd);
        bound(&mut a, R7, 41, not_nd);
        a.ldx(B, R4, R7, 40);
        a.jmp(JLT, R4, 133, not_nd);
        a.jmp(JGT, R4, 137, not_nd);
        a.ja(pass);
        a.label(not_nd);
        a.ldx(DW, R1, R7, 24);
        a.be(R1, 64);
        a.ja(hash);
        a.label(local);
        a.ja(pass);
    }

    if filter.gtpu {
        // UDP at r8: destination port 2152, else the kernel's.
        a.label(udp);
        a.mov_reg(R7, R2);
        a.alu_reg(ADD, R7, R8);
        bound(&mut a, R7, 8, pass);
        a.ldx(H, R4, R7, 2);
        a.be(R4, 16);
        a.jmp(JNE, R4, i32::from(GTPU_PORT), pass);
        // GTP-U at r8: from here on the frame is ours; unreadable → worker 0.
        let inner = a.new_label();
        a.alu(ADD, R8, 8);
        a.mov_reg(R7, R2);
        a.alu_reg(ADD, R7, R8);
        bound(&mut a, R7, 8, w0);
        a.ldx(B, R5, R7, 0);
        a.mov_reg(R4, R5);
        a.alu(RSH, R4, 5);
        a.jmp(JNE, R4, 1, w0);
        a.mov_reg(R4, R5);
        a.alu(AND, R4, 0x10);
        a.jmp(JEQ, R4, 0, w0);
        a.ldx(B, R4, R7, 1);
        a.jmp(JNE, R4, 255, w0);
        let long = a.new_label();
        a.mov_reg(R4, R5);
        a.alu(AND, R4, 7);
        a.jmp(JNE, R4, 0, long);
        a.alu(ADD, R8, 8);
        a.ja(inner);
        a.label(long);
        bound(&mut a, R7, 12, w0);
        a.ldx(B, R9, R7, 11);
        a.alu(ADD, R8, 12);
        a.alu(AND, R5, 4);
        a.jmp(JEQ, R5, 0, inner);
        for _ in 0..MAX_EXT {
            a.jmp(JEQ, R9, 0, inner);
            a.mov_reg(R7, R2);
            a.alu_reg(ADD, R7, R8);
            bound(&mut a, R7, 1, w0);
            a.ldx(B, R5, R7, 0);
            a.jmp(JEQ, R5, 0, w0);
            a.alu(LSH, R5, 2);
            a.alu_reg(ADD, R8, R5);
            a.jmp(JGT, R8, MAX_OFF as i32, w0);
            a.mov_reg(R4, R8);
            a.alu(SUB, R4, 1);
            a.mov_reg(R7, R2);
            a.alu_reg(ADD, R7, R4);
            bound(&mut a, R7, 1, w0);
            a.ldx(B, R9, R7, 0);
        }
        a.jmp(JNE, R9, 0, w0);
        // Inner IP at r8: the key is its source.
        a.label(inner);
        a.jmp(JGT, R8, MAX_OFF as i32, w0);
        a.mov_reg(R7, R2);
        a.alu_reg(ADD, R7, R8);
        bound(&mut a, R7, 1, w0);
        a.ldx(B, R5, R7, 0);
        a.alu(RSH, R5, 4);
        let in6 = a.new_label();
        a.jmp(JNE, R5, 4, in6);
        bound(&mut a, R7, 20, w0);
        a.ldx(W, R1, R7, 12);
        a.be(R1, 32);
        a.ja(hash);
        a.label(in6);
        a.jmp(JNE, R5, 6, w0);
        bound(&mut a, R7, 40, w0);
        a.ldx(DW, R1, R7, 8);
        a.be(R1, 64);
        a.ja(hash);
    }

    // r7 = worker.
    a.label(w0);
    a.mov(R7, 0);
    a.ja(meta);
    a.label(hash);
    a.mov_reg(R7, R1);
    a.ld_imm64(R1, 0x9E37_79B9_7F4A_7C15);
    a.alu_reg(MUL, R7, R1);
    a.alu(RSH, R7, 32);
    a.alu(MUL, R7, filter.workers as i32);
    a.alu(RSH, R7, 32);
    // Metadata [magic, worker] in front of the frame; without room, the socket recomputes.
    a.label(meta);
    a.mov_reg(R1, R6);
    a.mov(R2, -(META_LEN as i32));
    a.call(HELPER_XDP_ADJUST_META);
    a.jmp(JNE, R0, 0, redir);
    a.ldx(W, R2, R6, 0);
    a.ldx(W, R3, R6, 8);
    a.mov_reg(R4, R3);
    a.alu(ADD, R4, META_LEN as i32);
    a.jmp_reg(JGT, R4, R2, redir);
    a.mov(R4, META_MAGIC as i32);
    a.stx(W, R3, 0, R4);
    a.stx(W, R3, 4, R7);
    // The socket of the arriving queue; none there → the kernel's.
    a.label(redir);
    a.ld_map(R1, xsk_map.as_raw_fd());
    a.ldx(W, R2, R6, 16);
    a.mov(R3, XDP_PASS);
    a.call(HELPER_REDIRECT_MAP);
    a.exit();

    a.label(pass);
    a.mov(R0, XDP_PASS);
    a.exit();
    a.finish()
}

/// if ptr + n > data_end (r3) goto l; clobbers r4.
fn bound(a: &mut Asm, ptr: u8, n: i32, l: Label) {
    a.mov_reg(R4, ptr);
    a.alu(ADD, R4, n);
    a.jmp_reg(JGT, R4, R3, l);
}
