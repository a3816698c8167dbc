//! In-place GTP-U encapsulation and decapsulation.
//!
//! Packet buffers keep headroom in front of the inner packet; encapsulation
//! writes outer IP + UDP + GTP-U (+ PDU Session Container) into that
//! headroom and never moves the payload. Decapsulation only computes the
//! range of the inner packet.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::ops::Range;

use crate::bytes::{set_u16, set_u32, set_u8, sub, sub_mut};
use crate::ext::{ext_type, PduSessionContainer};
use crate::gtpu::{self, MessageType};
use crate::{ip_proto, ipv4, ipv6, udp, Error, Result};

/// Largest headroom any encapsulation here needs: IPv6 40 + UDP 8 +
/// GTP-U 12 + PSC with PPI 8.
pub const MAX_HEADROOM: usize = 68;

/// Tunnel parameters common to both outer IP versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GtpuTunnel {
    /// Remote TEID.
    pub teid: u32,
    /// Outer UDP source port (2152, or an entropy port: TS 29.281 §4.4.2.0).
    pub src_port: u16,
    /// Outer UDP destination port (2152).
    pub dst_port: u16,
    /// PDU Session Container to add (N3/N9), if any.
    pub psc: Option<PduSessionContainer>,
    /// Outer TTL / Hop Limit.
    pub ttl: u8,
    /// Outer DSCP marking (6 bits), e.g. derived from the QFI's 5QI.
    pub dscp: u8,
    /// Outer ECN (2 bits); RFC 6040 normal mode copies the inner ECN here.
    pub ecn: u8,
}

/// Outer IPv4 parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncapV4 {
    /// Local N3/N9 address.
    pub src: Ipv4Addr,
    /// Peer address.
    pub dst: Ipv4Addr,
    /// IPv4 Identification (may be 0 with DF set, RFC 6864 §4.1).
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// Tunnel parameters.
    pub tunnel: GtpuTunnel,
}

/// Outer IPv6 parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncapV6 {
    /// Local N3/N9 address.
    pub src: Ipv6Addr,
    /// Peer address.
    pub dst: Ipv6Addr,
    /// Flow Label (20 bits); RFC 6438 suggests a hash of the inner flow.
    pub flow_label: u32,
    /// Tunnel parameters.
    pub tunnel: GtpuTunnel,
}

/// GTP-U header length for a G-PDU: 8, or 12 + PSC extension (TS 29.281 §5.1, §5.2).
pub const fn gtpu_header_len(psc: &Option<PduSessionContainer>) -> usize {
    match psc {
        None => gtpu::HEADER_LEN,
        Some(p) => gtpu::HEADER_LEN_OPT + p.ext_len(),
    }
}

/// Headroom [`encapsulate_gtpu_v4`] consumes.
pub const fn headroom_v4(psc: &Option<PduSessionContainer>) -> usize {
    ipv4::HEADER_LEN + udp::HEADER_LEN + gtpu_header_len(psc)
}

/// Headroom [`encapsulate_gtpu_v6`] consumes.
pub const fn headroom_v6(psc: &Option<PduSessionContainer>) -> usize {
    ipv6::HEADER_LEN + udp::HEADER_LEN + gtpu_header_len(psc)
}

/// Checks shared by both versions; returns (start, end, udp_len).
fn frame(
    buf_len: usize,
    payload_start: usize,
    payload_len: usize,
    ip_len: usize,
    t: &GtpuTunnel,
) -> Result<(usize, usize, u16)> {
    if t.dscp > 0x3f || t.ecn > 3 {
        return Err(Error::BadParameter);
    }
    // Validate before writing anything: on error the buffer is untouched.
    if let Some(psc) = &t.psc {
        psc.validate()?;
    }
    let hl = ip_len + udp::HEADER_LEN + gtpu_header_len(&t.psc);
    let start = payload_start.checked_sub(hl).ok_or(Error::NoHeadroom)?;
    let end = payload_start
        .checked_add(payload_len)
        .filter(|&e| e <= buf_len)
        .ok_or(Error::Truncated)?;
    // IPv4 Total Length covers everything; IPv6/UDP lengths are smaller.
    let udp_len = u16::try_from(end - start - ip_len).map_err(|_| Error::BufferTooSmall)?;
    if ip_len == ipv4::HEADER_LEN && end - start > usize::from(u16::MAX) {
        return Err(Error::BufferTooSmall);
    }
    Ok((start, end, udp_len))
}

/// Write UDP (checksum 0) + GTP-U G-PDU header at the start of `out`.
#[inline(always)]
fn write_udp_gtpu(out: &mut [u8], udp_len: u16, t: &GtpuTunnel) -> Result<()> {
    set_u16(out, 0, t.src_port);
    set_u16(out, 2, t.dst_port);
    set_u16(out, 4, udp_len);
    set_u16(out, 6, 0);
    let g = udp::HEADER_LEN;
    // GTP-U Length excludes the mandatory 8 octets (TS 29.281 §5.1).
    let gtp_len = udp_len - 16;
    set_u8(out, g + 1, u8::from(MessageType::GPdu));
    set_u16(out, g + 2, gtp_len);
    set_u32(out, g + 4, t.teid);
    match &t.psc {
        None => set_u8(out, g, 0x30),
        Some(psc) => {
            set_u8(out, g, 0x34); // E flag: the optional octets are present
            set_u32(out, g + 8, u32::from(ext_type::PDU_SESSION_CONTAINER));
            let rest = out.get_mut(g + gtpu::HEADER_LEN_OPT..).unwrap_or(&mut []);
            psc.emit_ext(rest, ext_type::NO_MORE)?;
        }
    }
    Ok(())
}

/// Encapsulate `buf[payload_start .. payload_start + payload_len]` in
/// IPv4/UDP/GTP-U (G-PDU, optional PSC) written into the headroom in front
/// of it. Outer UDP checksum is 0 (allowed over IPv4, RFC 768; TS 29.281
/// §4.4.2.0). Returns the start offset of the outer packet.
#[inline]
pub fn encapsulate_gtpu_v4(
    buf: &mut [u8],
    payload_start: usize,
    payload_len: usize,
    p: &EncapV4,
) -> Result<usize> {
    let t = &p.tunnel;
    let (start, end, udp_len) = frame(buf.len(), payload_start, payload_len, ipv4::HEADER_LEN, t)?;
    let out = sub_mut(buf, start, end);
    let ip = ipv4::Repr {
        src: p.src,
        dst: p.dst,
        protocol: ip_proto::UDP,
        payload_len: usize::from(udp_len),
        ttl: t.ttl,
        dscp: t.dscp,
        ecn: t.ecn,
        ident: p.ident,
        dont_frag: p.dont_frag,
    };
    write_udp_gtpu(sub_mut(out, ipv4::HEADER_LEN, end - start), udp_len, t)?;
    ip.emit(&mut ipv4::Packet::new_unchecked(out))?;
    Ok(start)
}

/// Encapsulate in IPv6/UDP/GTP-U; the UDP checksum is computed over the
/// whole datagram, as IPv6 requires (RFC 8200 §8.1). Returns the start offset.
#[inline]
pub fn encapsulate_gtpu_v6(
    buf: &mut [u8],
    payload_start: usize,
    payload_len: usize,
    p: &EncapV6,
) -> Result<usize> {
    let t = &p.tunnel;
    let (start, end, udp_len) = frame(buf.len(), payload_start, payload_len, ipv6::HEADER_LEN, t)?;
    let out = sub_mut(buf, start, end);
    let ip = ipv6::Repr {
        src: p.src,
        dst: p.dst,
        next_header: ip_proto::UDP,
        payload_len: usize::from(udp_len),
        hop_limit: t.ttl,
        traffic_class: (t.dscp << 2) | t.ecn,
        flow_label: p.flow_label,
    };
    ip.emit(&mut ipv6::Packet::new_unchecked(&mut *out))?;
    let u = sub_mut(out, ipv6::HEADER_LEN, end - start);
    write_udp_gtpu(u, udp_len, t)?;
    udp::Packet::new_unchecked(u).fill_checksum_v6(&p.src, &p.dst);
    Ok(start)
}

/// Result of [`decapsulate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decapsulated {
    /// Outer source address (the peer).
    pub outer_src: IpAddr,
    /// Outer destination address (ours).
    pub outer_dst: IpAddr,
    /// Outer UDP source port.
    pub src_port: u16,
    /// Outer UDP destination port.
    pub dst_port: u16,
    /// GTP-U header and interpreted extensions.
    pub gtpu: gtpu::Repr,
    /// Range of the GTP-U payload in the buffer: the inner packet for a
    /// G-PDU (check `gtpu.msg_type`), the IEs for signalling.
    pub inner: Range<usize>,
}

/// Decapsulate an outer IPv4/IPv6 + UDP + GTP-U packet starting at
/// `buf[0]`. Checks the IPv4 header checksum, rejects outer fragments
/// ([`Error::Fragmented`]: reassemble first) and non-UDP; the UDP checksum
/// is not verified (see [`decapsulate_verified`]). The UDP port is not
/// checked: that is the socket/steering layer's job.
#[inline]
pub fn decapsulate(buf: &[u8]) -> Result<Decapsulated> {
    decap(buf, false)
}

/// [`decapsulate`] that also verifies the UDP checksum (when non-zero over
/// IPv4; always over IPv6).
pub fn decapsulate_verified(buf: &[u8]) -> Result<Decapsulated> {
    decap(buf, true)
}

/// The outer IP and UDP headers of a GTP-U packet: who sent it, to whom, from and to which
/// ports, and where the GTP-U message lies. What a reply needs when the GTP-U message
/// itself cannot be decoded (a Supported Extension Headers Notification, TS 29.281 §7.2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outer {
    /// Outer source address (the peer).
    pub src: IpAddr,
    /// Outer destination address (ours).
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Range of the UDP payload (the GTP-U message) in the buffer.
    pub payload: Range<usize>,
}

/// The outer IPv4/IPv6 and UDP headers of `buf`, checked as [`decapsulate`] checks them;
/// the GTP-U message is not looked at.
pub fn outer(buf: &[u8]) -> Result<Outer> {
    let (src, dst, udp_off, ip_end) = outer_ip(buf)?;
    let u = udp::Packet::new_checked(sub(buf, udp_off, ip_end))?;
    let start = udp_off + udp::HEADER_LEN;
    Ok(Outer {
        src,
        dst,
        src_port: u.src_port(),
        dst_port: u.dst_port(),
        payload: start..start + u.payload().len(),
    })
}

/// The outer IP header: source, destination, offset of the UDP header, end of the packet.
#[inline(always)]
fn outer_ip(buf: &[u8]) -> Result<(IpAddr, IpAddr, usize, usize)> {
    Ok(match buf.first().map(|v| v >> 4) {
        Some(4) => {
            let p = ipv4::Packet::new_checked(buf)?;
            if !p.verify_checksum() {
                return Err(Error::BadChecksum);
            }
            if p.is_fragment() {
                return Err(Error::Fragmented);
            }
            if p.protocol() != ip_proto::UDP {
                return Err(Error::NotUdp);
            }
            (
                IpAddr::V4(p.src_addr()),
                IpAddr::V4(p.dst_addr()),
                p.header_len(),
                usize::from(p.total_len()),
            )
        }
        Some(6) => {
            let p = ipv6::Packet::new_checked(buf)?;
            let ul = p.upper_layer()?;
            if ul.fragment.is_some() {
                return Err(Error::Fragmented);
            }
            if ul.protocol != ip_proto::UDP {
                return Err(Error::NotUdp);
            }
            (
                IpAddr::V6(p.src_addr()),
                IpAddr::V6(p.dst_addr()),
                ul.offset,
                p.total_len(),
            )
        }
        Some(_) => return Err(Error::BadVersion),
        None => return Err(Error::Truncated),
    })
}

#[inline(always)]
fn decap(buf: &[u8], verify_udp: bool) -> Result<Decapsulated> {
    let (src, dst, udp_off, ip_end) = outer_ip(buf)?;
    let u = udp::Packet::new_checked(sub(buf, udp_off, ip_end))?;
    if verify_udp && !u.verify_checksum(&src, &dst) {
        return Err(Error::BadChecksum);
    }
    let g = gtpu::Packet::new_checked(u.payload())?;
    let (repr, off) = gtpu::Repr::parse_with_offset(&g)?;
    let inner_start = udp_off + udp::HEADER_LEN + off;
    Ok(Decapsulated {
        outer_src: src,
        outer_dst: dst,
        src_port: u.src_port(),
        dst_port: u.dst_port(),
        gtpu: repr,
        inner: inner_start..inner_start + repr.payload_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    /// scapy 2.8: `IP(src="192.168.1.10", dst="192.168.1.20")/UDP(sport=2152,dport=2152)
    /// /GTP_U_Header(teid=0x11223344,next_ex=0x85)/GTPPDUSessionContainer(type=1,QFI=9)
    /// /IP(src="10.45.0.2",dst="8.8.8.8")/ICMP(id=0x1234,seq=7)`
    const GPDU_V4: &str = "45000048000100004011f735c0a8010ac0a80114086808680034e72834ff00241122334400000085011009004500001c00010000400160a20a2d0002080808080800e5c412340007";

    /// scapy 2.8: `IPv6(src="2001:db8::1", dst="2001:db8::2")/UDP(sport=2152,dport=2152)
    /// /GTP_U_Header(teid=7,next_ex=0x85)/GTPPDUSessionContainer(type=1,QFI=1)
    /// /IPv6(src="2001:db8:1::5",dst="2001:4860::8888")/TCP(sport=443,dport=50000,flags="A")`
    const GPDU_V6: &str = "600000000054114020010db800000000000000000000000120010db8000000000000000000000002086808680054f4e734ff0044000000070000008501100100600000000014064020010db80001000000000000000000052001486000000000000000000000888801bbc350000000000000000050102000ac200000";

    fn tunnel(teid: u32, qfi: u8) -> GtpuTunnel {
        GtpuTunnel {
            teid,
            src_port: 2152,
            dst_port: 2152,
            psc: Some(PduSessionContainer::ul(qfi)),
            ttl: 64,
            dscp: 0,
            ecn: 0,
        }
    }

    #[test]
    fn encap_v4_matches_scapy() {
        let mut expected = hex(GPDU_V4);
        expected[26..28].copy_from_slice(&[0, 0]); // we send UDP checksum 0
        let inner = &expected[44..];
        let mut buf = vec![0u8; 128];
        buf[100 - inner.len()..100].copy_from_slice(inner);
        let ps = 100 - inner.len();
        let params = EncapV4 {
            src: Ipv4Addr::new(192, 168, 1, 10),
            dst: Ipv4Addr::new(192, 168, 1, 20),
            ident: 1,
            dont_frag: false,
            tunnel: tunnel(0x1122_3344, 9),
        };
        let start = encapsulate_gtpu_v4(&mut buf, ps, inner.len(), &params).unwrap();
        assert_eq!(start, ps - headroom_v4(&params.tunnel.psc));
        assert_eq!(&buf[start..100], &expected[..]);
        let d = decapsulate_verified(&buf[start..100]).unwrap();
        assert_eq!(d.gtpu.ext.psc, Some(PduSessionContainer::ul(9)));
        assert_eq!(&buf[start..100][d.inner.clone()], inner);
        // Decap of scapy's own packet (with its UDP checksum) agrees.
        let orig = hex(GPDU_V4);
        let d2 = decapsulate_verified(&orig).unwrap();
        assert_eq!(d2.inner, d.inner);
        assert_eq!(
            (d2.src_port, d2.dst_port, d2.gtpu.teid),
            (2152, 2152, 0x1122_3344)
        );
    }

    #[test]
    fn encap_v6_matches_scapy() {
        let expected = hex(GPDU_V6);
        let inner = &expected[64..];
        let mut buf = vec![0u8; 256];
        buf[100..100 + inner.len()].copy_from_slice(inner);
        let params = EncapV6 {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            flow_label: 0,
            tunnel: tunnel(7, 1),
        };
        let start = encapsulate_gtpu_v6(&mut buf, 100, inner.len(), &params).unwrap();
        assert_eq!(start, 100 - 64);
        assert_eq!(&buf[start..100 + inner.len()], &expected[..]);
        let d = decapsulate_verified(&expected).unwrap();
        assert_eq!(d.inner, 64..expected.len());
        assert_eq!(d.outer_src, "2001:db8::1".parse::<IpAddr>().unwrap());
    }

    /// The outer headers of a packet whose GTP-U message does not decode (an unknown
    /// comprehension-required extension header) are still readable.
    #[test]
    fn outer_headers_without_the_gtpu_message() {
        let mut v = hex(GPDU_V4);
        v[26..28].fill(0); // no UDP checksum
        v[39] = 0xc7; // next extension type: unknown, comprehension required
        assert_eq!(
            decapsulate(&v).unwrap_err(),
            Error::UnknownComprehensionRequired(0xc7)
        );
        let o = outer(&v).unwrap();
        assert_eq!(
            (o.src, o.dst, o.src_port, o.dst_port),
            (
                IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10)),
                IpAddr::V4(Ipv4Addr::new(192, 168, 1, 20)),
                2152,
                2152
            )
        );
        assert_eq!(o.payload, 28..v.len());
        let v6 = hex(GPDU_V6);
        let o = outer(&v6).unwrap();
        assert_eq!(o.payload, 48..v6.len());
        assert_eq!(o.dst, "2001:db8::2".parse::<IpAddr>().unwrap());
        assert_eq!(outer(&v[..30]).unwrap_err(), Error::Truncated);
        assert_eq!(outer(&[]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn encap_errors_and_marking() {
        let mut buf = [0u8; 100];
        let mut p = EncapV4 {
            src: Ipv4Addr::new(1, 1, 1, 1),
            dst: Ipv4Addr::new(2, 2, 2, 2),
            ident: 0,
            dont_frag: true,
            tunnel: GtpuTunnel {
                psc: None,
                dscp: 46,
                ecn: 2,
                ..tunnel(1, 1)
            },
        };
        assert_eq!(
            encapsulate_gtpu_v4(&mut buf, 35, 10, &p),
            Err(Error::NoHeadroom)
        );
        assert_eq!(
            encapsulate_gtpu_v4(&mut buf, 36, 65, &p),
            Err(Error::Truncated)
        );
        assert_eq!(
            encapsulate_gtpu_v4(&mut buf, 36, usize::MAX, &p),
            Err(Error::Truncated)
        );
        let s = encapsulate_gtpu_v4(&mut buf, 36, 64, &p).unwrap();
        assert_eq!(s, 0);
        let ip = ipv4::Packet::new_checked(&buf[..]).unwrap();
        assert_eq!((ip.dscp(), ip.ecn(), ip.dont_frag()), (46, 2, true));
        assert!(ip.verify_checksum());
        let d = decapsulate(&buf).unwrap();
        assert_eq!(d.inner, 36..100);
        assert_eq!(d.gtpu.ext.psc, None);
        p.tunnel.dscp = 64;
        assert_eq!(
            encapsulate_gtpu_v4(&mut buf, 36, 64, &p),
            Err(Error::BadParameter)
        );
        p.tunnel.dscp = 0;
        p.tunnel.psc = Some(PduSessionContainer::ul(77));
        assert_eq!(
            encapsulate_gtpu_v4(&mut buf, 52, 48, &p),
            Err(Error::BadParameter)
        );
        let mut big = vec![0u8; 70_000];
        p.tunnel.psc = None;
        assert_eq!(
            encapsulate_gtpu_v4(&mut big, 36, 65_500, &p),
            Err(Error::BufferTooSmall)
        );
    }

    #[test]
    fn decap_rejects() {
        let good = hex(GPDU_V4);
        let mut v = good.clone();
        v[9] = 6;
        assert_eq!(decapsulate(&v), Err(Error::BadChecksum));
        let mut ip = ipv4::Packet::new_checked(&mut v[..]).unwrap();
        ip.fill_checksum();
        assert_eq!(decapsulate(&v), Err(Error::NotUdp));
        let mut v = good.clone();
        let mut ip = ipv4::Packet::new_checked(&mut v[..]).unwrap();
        ip.set_frag(false, true, 0);
        ip.fill_checksum();
        assert_eq!(decapsulate(&v), Err(Error::Fragmented));
        let mut v = good.clone();
        let last = v.len() - 1;
        v[last] ^= 0x80; // flip an inner payload bit: UDP checksum now wrong
        assert_eq!(decapsulate_verified(&v), Err(Error::BadChecksum));
        assert!(decapsulate(&v).is_ok());
        assert_eq!(decapsulate(&[]), Err(Error::Truncated));
        assert_eq!(decapsulate(&[0x20; 60]), Err(Error::BadVersion));
        let v6 = hex(GPDU_V6);
        let mut v = v6.clone();
        v[6] = 6;
        assert_eq!(decapsulate(&v), Err(Error::NotUdp));
    }
}
