//! Supported-Features bitmasks: UP Function Features and CP Function Features.

use crate::codec::IeValue;
use crate::error::DecodeError;
use std::borrow::Cow;

/// Defines a Supported-Features bitmask IE: octet 5 is the low byte of the `u64`. Decoding
/// takes 1 to 8 octets (more are ignored); encoding writes the shortest length of at least
/// `min` octets, a multiple of `step`, that holds every set bit.
macro_rules! feature_set {
    (
        $(#[$meta:meta])* $name:ident, min = $min:literal, step = $step:literal {
            $($c:ident = ($octet:literal, $bit:literal) $label:literal,)*
        }
    ) => {
        bitflags::bitflags! {
            $(#[$meta])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
            pub struct $name: u64 {
                $(
                    #[doc = concat!("`", $label, "`: octet ", $octet, ", bit ", $bit, ".")]
                    const $c = 1 << (($octet - 5) * 8 + ($bit - 1));
                )*
                // Features of later releases pass through decode and encode.
                const _ = !0;
            }
        }

        impl $name {
            const LABELS: &'static [(Self, &'static str)] = &[$((Self::$c, $label),)*];

            /// The names of the set features; a bit the table lacks is named `octetN_bitB`.
            pub fn names(self) -> Vec<Cow<'static, str>> {
                (0..64u32)
                    .map(|i| Self::from_bits_retain(1 << i))
                    .filter(|f| self.contains(*f))
                    .map(|f| match Self::LABELS.iter().find(|(n, _)| *n == f) {
                        Some((_, label)) => Cow::Borrowed(*label),
                        None => {
                            let i = f.bits().trailing_zeros();
                            Cow::Owned(format!("octet{}_bit{}", 5 + i / 8, i % 8 + 1))
                        }
                    })
                    .collect()
            }
        }

        #[cfg(test)]
        impl proptest::arbitrary::Arbitrary for $name {
            type Parameters = ();
            type Strategy = proptest::strategy::BoxedStrategy<Self>;
            fn arbitrary_with(_: ()) -> Self::Strategy {
                use proptest::strategy::Strategy;
                proptest::arbitrary::any::<u64>().prop_map(Self::from_bits_retain).boxed()
            }
        }

        impl IeValue for $name {
            fn decode(value: &[u8]) -> Result<Self, DecodeError> {
                if value.is_empty() {
                    return Err(DecodeError::invalid_length("empty feature list"));
                }
                let mut le = [0u8; 8];
                for (d, s) in le.iter_mut().zip(value) {
                    *d = *s;
                }
                Ok(Self::from_bits_retain(u64::from_le_bytes(le)))
            }
            fn encode(&self, out: &mut Vec<u8>) {
                let le = self.bits().to_le_bytes();
                let used = le.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
                let len = used.max($min).next_multiple_of($step).min(le.len());
                out.extend_from_slice(le.get(..len).unwrap_or(&le));
            }
        }

        /// JSON: the list of feature names.
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.names())
            }
        }
    };
}

feature_set!(
    /// TS 29.244 §8.2.25 UP Function Features (Table 8.2.25-1, Rel-17), octet 5 in the low byte.
    ///
    /// Canonical encoding: the shortest even number of octets, at least 2, that holds every set
    /// bit. The table grew by octet pairs (5–6 in Rel-15, 7–8 and 9–10 in Rel-16) and peers such
    /// as Open5GS send whole pairs; a peer built for an older release reads the octets it knows.
    UpFunctionFeatures, min = 2, step = 2 {
        BUCP = (5, 1) "BUCP",
        DDND = (5, 2) "DDND",
        DLBD = (5, 3) "DLBD",
        TRST = (5, 4) "TRST",
        FTUP = (5, 5) "FTUP",
        PFDM = (5, 6) "PFDM",
        HEEU = (5, 7) "HEEU",
        TREU = (5, 8) "TREU",
        EMPU = (6, 1) "EMPU",
        PDIU = (6, 2) "PDIU",
        UDBC = (6, 3) "UDBC",
        QUOAC = (6, 4) "QUOAC",
        TRACE = (6, 5) "TRACE",
        FRRT = (6, 6) "FRRT",
        PFDE = (6, 7) "PFDE",
        EPFAR = (6, 8) "EPFAR",
        DPDRA = (7, 1) "DPDRA",
        ADPDP = (7, 2) "ADPDP",
        UEIP = (7, 3) "UEIP",
        SSET = (7, 4) "SSET",
        MNOP = (7, 5) "MNOP",
        MTE = (7, 6) "MTE",
        BUNDL = (7, 7) "BUNDL",
        GCOM = (7, 8) "GCOM",
        MPAS = (8, 1) "MPAS",
        RTTL = (8, 2) "RTTL",
        VTIME = (8, 3) "VTIME",
        NORP = (8, 4) "NORP",
        IPTV = (8, 5) "IPTV",
        IP6PL = (8, 6) "IP6PL",
        TSCU = (8, 7) "TSCU",
        MPTCP = (8, 8) "MPTCP",
        ATSSS_LL = (9, 1) "ATSSS-LL",
        QFQM = (9, 2) "QFQM",
        GPQM = (9, 3) "GPQM",
        MT_EDT = (9, 4) "MT-EDT",
        CIOT = (9, 5) "CIOT",
        ETHAR = (9, 6) "ETHAR",
        DDDS = (9, 7) "DDDS",
        RDS = (9, 8) "RDS",
        RTTWP = (10, 1) "RTTWP",
        QUASF = (10, 2) "QUASF",
        NSPOC = (10, 3) "NSPOC",
        L2TP = (10, 4) "L2TP",
        UPBER = (10, 5) "UPBER",
        RESPS = (10, 6) "RESPS",
        IPREP = (10, 7) "IPREP",
        DNSTS = (10, 8) "DNSTS",
        DRQOS = (11, 1) "DRQOS",
        MBSN4 = (11, 2) "MBSN4",
        PSUPRM = (11, 3) "PSUPRM",
        EPPPI = (11, 4) "EPPPI",
        RATP = (11, 5) "RATP",
        UPIDP = (11, 6) "UPIDP",
    }
);

feature_set!(
    /// TS 29.244 §8.2.58 CP Function Features (Table 8.2.58-1), octet 5 in the low byte.
    /// Canonical encoding: the shortest length, at least 1 octet, that holds every set bit.
    CpFunctionFeatures, min = 1, step = 1 {
        LOAD = (5, 1) "LOAD",
        OVRL = (5, 2) "OVRL",
        EPFAR = (5, 3) "EPFAR",
        SSET = (5, 4) "SSET",
        BUNDL = (5, 5) "BUNDL",
        MPAS = (5, 6) "MPAS",
        ARDR = (5, 7) "ARDR",
        UIAUR = (5, 8) "UIAUR",
        PSUCC = (6, 1) "PSUCC",
        RPGUR = (6, 2) "RPGUR",
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check;
    use crate::error::ErrorKind;
    use crate::ie::node::kind;
    use proptest::prelude::*;

    #[test]
    fn up_function_features_as_upfs_advertise_them() {
        // Open5GS UPF (src/upf/context.c: FTUP, EMPU, MNOP, VTIME, FRRT; length 4).
        let f = check::canonical::<UpFunctionFeatures>(&[0x10, 0x21, 0x10, 0x04]);
        for x in [
            UpFunctionFeatures::FTUP,
            UpFunctionFeatures::EMPU,
            UpFunctionFeatures::FRRT,
            UpFunctionFeatures::MNOP,
            UpFunctionFeatures::VTIME,
        ] {
            assert!(f.contains(x), "{x:?}");
        }
        assert_eq!(f.names(), ["FTUP", "EMPU", "FRRT", "MNOP", "VTIME"]);
        // Open5GS SGW-U (FTUP, EMPU; length 2); same octets as scapy 2.8
        // IE_UPFunctionFeatures(FTUP=1, EMPU=1, others 0).
        let f = check::canonical::<UpFunctionFeatures>(&[0x10, 0x01]);
        assert_eq!(f, UpFunctionFeatures::FTUP.union(UpFunctionFeatures::EMPU));
        // scapy 2.8: IE_UPFunctionFeatures(BUCP=1, FTUP=1, EMPU=1, FRRT=1, others 0).
        assert_eq!(
            check::canonical::<UpFunctionFeatures>(&[0x11, 0x21]).bits(),
            0x2111
        );
        // free5GC's go-upf sends no UP Function Features at all (association.go TODO).
        // Bit positions from the end of the table (Table 8.2.25-1: octet 10 bit 8, octet 11).
        assert_eq!(UpFunctionFeatures::DNSTS.bits(), 1 << 47);
        assert_eq!(UpFunctionFeatures::ATSSS_LL.bits(), 1 << 32);
        assert_eq!(UpFunctionFeatures::UPIDP.bits(), 1 << 53);
    }

    #[test]
    fn up_function_features_lengths() {
        // Older Open5GS UPF sent 3 octets (FTUP, EMPU, MNOP): accepted, re-encoded as 4.
        let f = UpFunctionFeatures::decode(&[0x10, 0x01, 0x10]).unwrap();
        assert!(f.contains(UpFunctionFeatures::MNOP));
        let mut out = Vec::new();
        f.encode(&mut out);
        assert_eq!(out, [0x10, 0x01, 0x10, 0x00]);
        // One octet (a Rel-14 peer) is accepted; the canonical form has 2.
        let f = UpFunctionFeatures::decode(&[0x10]).unwrap();
        out.clear();
        f.encode(&mut out);
        assert_eq!(out, [0x10, 0x00]);
        // Nothing set still encodes the minimum of 2 octets; octets beyond the 8th are ignored.
        out.clear();
        UpFunctionFeatures::empty().encode(&mut out);
        assert_eq!(out, [0, 0]);
        let f = UpFunctionFeatures::decode(&[1, 0, 0, 0, 0, 0, 0, 0x80, 0xff]).unwrap();
        assert_eq!(f.bits(), 0x8000_0000_0000_0001);
        assert_eq!(f.names(), ["BUCP", "octet12_bit8"]);
        assert_eq!(kind::<UpFunctionFeatures>(&[]), ErrorKind::InvalidLength);
    }

    #[test]
    fn cp_function_features() {
        // scapy 2.8: IE_CPFunctionFeatures(LOAD=1, OVRL=1)
        let f = check::canonical::<CpFunctionFeatures>(&[0x03]);
        assert_eq!(f, CpFunctionFeatures::LOAD.union(CpFunctionFeatures::OVRL));
        assert_eq!(f.names(), ["LOAD", "OVRL"]);
        // Two octets with nothing in the second: re-encoded as one.
        let f = CpFunctionFeatures::decode(&[0x80, 0x00]).unwrap();
        assert_eq!(f, CpFunctionFeatures::UIAUR);
        let mut out = Vec::new();
        f.encode(&mut out);
        assert_eq!(out, [0x80]);
        let f = check::canonical::<CpFunctionFeatures>(&[0x00, 0x02]);
        assert_eq!(f, CpFunctionFeatures::RPGUR);
    }

    proptest! {
        #[test]
        fn roundtrip(u: UpFunctionFeatures, c: CpFunctionFeatures) {
            check::roundtrip(&u); check::roundtrip(&c);
        }

        #[test]
        fn garbage_never_panics(b: Vec<u8>) {
            let _ = UpFunctionFeatures::decode(&b); let _ = CpFunctionFeatures::decode(&b);
        }
    }
}
