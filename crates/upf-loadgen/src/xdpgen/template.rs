//! The frames the generator sends: a template and what changes from frame to frame
//! ([`Template::frame`] is the specification of the generator program).

use super::{DST_PORT, GTPU_PORT, MAX_INNER, SRC_PORT, STAMP_LEN, STAMP_MAGIC};
use std::io;
use std::net::Ipv4Addr;

/// The multiplier of the class hash: frame k is high priority iff
/// `(k as u32) * GOLDEN mod 2^32 < share * 2^32` (a Weyl sequence: the classes interleave
/// evenly within every session, whatever the session count).
const GOLDEN: u64 = 0x9e37_79b9;

/// How high-priority frames differ from the template's (low-priority) ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// The QFI of the uplink PDU Session Container.
    Qfi(u8),
    /// The DSCP of the IPv4 header (`addr_off`'s header; its checksum follows).
    Dscp(u8),
}

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
    /// Offset of the QFI octet of the uplink PDU Session Container, if any.
    pub psc_qfi: Option<usize>,
    /// Offset of the stamp (the inner UDP payload), when the payload has room for it.
    pub stamp: Option<usize>,
    /// High-priority frames: their mark and their share of all frames, in 1/2^32.
    pub high: Option<(Mark, u64)>,
    /// Sessions the frames go round (N).
    pub count: u32,
}

pub(super) fn ipv4_header(total: usize, ttl: u8, src: Ipv4Addr, dst: Ipv4Addr) -> [u8; 20] {
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

pub(super) fn udp_header(sport: u16, dport: u16, len: usize) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[4..6].copy_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_be_bytes());
    h
}

pub(super) fn ethernet(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
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
        let psc_qfi = f.len() - 2;
        let ip = f.len();
        inner(&mut f, size, ue_base, dn);
        Ok(Template {
            header_len: ip + 28,
            ip,
            addr_off: ip + 12,
            addr_base: u32::from(ue_base),
            teid: Some((teid_off, teid_base)),
            psc_qfi: Some(psc_qfi),
            stamp: (size >= 28 + STAMP_LEN).then_some(ip + 28),
            high: None,
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
            psc_qfi: None,
            stamp: (size >= 28 + STAMP_LEN).then_some(ip + 28),
            high: None,
            count: count.max(1),
            frame: f,
        })
    }

    /// Marks a `share` (0..=1) of the frames high priority with `mark` (the others keep the
    /// template's QFI / DSCP). A QFI mark needs a PDU Session Container.
    pub fn with_high_priority(mut self, share: f64, mark: Mark) -> io::Result<Template> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if !(0.0..=1.0).contains(&share) {
            return Err(bad(format!("high-priority share {share}: must be 0..=1")));
        }
        match mark {
            Mark::Qfi(q) if self.psc_qfi.is_none() || q > 63 => {
                return Err(bad(format!(
                    "QFI mark {q}: no PDU Session Container, or > 63"
                )))
            }
            Mark::Dscp(d) if d > 63 => return Err(bad(format!("DSCP {d} > 63"))),
            _ => {}
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let threshold = (share * 4_294_967_296.0).round() as u64;
        self.high = Some((mark, threshold));
        Ok(self)
    }

    /// Whether frame `k` is high priority.
    pub fn is_high(&self, k: u64) -> bool {
        self.high.is_some_and(|(_, thr)| {
            #[allow(clippy::cast_possible_truncation)]
            let k32 = k as u32;
            (u64::from(k32) * GOLDEN) & 0xffff_ffff < thr
        })
    }

    /// The octets of frame `k`'s stamp that hold the time (the program writes the clock).
    pub fn stamp_time(&self) -> Option<std::ops::Range<usize>> {
        self.stamp.map(|s| s..s + 8)
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
        let high = self.is_high(k);
        match self.high {
            Some((Mark::Qfi(q), _)) if high => {
                if let Some(o) = self.psc_qfi {
                    f[o] = q;
                }
            }
            Some((Mark::Dscp(d), _)) if high => f[self.ip + 1] = d << 2,
            _ => {}
        }
        if let Some(s) = self.stamp {
            // The time is the program's clock: zero here (see `stamp_time`).
            f[s..s + 8].fill(0);
            let w = STAMP_MAGIC + u32::from(high);
            f[s + 8..s + 12].copy_from_slice(&w.to_ne_bytes());
        }
        f[self.ip + 10..self.ip + 12].fill(0);
        let c = upf_wire::checksum::checksum(&f[self.ip..self.ip + 20]);
        f[self.ip + 10..self.ip + 12].copy_from_slice(&c.to_be_bytes());
        f
    }

    /// Sum of the 16-bit words of the varying IPv4 header without its checksum and address.
    pub(super) fn partial_sum(&self) -> u32 {
        let h = &self.frame[self.ip..self.ip + 20];
        let rel = self.addr_off - self.ip;
        (0..10)
            .filter(|w| *w != 5 && *w * 2 != rel && *w * 2 != rel + 2)
            .map(|w| u32::from(u16::from_be_bytes([h[2 * w], h[2 * w + 1]])))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdpgen::testutil::{dl, ul};

    impl Template {
        fn frame_addr(&self) -> Ipv4Addr {
            Ipv4Addr::from(self.addr_base)
        }
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

    #[test]
    fn classes_interleave_within_every_session() {
        let t = ul().with_high_priority(0.25, Mark::Qfi(1)).unwrap();
        let n = 200_000u64;
        let high = (0..n).filter(|k| t.is_high(*k)).count() as f64 / n as f64;
        assert!((high - 0.25).abs() < 0.005, "{high}");
        for s in 0..20u64 {
            let h = (0..200).filter(|m| t.is_high(s + 1000 * m)).count();
            assert!((20..=80).contains(&h), "session {s}: {h} of 200 high");
        }
        let none = ul().with_high_priority(0.0, Mark::Qfi(1)).unwrap();
        let all = ul().with_high_priority(1.0, Mark::Qfi(1)).unwrap();
        assert!((0..5000).all(|k| !none.is_high(k) && all.is_high(k)));
        assert!(!ul().is_high(0), "no marks: low");
        // The marks land where the specification says.
        let f = t.frame((0..).find(|k| t.is_high(*k)).unwrap());
        assert_eq!(f[t.psc_qfi.unwrap()], 1);
        let d = dl().with_high_priority(0.5, Mark::Dscp(46)).unwrap();
        let k = (0..).find(|k| d.is_high(*k)).unwrap();
        let f = d.frame(k);
        assert_eq!(f[14 + 1], 46 << 2);
        assert_eq!(upf_wire::checksum::checksum(&f[14..34]), 0);
        let w = u32::from_ne_bytes(f[42 + 8..42 + 12].try_into().unwrap());
        assert_eq!(w, STAMP_MAGIC + 1);
        assert!(dl().with_high_priority(0.5, Mark::Qfi(1)).is_err());
        assert!(ul().with_high_priority(1.5, Mark::Qfi(1)).is_err());
        // 40 octets have room for a stamp, 39 not.
        let p = |n| Template::plain(([0; 6], [0; 6]), d.frame_addr(), d.frame_addr(), true, n, 1);
        assert_eq!(p(40).unwrap().stamp, Some(42));
        assert_eq!(p(39).unwrap().stamp, None);
    }
}
