//! A small eBPF assembler and the `bpf(2)` operations this backend needs: an XSKMAP, loading
//! an XDP program, attaching it with a BPF link (detached when the link's descriptor closes,
//! so nothing stays attached after the process exits) and BPF_PROG_TEST_RUN.

use super::sys::{self, BpfAttr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// One 8-octet eBPF instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    fn bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

// Registers.
pub const R0: u8 = 0;
pub const R1: u8 = 1;
pub const R2: u8 = 2;
pub const R3: u8 = 3;
pub const R4: u8 = 4;
pub const R5: u8 = 5;
pub const R6: u8 = 6;
pub const R7: u8 = 7;
pub const R8: u8 = 8;
pub const R9: u8 = 9;
/// The frame pointer (read-only): the program's 512-octet stack is below it.
pub const R10: u8 = 10;

// Instruction classes, sizes, modes, operations.
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const ALU64: u8 = 0x07;
pub const W: u8 = 0x00;
pub const H: u8 = 0x08;
pub const B: u8 = 0x10;
pub const DW: u8 = 0x18;
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const ATOMIC: u8 = 0xc0;
const K: u8 = 0x00;
const X: u8 = 0x08;
pub const ADD: u8 = 0x00;
pub const SUB: u8 = 0x10;
pub const MUL: u8 = 0x20;
pub const OR: u8 = 0x40;
pub const AND: u8 = 0x50;
pub const LSH: u8 = 0x60;
pub const RSH: u8 = 0x70;
pub const XOR: u8 = 0xa0;
const MOV: u8 = 0xb0;
const END: u8 = 0xd0;
const TO_BE: u8 = 0x08;
pub const JEQ: u8 = 0x10;
pub const JGT: u8 = 0x20;
pub const JGE: u8 = 0x30;
pub const JNE: u8 = 0x50;
pub const JLT: u8 = 0xa0;
const JA: u8 = 0x00;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
const PSEUDO_MAP_FD: u8 = 1;
const PSEUDO_MAP_VALUE: u8 = 2;

/// A jump target, placed with [`Asm::label`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

/// Instructions with symbolic jump targets.
#[derive(Debug, Default)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
}

impl Asm {
    pub fn new() -> Self {
        Self::default()
    }

    fn emit(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(Insn {
            code,
            regs: (src << 4) | (dst & 0xf),
            off,
            imm,
        });
    }

    pub fn new_label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Places `l` at the next instruction.
    pub fn label(&mut self, l: Label) {
        self.labels[l.0] = Some(self.insns.len());
    }

    /// dst = imm (64-bit move, immediate sign-extended).
    pub fn mov(&mut self, dst: u8, imm: i32) {
        self.emit(ALU64 | MOV | K, dst, 0, 0, imm);
    }
    pub fn mov_reg(&mut self, dst: u8, src: u8) {
        self.emit(ALU64 | MOV | X, dst, src, 0, 0);
    }
    /// dst = dst OP imm (64-bit).
    pub fn alu(&mut self, op: u8, dst: u8, imm: i32) {
        self.emit(ALU64 | op | K, dst, 0, 0, imm);
    }
    /// dst = dst OP src (64-bit).
    pub fn alu_reg(&mut self, op: u8, dst: u8, src: u8) {
        self.emit(ALU64 | op | X, dst, src, 0, 0);
    }
    /// dst = to_be(dst) of `bits` (16, 32, 64): network byte order to a number.
    pub fn be(&mut self, dst: u8, bits: i32) {
        self.emit(ALU | END | TO_BE, dst, 0, 0, bits);
    }
    /// dst = 64-bit immediate.
    pub fn ld_imm64(&mut self, dst: u8, v: u64) {
        self.emit(LD | DW | IMM, dst, 0, 0, v as u32 as i32);
        self.emit(0, 0, 0, 0, (v >> 32) as u32 as i32);
    }
    /// dst = the map whose descriptor is `fd` (resolved by the kernel at load).
    pub fn ld_map(&mut self, dst: u8, fd: i32) {
        self.emit(LD | DW | IMM, dst, PSEUDO_MAP_FD, 0, fd);
        self.emit(0, 0, 0, 0, 0);
    }
    /// dst = address of octet `off` of the value of entry 0 of the array map `fd` (resolved
    /// by the kernel at load: no helper call at run time).
    pub fn ld_map_value(&mut self, dst: u8, fd: i32, off: i32) {
        self.emit(LD | DW | IMM, dst, PSEUDO_MAP_VALUE, 0, fd);
        self.emit(0, 0, 0, 0, off);
    }
    /// *(size *)(dst + off) = imm (sign-extended to DW).
    pub fn st(&mut self, size: u8, dst: u8, off: i16, imm: i32) {
        self.emit(ST | MEM | size, dst, 0, off, imm);
    }
    /// Atomic *(size *)(dst + off) += src (size W or DW).
    pub fn atomic_add(&mut self, size: u8, dst: u8, off: i16, src: u8) {
        self.emit(STX | ATOMIC | size, dst, src, off, 0);
    }
    /// dst = *(size *)(src + off).
    pub fn ldx(&mut self, size: u8, dst: u8, src: u8, off: i16) {
        self.emit(LDX | MEM | size, dst, src, off, 0);
    }
    /// *(size *)(dst + off) = src.
    pub fn stx(&mut self, size: u8, dst: u8, off: i16, src: u8) {
        self.emit(STX | MEM | size, dst, src, off, 0);
    }
    /// if dst OP imm goto l (64-bit compare, imm sign-extended).
    pub fn jmp(&mut self, op: u8, dst: u8, imm: i32, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.emit(JMP | op | K, dst, 0, 0, imm);
    }
    /// if (u32)dst OP (u32)imm goto l.
    pub fn jmp32(&mut self, op: u8, dst: u8, imm: u32, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.emit(JMP32 | op | K, dst, 0, 0, imm as i32);
    }
    /// if dst OP src goto l (64-bit).
    pub fn jmp_reg(&mut self, op: u8, dst: u8, src: u8, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.emit(JMP | op | X, dst, src, 0, 0);
    }
    pub fn ja(&mut self, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.emit(JMP | JA, 0, 0, 0, 0);
    }
    pub fn call(&mut self, helper: i32) {
        self.emit(JMP | CALL, 0, 0, 0, helper);
    }
    pub fn exit(&mut self) {
        self.emit(JMP | EXIT, 0, 0, 0, 0);
    }

    /// The instructions with every jump resolved and unreachable code left out (the kernel
    /// refuses unreachable instructions, and the generator emits blocks that some filters never
    /// jump to). An error names an unplaced label or a jump out of range (a bug of the
    /// generator, not of the input).
    pub fn finish(self) -> io::Result<Vec<Insn>> {
        let n = self.insns.len();
        // Absolute jump targets.
        let mut target: Vec<Option<usize>> = vec![None; n];
        for &(at, l) in &self.fixups {
            let t = self.labels[l.0].ok_or_else(|| {
                io::Error::other(format!("eBPF assembler: label {} unplaced", l.0))
            })?;
            if t >= n {
                return Err(io::Error::other("eBPF assembler: jump past the end"));
            }
            target[at] = Some(t);
        }
        // Reachable instructions, from the first.
        let mut live = vec![false; n];
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            if i >= n || live[i] {
                continue;
            }
            live[i] = true;
            let c = self.insns[i].code;
            let class = c & 0x07;
            if c == LD | DW | IMM {
                if i + 1 < n {
                    live[i + 1] = true;
                }
                stack.push(i + 2);
                continue;
            }
            if class == JMP || class == JMP32 {
                let op = c & 0xf0;
                if op == EXIT {
                    continue;
                }
                if let Some(t) = target[i] {
                    stack.push(t);
                }
                if op == JA && class == JMP {
                    continue;
                }
            }
            stack.push(i + 1);
        }
        // New positions, then the kept instructions with relative offsets.
        let mut pos = vec![0usize; n + 1];
        let mut k = 0;
        for i in 0..n {
            pos[i] = k;
            k += usize::from(live[i]);
        }
        pos[n] = k;
        let mut out = Vec::with_capacity(k);
        for i in (0..n).filter(|&i| live[i]) {
            let mut insn = self.insns[i];
            if let Some(t) = target[i] {
                insn.off = i16::try_from(pos[t] as i64 - pos[i] as i64 - 1)
                    .map_err(|_| io::Error::other("eBPF assembler: jump out of range"))?;
            }
            out.push(insn);
        }
        Ok(out)
    }
}

/// An XSKMAP of `entries` sockets, indexed by receive queue.
pub fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut a = BpfAttr::new();
    a.u32(0, sys::BPF_MAP_TYPE_XSKMAP)
        .u32(4, 4)
        .u32(8, 4)
        .u32(12, entries.max(1))
        .bytes(28, b"upf_xsks");
    sys::bpf_fd(sys::BPF_MAP_CREATE, &mut a)
        .map_err(|e| sys::context(e, "bpf(BPF_MAP_CREATE XSKMAP)"))
}

/// An array map of `entries` values of `value_size` octets (u32 keys), zeroed.
pub fn create_array(value_size: u32, entries: u32, name: &str) -> io::Result<OwnedFd> {
    let mut nm = [0u8; 16];
    for (d, s) in nm.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    let mut a = BpfAttr::new();
    a.u32(0, sys::BPF_MAP_TYPE_ARRAY)
        .u32(4, 4)
        .u32(8, value_size)
        .u32(12, entries.max(1))
        .bytes(28, &nm);
    sys::bpf_fd(sys::BPF_MAP_CREATE, &mut a)
        .map_err(|e| sys::context(e, "bpf(BPF_MAP_CREATE ARRAY)"))
}

/// Reads `map[key]` into `value` (exactly the map's value size; for a per-CPU map, the
/// possible CPUs' values one after the other, each rounded up to 8 octets).
pub fn map_lookup(map: &OwnedFd, key: u32, value: &mut [u8]) -> io::Result<()> {
    let mut a = BpfAttr::new();
    a.u32(0, map.as_raw_fd() as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, value.as_mut_ptr() as u64);
    sys::bpf(sys::BPF_MAP_LOOKUP_ELEM, &mut a)
        .map(|_| ())
        .map_err(|e| sys::context(e, "bpf(BPF_MAP_LOOKUP_ELEM)"))
}

/// `map[key] = value` for a map with u32 keys and values of `value.len()` octets (exactly
/// the map's value size).
pub fn map_update(map: &OwnedFd, key: u32, value: &[u8]) -> io::Result<()> {
    let mut a = BpfAttr::new();
    a.u32(0, map.as_raw_fd() as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, value.as_ptr() as u64);
    sys::bpf(sys::BPF_MAP_UPDATE_ELEM, &mut a)
        .map(|_| ())
        .map_err(|e| sys::context(e, "bpf(BPF_MAP_UPDATE_ELEM)"))
}

/// `map[key] = value` for a map with u32 keys and u64 values.
pub fn map_update_u64(map: &OwnedFd, key: u32, value: u64) -> io::Result<()> {
    let mut a = BpfAttr::new();
    a.u32(0, map.as_raw_fd() as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, &value as *const u64 as u64);
    sys::bpf(sys::BPF_MAP_UPDATE_ELEM, &mut a)
        .map(|_| ())
        .map_err(|e| sys::context(e, "bpf(BPF_MAP_UPDATE_ELEM)"))
}

/// `map[key] = value` for a map with u32 keys and values.
pub fn map_update_u32(map: &OwnedFd, key: u32, value: u32) -> io::Result<()> {
    let mut a = BpfAttr::new();
    a.u32(0, map.as_raw_fd() as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, &value as *const u32 as u64);
    sys::bpf(sys::BPF_MAP_UPDATE_ELEM, &mut a)
        .map(|_| ())
        .map_err(|e| sys::context(e, "bpf(BPF_MAP_UPDATE_ELEM)"))
}

/// Loads an XDP program; on a verifier refusal the error carries the verifier's log.
pub fn load_xdp(insns: &[Insn], name: &str) -> io::Result<OwnedFd> {
    let code: Vec<u8> = insns.iter().flat_map(|i| i.bytes()).collect();
    let license = b"Apache-2.0\0";
    let mut nm = [0u8; 16];
    for (d, s) in nm.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    let attr = |log: Option<&mut Vec<u8>>| {
        let mut a = BpfAttr::new();
        a.u32(0, sys::BPF_PROG_TYPE_XDP)
            .u32(4, insns.len() as u32)
            .u64(8, code.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .bytes(48, &nm)
            .u32(68, sys::BPF_XDP);
        if let Some(l) = log {
            a.u32(24, 1)
                .u32(28, l.len() as u32)
                .u64(32, l.as_mut_ptr() as u64);
        }
        a
    };
    match sys::bpf_fd(sys::BPF_PROG_LOAD, &mut attr(None)) {
        Ok(fd) => Ok(fd),
        Err(e)
            if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EINVAL) =>
        {
            // Ask again with the verifier log, to say why.
            let mut log = vec![0u8; 1 << 20];
            let r = sys::bpf_fd(sys::BPF_PROG_LOAD, &mut attr(Some(&mut log)));
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: String = text
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            match r {
                Ok(fd) => Ok(fd),
                Err(e2) => Err(io::Error::new(
                    e2.kind(),
                    format!("bpf(BPF_PROG_LOAD XDP {name}): {e2}; verifier:\n{tail}"),
                )),
            }
        }
        Err(e) => Err(sys::context(e, "bpf(BPF_PROG_LOAD XDP)")),
    }
}

/// Attaches `prog` to interface `ifindex` (XDP flags: native or generic) as a BPF link: the
/// program stays attached exactly as long as the returned descriptor is open.
pub fn attach_xdp(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = BpfAttr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, sys::BPF_XDP)
        .u32(12, flags);
    sys::bpf_fd(sys::BPF_LINK_CREATE, &mut a)
}

/// Runs `prog` once on `frame` (BPF_PROG_TEST_RUN): the verdict and the frame afterwards,
/// metadata included (the kernel returns data_meta..data_end).
pub fn test_run(prog: &OwnedFd, frame: &[u8]) -> io::Result<(u32, Vec<u8>)> {
    let mut out = vec![0u8; frame.len() + 512];
    let mut a = BpfAttr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(8, frame.len() as u32)
        .u32(12, out.len() as u32)
        .u64(16, frame.as_ptr() as u64)
        .u64(24, out.as_mut_ptr() as u64)
        .u32(32, 1);
    sys::bpf(sys::BPF_PROG_TEST_RUN, &mut a)
        .map_err(|e| sys::context(e, "bpf(BPF_PROG_TEST_RUN)"))?;
    let retval = a.get_u32(4);
    let n = (a.get_u32(12) as usize).min(out.len());
    out.truncate(n);
    Ok((retval, out))
}

/// Runs `prog` `repeat` times on live frames made from `frame` (BPF_PROG_RUN with
/// BPF_F_TEST_XDP_LIVE_FRAMES), as if they arrived on interface `ifindex` of the calling
/// thread's network namespace, queue 0: XDP_TX and XDP_REDIRECT really send them (XDP_TX out
/// of `ifindex`). Frames come from a page pool and are recycled: the program sees whatever
/// the previous user of a page left in it, and must rewrite every header it relies on.
/// `batch` frames (1..=256) go out per flush. Returns when all were run (or a signal came).
pub fn test_run_live(
    prog: &OwnedFd,
    frame: &[u8],
    ifindex: u32,
    repeat: u32,
    batch: u32,
) -> io::Result<()> {
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
    // egress_ifindex.
    let mut ctx = [0u32; 6];
    ctx[1] = frame.len() as u32;
    ctx[3] = ifindex;
    let mut a = BpfAttr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(8, frame.len() as u32)
        .u64(16, frame.as_ptr() as u64)
        .u32(32, repeat.max(1))
        .u32(40, std::mem::size_of_val(&ctx) as u32)
        .u64(48, ctx.as_ptr() as u64)
        .u32(64, sys::BPF_F_TEST_XDP_LIVE_FRAMES)
        .u32(72, batch.clamp(1, 256));
    sys::bpf(sys::BPF_PROG_TEST_RUN, &mut a)
        .map(|_| ())
        .map_err(|e| sys::context(e, "bpf(BPF_PROG_RUN, XDP live frames)"))
}

/// A trivial XDP_PASS program (for probing what an interface supports).
pub fn pass_program() -> io::Result<OwnedFd> {
    let mut a = Asm::new();
    a.mov(R0, 2);
    a.exit();
    load_xdp(&a.finish()?, "upf_probe")
}
