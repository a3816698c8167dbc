//! Capture files for the decode tool: classic pcap (both byte orders, µs and ns) and pcapng
//! (EPB and SPB, each interface's timestamp resolution), read by pcap-file. Link types:
//! Ethernet (with VLAN tags), raw IP, Linux cooked (SLL, SLL2) and BSD loopback.

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{PcapError, TsResolution};
use std::borrow::Cow;
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

impl From<PcapError> for Error {
    fn from(e: PcapError) -> Self {
        Error(match e {
            PcapError::IncompleteBuffer => "truncated capture",
            PcapError::InvalidField(what) => what,
            PcapError::InvalidInterfaceId(_) => "a packet names an unknown interface",
            _ => "unreadable capture",
        })
    }
}

pub const LINKTYPE_NULL: u32 = 0;
pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW: u32 = 101;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_IPV4: u32 = 228;
pub const LINKTYPE_IPV6: u32 = 229;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

/// Reads every frame of a pcap or pcapng file held in memory.
pub fn read(file: &[u8]) -> Result<Vec<Frame<'_>>, Error> {
    match file.get(..4) {
        Some([0x0a, 0x0d, 0x0d, 0x0a]) => read_pcapng(file),
        Some(_) => read_pcap(file),
        None => Err(Error("file too short for a capture header")),
    }
}

/// Frames of a slice parsed in place: always borrowed from the file.
fn borrowed(data: Cow<'_, [u8]>) -> Result<&[u8], Error> {
    match data {
        Cow::Borrowed(d) => Ok(d),
        Cow::Owned(_) => Err(Error("unreadable capture")),
    }
}

fn read_pcap(file: &[u8]) -> Result<Vec<Frame<'_>>, Error> {
    let (mut rest, parser) = PcapParser::new(file).map_err(|e| match e {
        PcapError::IncompleteBuffer => Error("truncated pcap header"),
        _ => Error("not a pcap or pcapng file (bad magic)"),
    })?;
    let header = parser.header();
    // The upper bits of the link type field may carry FCS flags.
    let link_type = u32::from(header.datalink) & 0x0fff_ffff;
    let ticks = match header.ts_resolution {
        TsResolution::MicroSecond => 1e6,
        TsResolution::NanoSecond => 1e9,
    };
    let mut frames = Vec::new();
    while !rest.is_empty() {
        // Raw records: a snapshot length smaller than a packet's is no error here.
        let (r, p) = parser.next_raw_packet(rest)?;
        rest = r;
        frames.push(Frame {
            time: f64::from(p.ts_sec) + f64::from(p.ts_frac) / ticks,
            link_type,
            data: borrowed(p.data)?,
        });
    }
    Ok(frames)
}

fn read_pcapng(file: &[u8]) -> Result<Vec<Frame<'_>>, Error> {
    let (mut rest, mut parser) = PcapNgParser::new(file)?;
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let (r, block) = parser.next_block(rest)?;
        rest = r;
        match block {
            Block::EnhancedPacket(p) => {
                let ifc = parser
                    .packet_interface(&p)
                    .ok_or(Error("EPB names an unknown interface"))?;
                // pcap-file keeps the timestamp's ticks as nanoseconds; they are in the
                // interface's resolution.
                #[allow(clippy::cast_precision_loss)] // a float of seconds is what we print
                let time = p.timestamp.as_nanos() as f64 / ticks_per_second(ifc);
                frames.push(Frame {
                    time,
                    link_type: u32::from(ifc.linktype),
                    data: borrowed(p.data)?,
                });
            }
            Block::SimplePacket(p) => {
                let ifc = parser
                    .interfaces()
                    .first()
                    .ok_or(Error("SPB before any IDB"))?;
                let data = borrowed(p.data)?;
                // The block's data is padded to 32 bits: the packet is its original length.
                let len = usize::try_from(p.original_len).map_or(data.len(), |l| l.min(data.len()));
                frames.push(Frame {
                    time: 0.0,
                    link_type: u32::from(ifc.linktype),
                    data: &data[..len],
                });
            }
            _ => {}
        }
    }
    Ok(frames)
}

/// Ticks per second of an interface, from its if_tsresol option (default µs).
fn ticks_per_second(ifc: &InterfaceDescriptionBlock<'_>) -> f64 {
    ifc.options
        .iter()
        .find_map(|o| match o {
            InterfaceDescriptionOption::IfTsResol(r) => {
                let exp = i32::from(r & 0x7f);
                Some(if r & 0x80 == 0 {
                    10f64.powi(exp)
                } else {
                    2f64.powi(exp)
                })
            }
            _ => None,
        })
        .unwrap_or(1e6)
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

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::DataLink;
    use std::time::Duration;

    /// A classic pcap (µs, little endian) of raw IP packets: (µs, packet).
    fn pcap(packets: &[(u64, &[u8])]) -> Vec<u8> {
        let header = PcapHeader {
            datalink: DataLink::RAW,
            endianness: pcap_file::Endianness::Little,
            ..Default::default()
        };
        let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
        for &(us, p) in packets {
            let len = u32::try_from(p.len()).unwrap();
            w.write_packet(&PcapPacket::new(Duration::from_micros(us), len, p))
                .unwrap();
        }
        w.into_writer()
    }

    #[test]
    fn pcap_reads_back() {
        let bytes = pcap(&[(1_500_000, &[0x45, 0, 0, 20]), (2_000_001, &[0x60, 1])]);
        let frames = read(&bytes).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].data, &[0x45, 0, 0, 20]);
        assert!((frames[0].time - 1.5).abs() < 1e-9);
        assert!((frames[1].time - 2.000_001).abs() < 1e-9);
        assert_eq!(
            ip_payload(frames[1].link_type, frames[1].data),
            Some(&[0x60, 1][..])
        );
    }

    #[test]
    fn pcapng_reads_back_in_the_interfaces_resolution() {
        let mut w = PcapNgWriter::new(Vec::new()).unwrap();
        let mut idb = InterfaceDescriptionBlock::new(DataLink::RAW, 65_535);
        idb.options.push(InterfaceDescriptionOption::IfTsResol(9));
        w.write_pcapng_block(idb).unwrap();
        let data = [0x45u8, 0, 0, 20, 1];
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            // Ticks of the interface: nanoseconds here.
            timestamp: Duration::from_nanos(1_500_000_001),
            original_len: 5,
            data: Cow::Borrowed(&data[..]),
            options: vec![],
        };
        w.write_pcapng_block(epb).unwrap();
        let bytes = w.into_inner();
        let frames = read(&bytes).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].data, &data);
        assert_eq!(frames[0].link_type, LINKTYPE_RAW);
        assert!(
            (frames[0].time - 1.500_000_001).abs() < 1e-9,
            "{}",
            frames[0].time
        );
    }

    #[test]
    fn truncated_files_are_errors() {
        let bytes = pcap(&[(0, &[0x45; 40])]);
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
