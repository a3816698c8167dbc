//! Internet checksum (RFC 1071), pseudo-headers (RFC 768, RFC 8200 §8.1) and
//! incremental update (RFC 1624).
//!
//! Conventions: a *sum* is the folded 16-bit one's-complement sum (not
//! inverted); a *checksum* is its complement, the value carried on the wire.
//! Sums of separate slices combine with [`combine`] only if every slice but
//! the last has even length (odd bytes are padded with zero, RFC 1071 §4.1).

use core::net::{Ipv4Addr, Ipv6Addr};

/// Low 16 bits; the truncation is the point.
#[inline(always)]
#[allow(clippy::cast_possible_truncation)]
const fn low16(x: u64) -> u16 {
    x as u16
}

/// Low 32 bits; the truncation is the point.
#[inline(always)]
#[allow(clippy::cast_possible_truncation)]
const fn low32(x: u64) -> u32 {
    x as u32
}

/// Fold a wide accumulator of 16-bit words into a 16-bit one's-complement
/// sum: two halving steps, each an add with end-around carry.
#[inline(always)]
fn fold(s: u64) -> u16 {
    let (a, c) = low32(s).overflowing_add(low32(s >> 32));
    // No overflow: after a carry, a <= 2^32 - 2.
    let a = a + u32::from(c);
    let (b, c) = low16(u64::from(a)).overflowing_add(low16(u64::from(a >> 16)));
    b + u16::from(c)
}

/// Native-order 32-bit lanes of `block` (< 16 GiB) summed into 64 bits,
/// the odd tail padded with a zero byte.
#[inline(always)]
fn sum_native(block: &[u8]) -> u64 {
    let (words, rest) = block.as_chunks::<4>();
    let mut acc: u64 = 0;
    for w in words {
        acc += u64::from(u32::from_ne_bytes(*w));
    }
    match rest {
        [a, b, c] => {
            acc + u64::from(u16::from_ne_bytes([*a, *b])) + u64::from(u16::from_ne_bytes([*c, 0]))
        }
        [a, b] => acc + u64::from(u16::from_ne_bytes([*a, *b])),
        [a] => acc + u64::from(u16::from_ne_bytes([*a, 0])),
        _ => acc,
    }
}

/// Blocks beyond which `sum_native`'s accumulator is folded (far below its
/// 16 GiB overflow point).
const BLOCK: usize = 1 << 30;

/// One's-complement sum of `data` taken as big-endian 16-bit words (RFC 1071 §4.1).
///
/// The sum is byte-order independent (RFC 1071 §2(B)): words are loaded in
/// native order (no byte swaps, so the loop vectorises with plain SSE2),
/// summed as 32-bit lanes into a 64-bit accumulator, folded, and swapped
/// once at the end.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    let native = if data.len() <= BLOCK {
        fold(sum_native(data))
    } else {
        let mut total: u64 = 0;
        for block in data.chunks(BLOCK) {
            total += u64::from(fold(sum_native(block)));
        }
        fold(total)
    };
    // Native-order sum → big-endian (network) sum.
    u16::from_be_bytes(native.to_ne_bytes())
}

/// One's-complement addition of partial sums.
#[inline]
pub fn combine(sums: &[u16]) -> u16 {
    let mut acc: u64 = 0;
    for s in sums {
        acc += u64::from(*s);
    }
    fold(acc)
}

/// The Internet checksum of `data` (complement of [`sum`]); 0 in the
/// checksum field of `data` means "verify": a correct packet yields 0.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// Folded sum of the IPv4 pseudo-header (RFC 768; RFC 9293 §3.1).
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u16) -> u16 {
    let s = u32::from(src);
    let d = u32::from(dst);
    fold(
        u64::from(s >> 16)
            + u64::from(s & 0xffff)
            + u64::from(d >> 16)
            + u64::from(d & 0xffff)
            + u64::from(proto)
            + u64::from(len),
    )
}

/// Folded sum of the IPv6 pseudo-header (RFC 8200 §8.1).
#[inline]
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, len: u32) -> u16 {
    let mut acc: u64 = 0;
    for w in src.octets().as_chunks::<4>().0 {
        acc += u64::from(u32::from_be_bytes(*w));
    }
    for w in dst.octets().as_chunks::<4>().0 {
        acc += u64::from(u32::from_be_bytes(*w));
    }
    fold(acc + u64::from(len) + u64::from(next_header))
}

/// RFC 1624 eqn. 3: new checksum after one 16-bit word of the covered data
/// changes from `old` to `new`: `HC' = ~(~HC + ~m + m')`.
#[inline]
pub fn update_u16(csum: u16, old: u16, new: u16) -> u16 {
    !fold(u64::from(!csum) + u64::from(!old) + u64::from(new))
}

/// RFC 1624 eqn. 3 applied to a 32-bit field (two adjacent aligned words),
/// e.g. an IPv4 address in a NAT rewrite.
#[inline]
pub fn update_u32(csum: u16, old: u32, new: u32) -> u16 {
    let old_hi = low16(u64::from(old >> 16));
    let old_lo = low16(u64::from(old));
    let new_hi = low16(u64::from(new >> 16));
    let new_lo = low16(u64::from(new));
    !fold(
        u64::from(!csum)
            + u64::from(!old_hi)
            + u64::from(!old_lo)
            + u64::from(new_hi)
            + u64::from(new_lo),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 1071 §3 numerical example: words 0001 f203 f4f5 f6f7 sum to ddf2.
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
        // Byte-order independence claim of RFC 1071 §2(B) doesn't matter here;
        // odd tail handling: trailing byte is the high half of a zero-padded word.
        assert_eq!(
            sum(&data[..7]),
            sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0x00])
        );
    }

    /// IPv4 header from the Wikipedia "IPv4 header checksum" worked example
    /// (45 00 00 73 00 00 40 00 40 11 [b8 61] c0 a8 00 01 c0 a8 00 c7).
    #[test]
    fn ipv4_header_example() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&[0xb8, 0x61]);
        assert_eq!(checksum(&h), 0);
    }

    #[test]
    fn pseudo_headers() {
        // Same words summed by hand.
        let s = Ipv4Addr::new(10, 0, 0, 1);
        let d = Ipv4Addr::new(10, 0, 0, 2);
        let manual = sum(&[10, 0, 0, 1, 10, 0, 0, 2, 0, 17, 0, 20]);
        assert_eq!(pseudo_header_v4(s, d, 17, 20), manual);
        let s6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d6: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let mut buf = [0u8; 40];
        buf[..16].copy_from_slice(&s6.octets());
        buf[16..32].copy_from_slice(&d6.octets());
        buf[32..36].copy_from_slice(&100u32.to_be_bytes());
        buf[39] = 17;
        assert_eq!(pseudo_header_v6(&s6, &d6, 17, 100), sum(&buf));
    }

    /// Reference: plain 16-bit-at-a-time RFC 1071 loop.
    fn naive(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        let mut i = 0;
        while i + 1 < data.len() {
            acc += u32::from(u16::from_be_bytes([data[i], data[i + 1]]));
            i += 2;
        }
        if i < data.len() {
            acc += u32::from(data[i]) << 8;
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        u16::try_from(acc).unwrap()
    }

    proptest! {
        #[test]
        fn sum_matches_naive(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(sum(&data), naive(&data));
        }

        #[test]
        fn combine_even_split(data in proptest::collection::vec(any::<u8>(), 0..200), cut in 0usize..100) {
            let cut = (cut * 2).min(data.len() & !1);
            prop_assert_eq!(combine(&[sum(&data[..cut]), sum(&data[cut..])]), sum(&data));
        }

        /// RFC 1624: incremental update equals full recompute (data kept
        /// non-zero: the all-zero buffer is the documented -0/+0 corner).
        #[test]
        fn incremental_u16_matches_full(mut data in proptest::collection::vec(any::<u8>(), 2..64),
                                        idx in 0usize..32, new in any::<u16>()) {
            data[0] |= 0x40;
            let words = data.len() / 2;
            let i = 1 + idx % words.max(1);
            prop_assume!(2 * i + 2 <= data.len());
            let c0 = checksum(&data);
            let old = u16::from_be_bytes([data[2 * i], data[2 * i + 1]]);
            data[2 * i..2 * i + 2].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update_u16(c0, old, new), checksum(&data));
        }

        #[test]
        fn incremental_u32_matches_full(mut data in proptest::collection::vec(any::<u8>(), 8..64),
                                        new in any::<u32>()) {
            data[0] |= 0x40;
            let c0 = checksum(&data);
            let old = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
            data[4..8].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update_u32(c0, old, new), checksum(&data));
        }
    }
}
