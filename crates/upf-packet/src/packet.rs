//! Packet buffers with headroom, so that GTP-U encapsulation writes in front of the inner
//! packet instead of moving it, and decapsulation only moves the start.

use core::fmt;

/// Size of every packet buffer: an Ethernet MTU frame plus headroom, rounded up.
pub const BUF_LEN: usize = 2048;
const _: () = assert!(BUF_LEN <= u16::MAX as usize);
/// Room kept in front of a received packet: two outer IPv6 + UDP + GTP-U + PSC headers
/// (68 octets each), so an N9 re-encapsulation never runs out.
pub const HEADROOM: usize = 160;

/// The interface a packet arrived on or leaves by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Port {
    /// Towards the gNBs: GTP-U.
    N3,
    /// Towards other UPFs: GTP-U.
    N9,
    /// Towards the data network: plain IP.
    N6,
}

impl Port {
    pub const ALL: [Port; 3] = [Port::N3, Port::N9, Port::N6];

    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    #[inline]
    pub const fn name(self) -> &'static str {
        match self {
            Port::N3 => "n3",
            Port::N9 => "n9",
            Port::N6 => "n6",
        }
    }
}

/// One packet: a fixed buffer and the range of it that holds the packet (starting with the
/// IP header; link-layer framing is the I/O backend's business).
#[derive(Clone)]
pub struct Packet {
    /// A buffer pointer and one word (a scalar pair) move in two registers through the
    /// stages and back to the batch loop. A struct of more fields travels through memory,
    /// written field by field and read back whole, which stalls store forwarding.
    buf: Box<[u8; BUF_LEN]>,
    /// The range in `buf` (start: bits 0-15, end: bits 16-31), the port: ingress on
    /// receive, egress once the pipeline has forwarded it (bits 32-39, [`Port::index`]),
    /// and the network instance of its N6 (bits 40-47, [`Packet::instance`]).
    meta: u64,
}

const _: () = assert!(size_of::<Packet>() == 16);
const _: () = assert!(size_of::<Option<Packet>>() == 16);

fn meta(start: u16, end: u16, port: Port) -> u64 {
    u64::from(start) | (u64::from(end) << 16) | ((port as u64) << 32)
}

/// An offset into a buffer, clamped to its end (which fits in `u16`).
#[inline(always)]
fn offset(x: usize) -> u16 {
    u16::try_from(x.min(BUF_LEN)).unwrap_or(u16::MAX)
}

impl fmt::Debug for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Packet({:?}, {} octets)", self.port(), self.len())
    }
}

impl Packet {
    /// An empty packet with a fresh buffer.
    #[inline]
    pub fn new(port: Port) -> Self {
        let h = offset(HEADROOM);
        Self {
            buf: Box::new([0; BUF_LEN]),
            meta: meta(h, h, port),
        }
    }

    /// A packet holding a copy of `data` after the headroom; `None` if it does not fit.
    #[inline]
    pub fn from_bytes(port: Port, data: &[u8]) -> Option<Self> {
        let mut p = Self::new(port);
        p.load(port, data).then_some(p)
    }

    /// Reuses this buffer for `data`; false (and unchanged) if it does not fit.
    #[inline]
    pub fn load(&mut self, port: Port, data: &[u8]) -> bool {
        let Some(dst) = self.buf.get_mut(HEADROOM..HEADROOM + data.len()) else {
            return false;
        };
        dst.copy_from_slice(data);
        self.meta = meta(offset(HEADROOM), offset(HEADROOM + data.len()), port);
        true
    }

    #[inline(always)]
    fn end(&self) -> usize {
        ((self.meta >> 16) & 0xffff) as usize
    }

    /// Ingress port on receive; egress port once the pipeline has forwarded it.
    #[inline(always)]
    pub fn port(&self) -> Port {
        // A table, not a match: the port is read many times a packet.
        const PORTS: [Port; 4] = [Port::N3, Port::N9, Port::N6, Port::N6];
        PORTS[((self.meta >> 32) & 3) as usize]
    }

    /// Sets the port, in the default network instance.
    #[inline(always)]
    pub fn set_port(&mut self, port: Port) {
        self.meta = (self.meta & 0xffff_ffff) | ((port as u64) << 32);
    }

    /// The network instance (an id the data path gives each configured name; 0: the default
    /// one) of the N6 this packet came in on, or leaves by once forwarded there.
    #[inline(always)]
    pub fn instance(&self) -> u8 {
        ((self.meta >> 40) & 0xff) as u8
    }

    /// Sets the network instance of the N6 this packet came in on (the I/O loop, for an N6
    /// that has one).
    #[inline(always)]
    pub fn set_instance(&mut self, instance: u8) {
        self.meta = (self.meta & !(0xff << 40)) | (u64::from(instance) << 40);
    }

    /// Sets where the packet leaves: its port and, on N6, its network instance.
    #[inline(always)]
    pub fn set_egress(&mut self, port: Port, instance: u8) {
        self.meta = (self.meta & 0xffff_ffff) | ((port as u64) << 32) | (u64::from(instance) << 40);
    }

    #[inline]
    pub fn data(&self) -> &[u8] {
        let (s, e) = self.range();
        &self.buf[s..e]
    }

    /// `buffer[start..end]`, empty when out of range.
    #[inline]
    pub fn data_at(&self, start: usize, end: usize) -> &[u8] {
        self.buf.get(start..end).unwrap_or(&[])
    }

    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let (s, e) = self.range();
        &mut self.buf[s..e]
    }

    /// (start, end), which every setter keeps within the buffer and in order; clamped here
    /// as well so that the compiler sees it and indexes without a check.
    #[inline(always)]
    fn range(&self) -> (usize, usize) {
        let e = self.end().min(BUF_LEN);
        (self.start().min(e), e)
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.end().saturating_sub(self.start())
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline(always)]
    pub fn start(&self) -> usize {
        (self.meta & 0xffff) as usize
    }

    /// The whole buffer, headroom included (offsets as [`Packet::start`]).
    #[inline]
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }

    /// Sets the packet's range within the buffer; out-of-range values are clamped.
    #[inline(always)]
    pub fn set_range(&mut self, start: usize, end: usize) {
        let end = offset(end);
        let start = offset(start).min(end);
        // The port and network instance are kept.
        self.meta = (self.meta & !0xffff_ffff) | u64::from(start) | (u64::from(end) << 16);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_and_ranges() {
        let mut p = Packet::from_bytes(Port::N6, &[1, 2, 3]).unwrap();
        assert_eq!(p.data(), &[1, 2, 3]);
        assert_eq!(p.start(), HEADROOM);
        p.set_range(HEADROOM + 1, HEADROOM + 3);
        assert_eq!(p.data(), &[2, 3]);
        p.set_range(5000, 6000);
        assert!(p.is_empty());
        assert!(!p.load(Port::N3, &[0; BUF_LEN]));
        assert!(Packet::from_bytes(Port::N3, &[0; BUF_LEN - HEADROOM]).is_some());
    }

    #[test]
    fn the_instance_stays_with_the_range_and_goes_with_the_port() {
        let mut p = Packet::from_bytes(Port::N6, &[1, 2, 3]).unwrap();
        assert_eq!(p.instance(), 0);
        p.set_instance(7);
        p.set_range(HEADROOM + 1, HEADROOM + 3);
        assert_eq!(
            (p.port(), p.instance(), p.data()),
            (Port::N6, 7, &[2u8, 3][..])
        );
        p.set_egress(Port::N6, 255);
        assert_eq!((p.port(), p.instance(), p.len()), (Port::N6, 255, 2));
        p.set_port(Port::N3);
        assert_eq!((p.port(), p.instance()), (Port::N3, 0));
    }
}
