//! Packet buffers with headroom, so that GTP-U encapsulation writes in front of the inner
//! packet instead of moving it, and decapsulation only moves the start.

use core::fmt;

/// Size of every packet buffer: an Ethernet MTU frame plus headroom, rounded up.
pub const BUF_LEN: usize = 2048;
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

    pub const fn index(self) -> usize {
        self as usize
    }

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
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Ingress port on receive; egress port once the pipeline has forwarded it.
    pub port: Port,
}

impl fmt::Debug for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Packet({:?}, {} octets)", self.port, self.len())
    }
}

impl Packet {
    /// An empty packet with a fresh buffer.
    pub fn new(port: Port) -> Self {
        Self {
            buf: vec![0; BUF_LEN].into_boxed_slice(),
            start: HEADROOM,
            end: HEADROOM,
            port,
        }
    }

    /// A packet holding a copy of `data` after the headroom; `None` if it does not fit.
    pub fn from_bytes(port: Port, data: &[u8]) -> Option<Self> {
        let mut p = Self::new(port);
        p.load(port, data).then_some(p)
    }

    /// Reuses this buffer for `data`; false (and unchanged) if it does not fit.
    pub fn load(&mut self, port: Port, data: &[u8]) -> bool {
        let Some(dst) = self.buf.get_mut(HEADROOM..HEADROOM + data.len()) else {
            return false;
        };
        dst.copy_from_slice(data);
        self.start = HEADROOM;
        self.end = HEADROOM + data.len();
        self.port = port;
        true
    }

    pub fn data(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or(&[])
    }

    /// `buffer[start..end]`, empty when out of range.
    pub fn data_at(&self, start: usize, end: usize) -> &[u8] {
        self.buf.get(start..end).unwrap_or(&[])
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        self.buf.get_mut(self.start..self.end).unwrap_or(&mut [])
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    pub fn start(&self) -> usize {
        self.start
    }

    /// The whole buffer, headroom included (offsets as [`Packet::start`]).
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Sets the packet's range within the buffer; out-of-range values are clamped.
    pub fn set_range(&mut self, start: usize, end: usize) {
        self.end = end.min(self.buf.len());
        self.start = start.min(self.end);
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
}
