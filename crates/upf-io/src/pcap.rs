//! A decorator that writes every packet received and/or sent by a backend to a pcap file
//! (LINKTYPE_RAW: each record is an IP packet; microsecond timestamps), for Wireshark or
//! tshark. Packets are recorded as the pipeline sees them: after RX, and as handed to TX
//! (including those the backend then drops). The file header and records are pcap-file's.
//!
//! A failing capture never disturbs the data path: the first write error stops capturing and
//! is returned by the next [`PacketIo::flush`].

use crate::{IoStats, PacketIo, Pool};
use byteorder_slice::LittleEndian;
use pcap_file::pcap::{PcapHeader, PcapPacket};
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};
use upf_packet::Packet;

/// Longest record written (a packet buffer is smaller).
pub const SNAPLEN: u32 = 65_535;

/// Which packets a [`Capture`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Rx,
    Tx,
    Both,
}

impl Direction {
    fn rx(self) -> bool {
        matches!(self, Direction::Rx | Direction::Both)
    }

    fn tx(self) -> bool {
        matches!(self, Direction::Tx | Direction::Both)
    }
}

/// The file's header: pcap 2.4, little endian, µs, raw IP.
fn header() -> PcapHeader {
    PcapHeader {
        version_major: 2,
        version_minor: 4,
        ts_correction: 0,
        ts_accuracy: 0,
        snaplen: SNAPLEN,
        datalink: DataLink::RAW,
        ts_resolution: TsResolution::MicroSecond,
        endianness: Endianness::Little,
    }
}

fn io_error(e: PcapError) -> io::Error {
    match e {
        PcapError::IoError(e) => e,
        e => io::Error::other(e),
    }
}

/// A backend whose traffic is also written to a pcap file.
#[derive(Debug)]
pub struct Capture<T: PacketIo> {
    inner: T,
    out: Option<BufWriter<File>>,
    dir: Direction,
    records: u64,
    error: Option<io::Error>,
}

impl<T: PacketIo> Capture<T> {
    /// Creates (truncates) `path` and captures `dir` packets of `inner` into it.
    pub fn create(inner: T, path: impl AsRef<Path>, dir: Direction) -> io::Result<Self> {
        let path = path.as_ref();
        let f = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("pcap file {}: {e}", path.display())))?;
        let mut out = BufWriter::with_capacity(1 << 16, f);
        header().write_to(&mut out).map_err(io_error)?;
        Ok(Self {
            inner,
            out: Some(out),
            dir,
            records: 0,
            error: None,
        })
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    pub fn inner(&self) -> &T {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    fn record(&mut self, packets: &[Packet]) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        if packets.is_empty() {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        for p in packets {
            let d = p.data();
            let len = u32::try_from(d.len()).unwrap_or(u32::MAX);
            let body = d.get(..SNAPLEN as usize).unwrap_or(d);
            let record = PcapPacket::new(now, len, body);
            if let Err(e) =
                record.write_to::<_, LittleEndian>(out, TsResolution::MicroSecond, SNAPLEN)
            {
                self.error = Some(io_error(e));
                self.out = None;
                return;
            }
            self.records += 1;
        }
    }

    fn flush_file(&mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(io::Error::new(
                e.kind(),
                format!("pcap capture stopped: {e}"),
            ));
        }
        match self.out.as_mut().map(|out| out.flush()) {
            Some(Err(e)) => {
                self.out = None;
                Err(io::Error::new(
                    e.kind(),
                    format!("pcap capture stopped: {e}"),
                ))
            }
            _ => Ok(()),
        }
    }
}

impl<T: PacketIo> PacketIo for Capture<T> {
    fn rx_batch(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let start = batch.len();
        let n = self.inner.rx_batch(pool, batch, max)?;
        if self.dir.rx() {
            self.record(batch.get(start..).unwrap_or(&[]));
        }
        Ok(n)
    }

    fn rx_groups(&self) -> usize {
        self.inner.rx_groups()
    }

    fn rx_group(
        &mut self,
        group: usize,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let start = batch.len();
        let n = self.inner.rx_group(group, pool, batch, max)?;
        if self.dir.rx() {
            self.record(batch.get(start..).unwrap_or(&[]));
        }
        Ok(n)
    }

    fn group_fd(&self, group: usize) -> Option<BorrowedFd<'_>> {
        self.inner.group_fd(group)
    }

    fn tx_batch(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> io::Result<usize> {
        if self.dir.tx() {
            self.record(batch);
        }
        self.inner.tx_batch(batch, pool)
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.fd()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()?;
        self.flush_file()
    }

    fn stats(&self) -> IoStats {
        self.inner.stats()
    }

    fn describe(&self) -> String {
        format!("{} + pcap ({:?})", self.inner.describe(), self.dir)
    }
}

impl<T: PacketIo> Drop for Capture<T> {
    fn drop(&mut self) {
        if let Some(out) = self.out.as_mut() {
            let _ = out.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::{self, MemIo};
    use upf_packet::Port;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("upfio-{}-{name}.pcap", std::process::id()))
    }

    /// The records of a pcap file written by [`Capture`]: (seconds, µs, included, original, data).
    fn read_pcap(path: &Path) -> Vec<(u32, u32, u32, u32, Vec<u8>)> {
        let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
        assert_eq!(r.header(), header());
        let mut out = Vec::new();
        while let Some(p) = r.next_raw_packet() {
            let p = p.unwrap();
            assert_eq!(p.incl_len as usize, p.data.len());
            out.push((p.ts_sec, p.ts_frac, p.incl_len, p.orig_len, p.data.to_vec()));
        }
        out
    }

    #[test]
    fn the_header_is_pcap_2_4_raw_ip_in_microseconds() {
        let mut h = Vec::new();
        header().write_to(&mut h).unwrap();
        let u32_at = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().unwrap());
        assert_eq!(u32_at(0), 0xa1b2_c3d4, "magic (µs)");
        assert_eq!(&h[4..8], &[2, 0, 4, 0], "version 2.4");
        assert_eq!((u32_at(8), u32_at(12)), (0, 0), "thiszone, sigfigs");
        assert_eq!(u32_at(16), 65_535, "snaplen");
        assert_eq!(u32_at(20), 101, "LINKTYPE_RAW");
        assert_eq!(h.len(), 24);
    }

    fn ip(n: u8, len: usize) -> Vec<u8> {
        let mut p = vec![n; len];
        p[0] = 0x45;
        p
    }

    #[test]
    fn capture_rx_and_tx_to_pcap() {
        let path = temp("both");
        let (io, peer) = mem::pair(Port::N3);
        let mut cap = Capture::create(io, &path, Direction::Both).unwrap();
        let mut pool = Pool::new(16);
        peer.inject(&ip(1, 40));
        peer.inject(&ip(2, 1500));
        let mut b = vec![Packet::from_bytes(Port::N3, &ip(9, 20)).unwrap()];
        // Packets already in the batch are not recorded as received.
        assert_eq!(cap.rx_batch(&mut pool, &mut b, 8).unwrap(), 2);
        assert_eq!(cap.tx_batch(&mut b, &mut pool).unwrap(), 3);
        assert_eq!(cap.records(), 5);
        cap.flush().unwrap();
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let recs = read_pcap(&path);
        let lens: Vec<u32> = recs.iter().map(|r| r.2).collect();
        assert_eq!(lens, [40, 1500, 20, 40, 1500]);
        for (sec, usec, incl, orig, data) in &recs {
            assert_eq!(incl, orig);
            assert!(*usec < 1_000_000);
            assert!(u64::from(*sec) + 60 >= before && u64::from(*sec) <= before + 1);
            assert_eq!(data[0], 0x45);
        }
        assert_eq!(recs[1].4, ip(2, 1500));
        assert_eq!(recs[2].4, ip(9, 20));
        assert_eq!(peer.take_sent().len(), 3);
        assert!(cap.describe().contains("pcap"));
        assert_eq!(cap.stats().rx_packets, 2);
        drop(cap);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn capture_one_direction_and_flush_on_drop() {
        for (dir, want) in [(Direction::Rx, vec![30]), (Direction::Tx, vec![50, 30])] {
            let path = temp(&format!("{dir:?}"));
            let (io, peer) = mem::pair(Port::N6);
            let mut cap = Capture::create(io, &path, dir).unwrap();
            let mut pool = Pool::new(16);
            peer.inject(&ip(1, 30));
            let mut b = vec![Packet::from_bytes(Port::N6, &ip(2, 50)).unwrap()];
            cap.rx_batch(&mut pool, &mut b, 8).unwrap();
            cap.tx_batch(&mut b, &mut pool).unwrap();
            drop(cap); // no flush(): Drop flushes
            let lens: Vec<u32> = read_pcap(&path).iter().map(|r| r.3).collect();
            assert_eq!(lens, want, "{dir:?}");
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn capture_errors_do_not_stop_traffic() {
        let e = Capture::create(
            mem::pair(Port::N3).0,
            "/nonexistent/dir/x.pcap",
            Direction::Both,
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/dir/x.pcap"), "{e}");
        // /dev/full: every write fails once the buffer is written out.
        let (io, peer): (MemIo, _) = mem::pair(Port::N3);
        let Ok(mut cap) = Capture::create(io, "/dev/full", Direction::Both) else {
            eprintln!("skipped the write-error part: no /dev/full");
            return;
        };
        let mut pool = Pool::new(64);
        let mut b = Vec::new();
        for _ in 0..100 {
            peer.inject(&ip(1, 1500));
        }
        assert_eq!(cap.rx_batch(&mut pool, &mut b, 100).unwrap(), 100);
        assert_eq!(cap.tx_batch(&mut b, &mut pool).unwrap(), 100);
        assert!(cap.records() < 200, "capture stopped at the first error");
        let e = cap.flush().unwrap_err();
        assert!(e.to_string().contains("pcap capture stopped"), "{e}");
        cap.flush().unwrap(); // reported once; capture stays off
        peer.inject(&ip(1, 40));
        assert_eq!(cap.rx_batch(&mut pool, &mut b, 8).unwrap(), 1);
        assert_eq!(peer.take_sent().len(), 100);
    }
}
