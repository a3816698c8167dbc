//! Fixed-offset fast paths for the encodings nearly every packet has; anything else (and
//! every malformed packet) falls back to the general codec in `upf_wire`, and tests hold the
//! two to the same answers:
//! - a G-PDU in IPv4 without options and UDP, with no GTP-U option or exactly one PDU Session
//!   Container of one word;
//! - an inner IPv4 header without options carrying TCP or UDP;
//! - GTP-U/UDP/IPv4 encapsulation by copying a header built once by the general encoder and
//!   patching lengths, identification, ECN, checksum and the QFI octet.

use crate::flow::Flow4;
use core::ops::Range;
use std::net::Ipv4Addr;
use upf_wire::checksum;
use upf_wire::encap::{encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;

#[inline(always)]
fn u16_at(d: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([d[i], d[i + 1]])
}

/// What the pipeline needs of a G-PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpdu {
    pub teid: u32,
    pub qfi: Option<u8>,
    /// The inner packet, relative to the start of the outer IP header.
    pub inner: Range<usize>,
}

/// The common G-PDU form, or `None`.
#[inline(always)]
pub fn gpdu_v4(d: &[u8]) -> Option<Gpdu> {
    if d.len() < 36 || d[0] != 0x45 || d[9] != 17 {
        return None;
    }
    let total = usize::from(u16_at(d, 2));
    // Not a fragment (MF clear, offset 0), lengths consistent end to end, checksum right.
    if total > d.len()
        || u16_at(d, 6) & 0x3fff != 0
        || usize::from(u16_at(d, 24)) + 20 != total
        || usize::from(u16_at(d, 30)) + 36 != total
        || d[29] != 0xff
        || checksum::checksum(&d[..20]) != 0
    {
        return None;
    }
    let teid = u32::from_be_bytes([d[32], d[33], d[34], d[35]]);
    match d[28] {
        0x30 => Some(Gpdu {
            teid,
            qfi: None,
            inner: 36..total,
        }),
        // E flag: one extension, a PDU Session Container (0x85) of one word, PDU type DL or UL
        // without optional fields, and no further extension.
        0x34 if total >= 44 && d[39] == 0x85 && d[40] == 1 && d[43] == 0 && d[41] >> 4 <= 1 => {
            Some(Gpdu {
                teid,
                qfi: Some(d[42] & 0x3f),
                inner: 44..total,
            })
        }
        _ => None,
    }
}

/// The classification key of an IPv4 packet without options carrying TCP or UDP (first
/// fragment or unfragmented), or `None`.
#[inline(always)]
pub fn flow_v4(ip: &[u8]) -> Option<Flow4> {
    if ip.len() < 24 || ip[0] != 0x45 {
        return None;
    }
    let total = usize::from(u16_at(ip, 2));
    let proto = ip[9];
    if total > ip.len() || total < 24 || u16_at(ip, 6) & 0x1fff != 0 || !(proto == 6 || proto == 17)
    {
        return None;
    }
    let addr = |i: usize| u32::from_be_bytes([ip[i], ip[i + 1], ip[i + 2], ip[i + 3]]);
    Some(Flow4 {
        src: addr(12),
        dst: addr(16),
        src_port: u16_at(ip, 20),
        dst_port: u16_at(ip, 22),
        proto,
        tos: ip[1],
    })
}

/// A GTP-U/UDP/IPv4 header to copy in front of packets: built once by the general encoder
/// with an empty payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Template {
    /// The header, right-aligned: every write copies all 44 octets, ending where the
    /// payload starts (a shorter header's leading octets land in the headroom), so that the
    /// copy is one fixed-size move and never a `memcpy` call.
    bytes: [u8; 44],
    len: u8,
    psc: bool,
    /// The one's-complement sum of the IPv4 header with total length, identification, ECN
    /// and checksum zero: the checksum is finished from it and the per-packet fields, not
    /// summed from the freshly written header (whose wide reload of narrow stores stalled).
    sum: u16,
}

const TEMPLATE_LEN: usize = 44;

impl Template {
    /// No header (a placeholder in fixed-size records).
    pub const EMPTY: Template = Template {
        bytes: [0; TEMPLATE_LEN],
        len: 0,
        psc: false,
        sum: 0,
    };

    /// From a header as the encoder wrote it for an empty payload.
    fn new(hdr: &[u8], psc: bool) -> Option<Self> {
        let mut bytes = [0u8; TEMPLATE_LEN];
        let at = TEMPLATE_LEN.checked_sub(hdr.len())?;
        let h = bytes.get_mut(at..)?;
        h.copy_from_slice(hdr);
        // The per-packet fields, zero (so that equal tunnels give equal templates): ECN,
        // total length, identification, checksum, UDP and GTP-U lengths.
        h[1] &= !3;
        for r in [2..6, 10..12, 24..26, 30..32] {
            h.get_mut(r)?.fill(0);
        }
        let ip = bytes.get(at..at + 20)?;
        Some(Self {
            bytes,
            len: u8::try_from(hdr.len()).ok()?,
            psc,
            sum: checksum::sum(ip),
        })
    }

    /// The header as it is written (left-aligned).
    fn header(&self) -> &[u8] {
        &self.bytes[TEMPLATE_LEN - usize::from(self.len)..]
    }

    /// The same tunnel's header without a PDU Session Container: the first 36 octets with
    /// the E flag cleared (lengths and checksum are written per packet). Taken per packet,
    /// so nothing is summed again: the IPv4 header, and so its sum, is the same.
    pub fn without_psc(&self) -> Template {
        if !self.psc {
            return *self;
        }
        let mut bytes = [0u8; TEMPLATE_LEN];
        let h = &mut bytes[TEMPLATE_LEN - 36..];
        h.copy_from_slice(&self.header()[..36]);
        h[28] &= !0x04;
        Template {
            bytes,
            len: 36,
            psc: false,
            sum: self.sum,
        }
    }

    /// `psc`: with a PDU Session Container (downlink type when `downlink`); its QFI octet is
    /// written per packet.
    pub fn v4(
        src: Ipv4Addr,
        dst: Ipv4Addr,
        teid: u32,
        dscp: u8,
        ttl: u8,
        psc: Option<bool>,
    ) -> Option<Self> {
        let mut buf = [0u8; 64];
        let container = psc.map(|dl| {
            if dl {
                PduSessionContainer::dl(0)
            } else {
                PduSessionContainer::ul(0)
            }
        });
        let params = EncapV4 {
            src,
            dst,
            ident: 0,
            dont_frag: false,
            tunnel: GtpuTunnel {
                teid,
                src_port: crate::GTPU_PORT,
                dst_port: crate::GTPU_PORT,
                psc: container,
                ttl,
                dscp,
                ecn: 0,
            },
        };
        let start = encapsulate_gtpu_v4(&mut buf, 64, 0, &params).ok()?;
        Self::new(buf.get(start..)?, psc.is_some())
    }

    /// This template with its peer address and TEID zero (what sessions alike share), and
    /// those two apart (each session's own), for [`Template::write`].
    pub fn generic(&self) -> Option<(Template, Tunnel)> {
        let at = TEMPLATE_LEN.checked_sub(usize::from(self.len))?;
        let mut t = *self;
        let h = t.bytes.get_mut(at..)?;
        let peer: [u8; 4] = h.get(16..20)?.try_into().ok()?;
        let teid: [u8; 4] = h.get(32..36)?.try_into().ok()?;
        h.get_mut(16..20)?.fill(0);
        h.get_mut(32..36)?.fill(0);
        t.sum = checksum::sum(h.get(..20)?);
        Some((t, Tunnel { peer, teid }))
    }

    /// Writes the header in front of `buf[ds..de]`; returns the new start, or `None` without
    /// touching `buf` when there is no room or the packet would be too long. `tunnel`: the
    /// peer and TEID of a [`Template::generic`] template (none: the template's own).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn write(
        &self,
        buf: &mut [u8],
        ds: usize,
        de: usize,
        ident: u16,
        ecn: u8,
        qfi_octet: u8,
        tunnel: Option<&Tunnel>,
    ) -> Option<usize> {
        let hl = usize::from(self.len);
        let start = ds.checked_sub(hl)?;
        let total = u16::try_from(de.checked_sub(start)?).ok()?;
        if hl < 36 {
            return None;
        }
        let room = buf.get_mut(ds.checked_sub(TEMPLATE_LEN)?..ds)?;
        let room: &mut [u8; TEMPLATE_LEN] = room.try_into().ok()?;
        *room = self.bytes;
        let h = &mut room[TEMPLATE_LEN - hl..];
        let ecn = ecn & 3;
        h[1] |= ecn;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[4..6].copy_from_slice(&ident.to_be_bytes());
        // ECN sits in the low octet of the first word.
        let c = match tunnel {
            None => !checksum::combine(&[self.sum, total, ident, u16::from(ecn)]),
            Some(t) => {
                h[16..20].copy_from_slice(&t.peer);
                h[32..36].copy_from_slice(&t.teid);
                let [a, b, c, d] = t.peer;
                let words = [u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d])];
                !checksum::combine(&[self.sum, total, ident, u16::from(ecn), words[0], words[1]])
            }
        };
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h[24..26].copy_from_slice(&(total - 20).to_be_bytes());
        h[30..32].copy_from_slice(&(total - 36).to_be_bytes());
        if self.psc {
            h[42] = qfi_octet;
        }
        Some(start)
    }
}

/// A GTP-U tunnel's peer address and TEID as they are written into a [`Template::generic`]
/// header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tunnel {
    peer: [u8; 4],
    teid: [u8; 4],
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use upf_wire::encap::decapsulate;

    fn gpdu(teid: u32, psc: Option<PduSessionContainer>, inner: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; 128 + inner.len()];
        buf[128..].copy_from_slice(inner);
        let p = EncapV4 {
            src: Ipv4Addr::new(192, 0, 2, 100),
            dst: Ipv4Addr::new(192, 0, 2, 1),
            ident: 7,
            dont_frag: false,
            tunnel: GtpuTunnel {
                teid,
                src_port: 2152,
                dst_port: 2152,
                psc,
                ttl: 64,
                dscp: 0,
                ecn: 0,
            },
        };
        let s = encapsulate_gtpu_v4(&mut buf, 128, inner.len(), &p).unwrap();
        buf.split_off(s)
    }

    /// Whatever the fast path accepts, the general decoder reads the same way.
    fn agrees(d: &[u8]) {
        if let Some(g) = gpdu_v4(d) {
            let full = decapsulate(d).expect("general decoder accepts what the fast path does");
            assert_eq!(full.gtpu.teid, g.teid);
            assert_eq!(full.gtpu.ext.psc.map(|p| p.qfi), g.qfi);
            assert_eq!(full.inner, g.inner);
        }
    }

    #[test]
    fn common_forms_take_the_fast_path() {
        let inner = [0x45u8; 30];
        for psc in [
            None,
            Some(PduSessionContainer::ul(9)),
            Some(PduSessionContainer::dl(5)),
        ] {
            let d = gpdu(0x1234, psc, &inner);
            let g = gpdu_v4(&d).expect("fast path");
            assert_eq!(g.qfi, psc.map(|p| p.qfi));
            agrees(&d);
        }
        // A PPI makes the container two words: general path.
        let ppi = PduSessionContainer {
            ppi: Some(3),
            ..PduSessionContainer::dl(5)
        };
        assert!(gpdu_v4(&gpdu(1, Some(ppi), &inner)).is_none());
    }

    #[test]
    fn template_without_psc_is_the_plain_one() {
        for (dscp, ttl) in [(0, 64), (10, 3)] {
            let t = |psc| {
                Template::v4(
                    Ipv4Addr::new(192, 0, 2, 1),
                    Ipv4Addr::new(192, 0, 2, 100),
                    0xabcd,
                    dscp,
                    ttl,
                    psc,
                )
                .unwrap()
            };
            for dl in [true, false] {
                assert_eq!(t(Some(dl)).without_psc(), t(None));
            }
        }
    }

    #[test]
    fn template_matches_the_general_encoder() {
        let inner: Vec<u8> = (0..40u8).collect();
        for psc in [None, Some(true), Some(false)] {
            let t = Template::v4(
                Ipv4Addr::new(192, 0, 2, 1),
                Ipv4Addr::new(192, 0, 2, 100),
                0xabcd,
                10,
                64,
                psc,
            )
            .unwrap();
            let mut a = vec![0u8; 128 + inner.len()];
            a[128..].copy_from_slice(&inner);
            let mut b = a.clone();
            let qfi = 9;
            let sa = t
                .write(&mut a, 128, 128 + inner.len(), 77, 2, 0x40 | qfi, None)
                .unwrap();
            let p = EncapV4 {
                src: Ipv4Addr::new(192, 0, 2, 1),
                dst: Ipv4Addr::new(192, 0, 2, 100),
                ident: 77,
                dont_frag: false,
                tunnel: GtpuTunnel {
                    teid: 0xabcd,
                    src_port: 2152,
                    dst_port: 2152,
                    psc: psc.map(|dl| {
                        if dl {
                            PduSessionContainer {
                                rqi: true,
                                ..PduSessionContainer::dl(qfi)
                            }
                        } else {
                            PduSessionContainer::ul(0x40 | qfi)
                        }
                    }),
                    ttl: 64,
                    dscp: 10,
                    ecn: 2,
                },
            };
            // UL containers carry no RQI: compare against the octet we wrote.
            let sb = match encapsulate_gtpu_v4(&mut b, 128, inner.len(), &p) {
                Ok(s) => s,
                Err(_) => {
                    let mut p2 = p;
                    p2.tunnel.psc = psc.map(|_| PduSessionContainer::ul(qfi));
                    let s = encapsulate_gtpu_v4(&mut b, 128, inner.len(), &p2).unwrap();
                    b[s + 42] = 0x40 | qfi;
                    s
                }
            };
            assert_eq!(sa, sb);
            assert_eq!(a, b, "psc {psc:?}");
        }
    }

    #[test]
    fn inner_flow_agrees_with_general_parse() {
        let mut ip = vec![0u8; 40];
        ip[0] = 0x45;
        ip[1] = 0xb8;
        ip[2..4].copy_from_slice(&40u16.to_be_bytes());
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[8, 8, 8, 8]);
        ip[20..24].copy_from_slice(&[0x30, 0x39, 0, 53]);
        let c = checksum::checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(
            flow_v4(&ip).map(crate::flow::Flow::from),
            crate::parse::flow_of_general(&ip)
        );
        assert!(flow_v4(&ip).is_some());
    }

    proptest! {
        #[test]
        fn mutated_gpdus_agree(teid: u32, qfi in 0u8..64, len in 20usize..80, flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..4), cut in 0usize..8) {
            let inner = vec![0x45u8; len];
            let mut d = gpdu(teid, Some(PduSessionContainer::ul(qfi)), &inner);
            for (i, v) in flips {
                let n = d.len();
                d[i % n] = v;
            }
            let n = d.len().saturating_sub(cut);
            d.truncate(n);
            agrees(&d);
            if let Some(f) = flow_v4(&d) {
                prop_assert_eq!(Some(crate::flow::Flow::from(f)), crate::parse::flow_of_general(&d));
            }
        }

        /// The checksum finished from the template's sum is the encoder's, for any header
        /// fields and lengths, and nothing past the payload or before the copied room moves.
        #[test]
        fn template_writes_what_the_encoder_does(src: u32, dst: u32, teid: u32, dscp in 0u8..64, ttl: u8, ident: u16, ecn in 0u8..4, len in 0usize..1400, psc in proptest::option::of(any::<bool>())) {
            let (src, dst) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
            let t = Template::v4(src, dst, teid, dscp, ttl, psc).unwrap();
            let mut a = vec![0xa5u8; 200 + len];
            let mut b = a.clone();
            let sa = t.write(&mut a, 150, 150 + len, ident, ecn, 0, None).unwrap();
            let p = EncapV4 {
                src,
                dst,
                ident,
                dont_frag: false,
                tunnel: GtpuTunnel {
                    teid,
                    src_port: 2152,
                    dst_port: 2152,
                    psc: psc.map(|dl| if dl { PduSessionContainer::dl(0) } else { PduSessionContainer::ul(0) }),
                    ttl,
                    dscp,
                    ecn,
                },
            };
            let sb = encapsulate_gtpu_v4(&mut b, 150, len, &p).unwrap();
            prop_assert_eq!(sa, sb);
            prop_assert_eq!(&a[sa..], &b[sb..]);
            prop_assert_eq!(&a[..150 - 44], &b[..150 - 44]);
            // The shared template with the tunnel written per packet writes the same.
            let (g, tunnel) = t.generic().unwrap();
            let mut c = vec![0xa5u8; 200 + len];
            let sc = g.write(&mut c, 150, 150 + len, ident, ecn, 0, Some(&tunnel)).unwrap();
            prop_assert_eq!(sc, sb);
            prop_assert_eq!(&c, &a);
            prop_assert_eq!(checksum::checksum(&a[sa..sa + 20]), 0);
        }
    }
}
