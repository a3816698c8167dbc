//! Minimal capture-file support for the decode tool and tests: reads classic pcap (both byte
//! orders, µs and ns) and pcapng (SHB/IDB/EPB/SPB), writes classic pcap. Link types: Ethernet
//! (with VLAN tags), raw IP, Linux cooked (SLL, SLL2) and BSD loopback.

use std::fmt;

/// One captured frame: its time (seconds since the epoch) and the IP packet inside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame<'a> {
    pub time: f64,
    pub link_type: u32,
    pub data: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub &'static str);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}
impl std::error::Error for Error {}

pub const LINKTYPE_NULL: u32 = 0;
pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW: u32 = 101;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_IPV4: u32 = 228;
pub const LINKTYPE_IPV6: u32 = 229;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

fn rd16(b: &[u8], at: usize, le: bool) -> Option<u16> {
    let a: [u8; 2] = b.get(at..at + 2)?.try_into().ok()?;
    Some(if le {
        u16::from_le_bytes(a)
    } else {
        u16::from_be_bytes(a)
    })
}
fn rd32(b: &[u8], at: usize, le: bool) -> Option<u32> {
    let a: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(if le {
        u32::from_le_bytes(a)
    } else {
        u32::from_be_bytes(a)
    })
}

/// Reads every frame of a pcap or pcapng file held in memory.
pub fn read(file: &[u8]) -> Result<Vec<Frame<'_>>, Error> {
    match file.get(..4) {
        Some([0x0a, 0x0d, 0x0d, 0x0a]) => read_pcapng(file),
        Some(_) => read_pcap(file),
        None => Err(Error("file too short for a capture header")),
    }
}

fn read_pcap(file: &[u8]) -> Result<Vec<Frame<'_>>, Error> {
    let magic = rd32(file, 0, true).ok_or(Error("truncated pcap header"))?;
    let (le, nanos) = match magic {
        0xa1b2_c3d4 => (true, false),
        0xa1b2_3c4d => (true, true),
        0xd4c3_b2a1 => (false, false),
        0x4d3c_b2a1 => (false, true),
        _ => return Err(Error("not a pcap or pcapng file (bad magic)")),
    };
    let link_type = rd32(file, 20, le).ok_or(Error("truncated pcap header"))? & 0x0fff_ffff;
    let mut frames = Vec::new();
    let mut at = 24;
    while at < file.len() {
        let rec = (|| {
            let secs = rd32(file, at, le)?;
            let frac = rd32(file, at + 4, le)?;
            let caplen = usize::try_from(rd32(file, at + 8, le)?).ok()?;
            let data = file.get(at + 16..(at + 16).checked_add(caplen)?)?;
            Some((secs, frac, caplen, data))
        })();
        let (secs, frac, caplen, data) = rec.ok_or(Error("truncated pcap record"))?;
        let div = if nanos { 1e9 } else { 1e6 };
        frames.push(Frame {
            time: f64::from(secs) + f64::from(frac) / div,
            link_type,
            data,
        });
        at += 16 + caplen;
    }
    Ok(frames)
}

fn read_pcapng(file: &[u8]) -> Result<Vec<Frame<'_>>, Error> {
    let mut frames = Vec::new();
    let mut links: Vec<(u32, f64)> = Vec::new(); // (link type, ticks per second) per interface
    let mut le = true;
    let mut at = 0;
    while at < file.len() {
        let btype = rd32(file, at, le).ok_or(Error("truncated pcapng block"))?;
        if btype == 0x0a0d_0d0a {
            // Section header: the byte-order magic decides how the rest is read.
            le = match file.get(at + 8..at + 12) {
                Some([0x4d, 0x3c, 0x2b, 0x1a]) => true,
                Some([0x1a, 0x2b, 0x3c, 0x4d]) => false,
                _ => return Err(Error("bad pcapng byte-order magic")),
            };
            links.clear();
        }
        let blen = usize::try_from(rd32(file, at + 4, le).ok_or(Error("truncated pcapng block"))?)
            .map_err(|_| Error("bad block length"))?;
        if blen < 12 || !blen.is_multiple_of(4) {
            return Err(Error("bad pcapng block length"));
        }
        let block = file
            .get(at..at + blen)
            .ok_or(Error("truncated pcapng block"))?;
        let body = &block[8..blen - 4];
        match btype {
            1 => {
                let lt = u32::from(rd16(body, 0, le).ok_or(Error("truncated IDB"))?);
                links.push((lt, idb_ticks(body, le)));
            }
            6 => {
                let ifc = usize::try_from(rd32(body, 0, le).ok_or(Error("truncated EPB"))?)
                    .unwrap_or(usize::MAX);
                let &(lt, tps) = links
                    .get(ifc)
                    .ok_or(Error("EPB names an unknown interface"))?;
                let hi = u64::from(rd32(body, 4, le).ok_or(Error("truncated EPB"))?);
                let lo = u64::from(rd32(body, 8, le).ok_or(Error("truncated EPB"))?);
                let caplen = usize::try_from(rd32(body, 12, le).ok_or(Error("truncated EPB"))?)
                    .unwrap_or(usize::MAX);
                let data = body
                    .get(20..20usize.saturating_add(caplen))
                    .ok_or(Error("truncated EPB data"))?;
                #[allow(clippy::cast_precision_loss)]
                // timestamps: a float of seconds is what we print
                let time = ((hi << 32) | lo) as f64 / tps;
                frames.push(Frame {
                    time,
                    link_type: lt,
                    data,
                });
            }
            3 => {
                let &(lt, _) = links.first().ok_or(Error("SPB before any IDB"))?;
                let len = usize::try_from(rd32(body, 0, le).ok_or(Error("truncated SPB"))?)
                    .unwrap_or(usize::MAX);
                let data = body
                    .get(4..4usize.saturating_add(len).min(body.len()))
                    .ok_or(Error("truncated SPB"))?;
                frames.push(Frame {
                    time: 0.0,
                    link_type: lt,
                    data,
                });
            }
            _ => {}
        }
        at += blen;
    }
    Ok(frames)
}

/// Ticks per second of an interface, from its if_tsresol option (default µs).
fn idb_ticks(body: &[u8], le: bool) -> f64 {
    let mut at = 8;
    while let (Some(code), Some(len)) = (rd16(body, at, le), rd16(body, at + 2, le)) {
        if code == 0 {
            break;
        }
        if code == 9 && len >= 1 {
            if let Some(&r) = body.get(at + 4) {
                let exp = i32::from(r & 0x7f);
                return if r & 0x80 == 0 {
                    10f64.powi(exp)
                } else {
                    2f64.powi(exp)
                };
            }
        }
        at += 4 + usize::from(len).div_ceil(4) * 4;
    }
    1e6
}

/// The IP packet inside a frame of the given link type, if it carries IPv4 or IPv6.
pub fn ip_payload(link_type: u32, data: &[u8]) -> Option<&[u8]> {
    let (ethertype, rest) = match link_type {
        LINKTYPE_ETHERNET => {
            let mut et = u16::from_be_bytes(data.get(12..14)?.try_into().ok()?);
            let mut at = 14;
            while et == 0x8100 || et == 0x88a8 {
                et = u16::from_be_bytes(data.get(at + 2..at + 4)?.try_into().ok()?);
                at += 4;
            }
            (et, data.get(at..)?)
        }
        LINKTYPE_LINUX_SLL => (
            u16::from_be_bytes(data.get(14..16)?.try_into().ok()?),
            data.get(16..)?,
        ),
        LINKTYPE_LINUX_SLL2 => (
            u16::from_be_bytes(data.get(0..2)?.try_into().ok()?),
            data.get(20..)?,
        ),
        LINKTYPE_NULL => (0, data.get(4..)?),
        LINKTYPE_RAW | LINKTYPE_IPV4 | LINKTYPE_IPV6 => (0, data),
        _ => return None,
    };
    match (ethertype, rest.first()? >> 4) {
        (0x0800 | 0x86dd | 0, 4 | 6) => Some(rest),
        _ => None,
    }
}

/// Writes a classic pcap (µs, little endian) of raw IP packets (link type 101).
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        let mut buf = Vec::new();
        buf.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        buf.extend_from_slice(&2u16.to_le_bytes());
        buf.extend_from_slice(&4u16.to_le_bytes());
        buf.extend_from_slice(&[0; 8]);
        buf.extend_from_slice(&65535u32.to_le_bytes());
        buf.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
        Self { buf }
    }

    /// Appends one IP packet with the given timestamp in microseconds.
    pub fn push(&mut self, micros: u64, ip_packet: &[u8]) {
        let len = u32::try_from(ip_packet.len()).unwrap_or(u32::MAX);
        let secs = u32::try_from(micros / 1_000_000).unwrap_or(u32::MAX);
        let us = u32::try_from(micros % 1_000_000).unwrap_or(0);
        for v in [secs, us, len, len] {
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        self.buf.extend_from_slice(ip_packet);
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_back() {
        let mut w = Writer::new();
        w.push(1_500_000, &[0x45, 0, 0, 20]);
        w.push(2_000_001, &[0x60, 1]);
        let bytes = w.into_bytes();
        let frames = read(&bytes).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].data, &[0x45, 0, 0, 20]);
        assert!((frames[0].time - 1.5).abs() < 1e-9);
        assert_eq!(
            ip_payload(frames[1].link_type, frames[1].data),
            Some(&[0x60, 1][..])
        );
    }

    #[test]
    fn truncated_files_are_errors() {
        let mut w = Writer::new();
        w.push(0, &[0x45; 40]);
        let bytes = w.into_bytes();
        for n in 0..bytes.len() {
            let _ = read(&bytes[..n]);
        }
        assert!(read(&bytes[..bytes.len() - 1]).is_err());
        assert!(read(b"garbage!").is_err());
    }

    #[test]
    fn ethernet_with_vlan() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x81, 0x00, 0, 5, 0x08, 0x00, 0x45, 0]);
        assert_eq!(ip_payload(LINKTYPE_ETHERNET, &f), Some(&[0x45, 0][..]));
    }
}
