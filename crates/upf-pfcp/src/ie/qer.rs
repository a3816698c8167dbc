//! QoS Enforcement Rules: Create / Update / Remove QER and the IEs they carry (Gate Status,
//! MBR, GBR, Packet Rate, QER Correlation ID, RQI, Paging Policy Indicator, Averaging Window).

use crate::codec::{ie_group, ie_uint, IeValue};
use crate::error::DecodeError;
use crate::ie::common::{ie_enum_u8, QerId, Qfi};
use crate::tlv::{put_u40, Reader};

ie_group! {
    /// TS 29.244 §7.5.2.5 Create QER (Table 7.5.2.5-1).
    pub struct CreateQer {
        qer_id: M QerId = 109,
        qer_correlation_id: O QerCorrelationId = 28,
        gate_status: M GateStatus = 25,
        mbr: O Mbr = 26,
        gbr: O Gbr = 27,
        packet_rate: O PacketRate = 94,
        qfi: O Qfi = 124,
        rqi: O Rqi = 123,
        paging_policy_indicator: O PagingPolicyIndicator = 158,
        averaging_window: O AveragingWindow = 157,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.5 Update QER (Table 7.5.4.5-1): only the IEs that change are present.
    pub struct UpdateQer {
        qer_id: M QerId = 109,
        qer_correlation_id: O QerCorrelationId = 28,
        gate_status: O GateStatus = 25,
        mbr: O Mbr = 26,
        gbr: O Gbr = 27,
        packet_rate: O PacketRate = 94,
        qfi: O Qfi = 124,
        rqi: O Rqi = 123,
        paging_policy_indicator: O PagingPolicyIndicator = 158,
        averaging_window: O AveragingWindow = 157,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.9 Remove QER (Table 7.5.4.9-1).
    pub struct RemoveQer {
        qer_id: M QerId = 109,
    }
}

/// One gate of TS 29.244 §8.2.7 Gate Status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum Gate {
    #[default]
    Open,
    Closed,
}

impl Gate {
    /// Table 8.2.7-1: 0 OPEN, 1 CLOSED; the spare values 2 and 3 are read as CLOSED.
    fn from_bits(bits: u8) -> Self {
        if bits & 0b11 == 0 {
            Self::Open
        } else {
            Self::Closed
        }
    }
    fn bits(self) -> u8 {
        match self {
            Self::Open => 0,
            Self::Closed => 1,
        }
    }
}

/// TS 29.244 §8.2.7 Gate Status: UL gate in bits 4-3, DL gate in bits 2-1 of one octet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct GateStatus {
    pub uplink: Gate,
    pub downlink: Gate,
}

impl IeValue for GateStatus {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let b = Reader::new(value).u8()?;
        Ok(Self {
            uplink: Gate::from_bits(b >> 2),
            downlink: Gate::from_bits(b),
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push((self.uplink.bits() << 2) | self.downlink.bits());
    }
}

#[cfg(test)]
const MAX_U40: u64 = 1 << 40;

/// Defines a bit-rate pair IE: uplink then downlink, each a 40-bit rate in kbps.
macro_rules! bit_rate_ie {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        pub struct $name {
            #[cfg_attr(test, proptest(strategy = "0..MAX_U40"))]
            pub uplink_kbps: u64,
            #[cfg_attr(test, proptest(strategy = "0..MAX_U40"))]
            pub downlink_kbps: u64,
        }

        impl IeValue for $name {
            fn decode(value: &[u8]) -> Result<Self, DecodeError> {
                let mut r = Reader::new(value);
                Ok(Self {
                    uplink_kbps: r.u40()?,
                    downlink_kbps: r.u40()?,
                })
            }
            fn encode(&self, out: &mut Vec<u8>) {
                put_u40(out, self.uplink_kbps);
                put_u40(out, self.downlink_kbps);
            }
        }
    };
}

bit_rate_ie!(
    /// TS 29.244 §8.2.8 MBR: maximum bit rates, kbps (40 bits each).
    Mbr
);
bit_rate_ie!(
    /// TS 29.244 §8.2.9 GBR: guaranteed bit rates, kbps (40 bits each).
    Gbr
);

ie_uint!(
    /// TS 29.244 §8.2.10 QER Correlation ID (groups QERs of one UE for APN-AMBR).
    QerCorrelationId(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.115 Averaging Window, in milliseconds.
    AveragingWindow(u32)
);

ie_enum_u8!(
    /// TS 29.244 §8.2.116 Paging Policy Indicator (3 bits, TS 23.501 §5.4.3.2).
    PagingPolicyIndicator, mask = 0x07 {}
);

/// TS 29.244 §8.2.88 RQI: bit 1 requests Reflective QoS for the traffic of the QER.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(transparent)]
pub struct Rqi(pub bool);

impl IeValue for Rqi {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        Ok(Self(Reader::new(value).u8()? & 0x01 != 0))
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(self.0));
    }
}

/// A maximum packet rate of TS 29.244 §8.2.63 Packet Rate: at most `max_packets` packets per
/// time unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct PacketRateLimit {
    /// 3 bits, kept raw; see the `TIME_UNIT_*` constants. §8.2.63 reads the spare values 5 to 7
    /// as "minute".
    #[cfg_attr(test, proptest(strategy = "0u8..8"))]
    pub time_unit: u8,
    pub max_packets: u16,
}

impl PacketRateLimit {
    pub const TIME_UNIT_MINUTE: u8 = 0;
    pub const TIME_UNIT_6_MINUTES: u8 = 1;
    pub const TIME_UNIT_HOUR: u8 = 2;
    pub const TIME_UNIT_DAY: u8 = 3;
    pub const TIME_UNIT_WEEK: u8 = 4;

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            time_unit: r.u8()? & 0x07,
            max_packets: r.u16()?,
        })
    }
    fn write(&self, out: &mut Vec<u8>) {
        out.push(self.time_unit & 0x07);
        out.extend_from_slice(&self.max_packets.to_be_bytes());
    }
}

/// TS 29.244 §8.2.63 Packet Rate: the maximum uplink / downlink packet rates (APN rate control
/// for CIoT), and with APRC the additional rates (e.g. for exception reports).
///
/// The wire sends the additional rates for exactly the directions present (one APRC flag), so
/// they are encoded only when every direction present has one; otherwise they are left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub struct PacketRate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uplink: Option<PacketRateLimit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downlink: Option<PacketRateLimit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_uplink: Option<PacketRateLimit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_downlink: Option<PacketRateLimit>,
}

const ULPR: u8 = 0x01;
const DLPR: u8 = 0x02;
const APRC: u8 = 0x04;

impl PacketRate {
    /// Whether the additional rates can be sent: one for each direction present, and one at least.
    fn has_additional(&self) -> bool {
        let ul = self.uplink.is_some() == self.additional_uplink.is_some();
        let dl = self.downlink.is_some() == self.additional_downlink.is_some();
        ul && dl && (self.additional_uplink.is_some() || self.additional_downlink.is_some())
    }
}

impl IeValue for PacketRate {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let flags = r.u8()?;
        let uplink = (flags & ULPR != 0)
            .then(|| PacketRateLimit::read(&mut r))
            .transpose()?;
        let downlink = (flags & DLPR != 0)
            .then(|| PacketRateLimit::read(&mut r))
            .transpose()?;
        // APRC: an additional rate follows for each direction flagged. Lenient: a sender that
        // sets APRC but omits the octets is read as sending no additional rate.
        let mut additional = |present: bool| {
            (flags & APRC != 0 && present)
                .then(|| PacketRateLimit::read(&mut r).ok())
                .flatten()
        };
        let additional_uplink = additional(uplink.is_some());
        let additional_downlink = additional(downlink.is_some());
        Ok(Self {
            uplink,
            downlink,
            additional_uplink,
            additional_downlink,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let additional = self.has_additional();
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        out.push(
            bit(self.uplink.is_some(), ULPR)
                | bit(self.downlink.is_some(), DLPR)
                | bit(additional, APRC),
        );
        for l in [self.uplink, self.downlink].iter().flatten() {
            l.write(out);
        }
        if additional {
            for l in [self.additional_uplink, self.additional_downlink]
                .iter()
                .flatten()
            {
                l.write(out);
            }
        }
    }
}

/// Only values the wire can carry: additional rates exactly for the directions present.
#[cfg(test)]
impl proptest::arbitrary::Arbitrary for PacketRate {
    type Parameters = ();
    type Strategy = proptest::strategy::BoxedStrategy<Self>;
    fn arbitrary_with(_: ()) -> Self::Strategy {
        use proptest::prelude::*;
        (
            any::<Option<PacketRateLimit>>(),
            any::<Option<PacketRateLimit>>(),
            any::<bool>(),
            any::<PacketRateLimit>(),
            any::<PacketRateLimit>(),
        )
            .prop_map(|(uplink, downlink, aprc, a_ul, a_dl)| Self {
                uplink,
                downlink,
                additional_uplink: (aprc && uplink.is_some()).then_some(a_ul),
                additional_downlink: (aprc && downlink.is_some()).then_some(a_dl),
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check;
    use crate::codec::check::{hex, value_of};
    use proptest::prelude::*;

    #[test]
    fn gate_status_vectors() {
        // scapy 2.8: IE_GateStatus(ul="CLOSED", dl="OPEN") -> 0019000104
        let g = check::canonical::<GateStatus>(value_of(&hex("0019000104"), 25));
        assert_eq!(
            g,
            GateStatus {
                uplink: Gate::Closed,
                downlink: Gate::Open
            }
        );
        // scapy 2.8: IE_GateStatus(ul=0, dl=1) -> 0019000101
        let g = check::canonical::<GateStatus>(value_of(&hex("0019000101"), 25));
        assert_eq!((g.uplink, g.downlink), (Gate::Open, Gate::Closed));
    }

    #[test]
    fn gate_spare_values_read_as_closed_and_spare_bits_ignored() {
        // Table 8.2.7-1: 2 and 3 are spare, interpreted as CLOSED; bits 8-5 are spare.
        let g = GateStatus::decode(&[0xf0 | (0b10 << 2) | 0b11]).unwrap();
        assert_eq!((g.uplink, g.downlink), (Gate::Closed, Gate::Closed));
        let mut out = Vec::new();
        g.encode(&mut out);
        assert_eq!(out, [0x05]);
        assert!(GateStatus::decode(&[]).is_err());
    }

    #[test]
    fn bit_rate_vectors() {
        // scapy 2.8: IE_MBR(ul=100000, dl=(1<<40)-1)
        let m = check::canonical::<Mbr>(value_of(&hex("001a000a00000186a0ffffffffff"), 26));
        assert_eq!((m.uplink_kbps, m.downlink_kbps), (100_000, (1 << 40) - 1));
        // scapy 2.8: IE_GBR(ul=5000, dl=10000)
        let g = check::canonical::<Gbr>(value_of(&hex("001b000a00000013880000002710"), 27));
        assert_eq!((g.uplink_kbps, g.downlink_kbps), (5000, 10_000));
        // Truncated downlink rate.
        assert!(Mbr::decode(&hex("00000186a0ffffffff")).is_err());
    }

    #[test]
    fn small_ie_vectors() {
        // scapy 2.8: IE_QERCorrelationId(id=0x01020304)
        let c = check::canonical::<QerCorrelationId>(value_of(&hex("001c000401020304"), 28));
        assert_eq!(c, QerCorrelationId(0x0102_0304));
        // scapy 2.8: IE_RQI(RQI=1)
        assert_eq!(
            check::canonical::<Rqi>(value_of(&hex("007b000101"), 123)),
            Rqi(true)
        );
        // scapy 2.8: IE_PagingPolicyIndicator(ppi=5)
        assert_eq!(
            check::canonical::<PagingPolicyIndicator>(value_of(&hex("009e000105"), 158)),
            PagingPolicyIndicator(5)
        );
        // scapy 2.8: IE_AveragingWindow(averaging_window=2000)
        assert_eq!(
            check::canonical::<AveragingWindow>(value_of(&hex("009d0004000007d0"), 157)),
            AveragingWindow(2000)
        );
        // Spare bits set are ignored.
        assert_eq!(Rqi::decode(&[0xfe]).unwrap(), Rqi(false));
        assert_eq!(
            PagingPolicyIndicator::decode(&[0xfb]).unwrap(),
            PagingPolicyIndicator(3)
        );
    }

    #[test]
    fn packet_rate_vectors() {
        // scapy 2.8: IE_PacketRate(ULPR=1, DLPR=1, ul_time_unit="hour", ul_max_packet_rate=1000,
        //                          dl_time_unit="day", dl_max_packet_rate=20000)
        let p = check::canonical::<PacketRate>(value_of(&hex("005e0007030203e8034e20"), 94));
        assert_eq!(
            p.uplink,
            Some(PacketRateLimit {
                time_unit: PacketRateLimit::TIME_UNIT_HOUR,
                max_packets: 1000
            })
        );
        assert_eq!(
            p.downlink,
            Some(PacketRateLimit {
                time_unit: PacketRateLimit::TIME_UNIT_DAY,
                max_packets: 20_000
            })
        );
        assert_eq!((p.additional_uplink, p.additional_downlink), (None, None));
        // scapy 2.8: IE_PacketRate(DLPR=1, dl_time_unit="week", dl_max_packet_rate=7)
        let p = check::canonical::<PacketRate>(value_of(&hex("005e000402040007"), 94));
        assert_eq!(p.uplink, None);
        assert_eq!(p.downlink.map(|l| l.max_packets), Some(7));
    }

    #[test]
    fn packet_rate_with_additional_rates() {
        // Hand-built per Figure 8.2.63-1 (scapy 2.8 predates APRC): ULPR|DLPR|APRC, UL 10/minute,
        // DL 20/hour, additional UL 3/day, additional DL 4/week.
        let bytes = [0x07, 0, 0, 10, 2, 0, 20, 3, 0, 3, 4, 0, 4];
        let p = check::canonical::<PacketRate>(&bytes);
        assert_eq!(p.additional_uplink.map(|l| l.max_packets), Some(3));
        assert_eq!(
            p.additional_downlink.map(|l| l.time_unit),
            Some(PacketRateLimit::TIME_UNIT_WEEK)
        );
        // APRC with only DLPR: one additional block, for downlink.
        let p = check::canonical::<PacketRate>(&[0x06, 1, 0, 9, 0, 0, 2]);
        assert_eq!(p.uplink, None);
        assert_eq!(p.additional_uplink, None);
        assert_eq!(p.additional_downlink.map(|l| l.max_packets), Some(2));
    }

    #[test]
    fn packet_rate_leniency() {
        // APRC set but the additional octets missing: read as no additional rate.
        let p = PacketRate::decode(&[0x05, 0, 0, 10]).unwrap();
        assert_eq!(p.uplink.map(|l| l.max_packets), Some(10));
        assert_eq!(p.additional_uplink, None);
        // Spare time-unit bits and spare flag bits are ignored; spare unit values kept raw.
        let p = PacketRate::decode(&[0xf9, 0xff, 0, 1, 0xaa]).unwrap();
        assert_eq!(p.uplink.map(|l| l.time_unit), Some(7));
        assert_eq!(p.downlink, None);
        // ULPR without its octets is an error.
        assert!(PacketRate::decode(&[0x01, 0, 0]).is_err());
        // Additional rate for an absent direction cannot be sent: APRC is left out.
        let p = PacketRate {
            uplink: None,
            downlink: Some(PacketRateLimit::default()),
            additional_uplink: Some(PacketRateLimit::default()),
            additional_downlink: None,
        };
        let mut out = Vec::new();
        p.encode(&mut out);
        assert_eq!(out, [0x02, 0, 0, 0]);
    }

    #[test]
    fn create_update_remove_qer() {
        // scapy 2.8: IE_CreateQER(IE_list=[IE_QER_Id(id=1), IE_GateStatus(),
        //   IE_MBR(ul=1000000, dl=2000000), IE_QFI(QFI=9)])
        let tlv = hex("00070020006d0004000000010019000100001a000a00000f424000001e8480007c000109");
        let c = check::canonical::<CreateQer>(value_of(&tlv, 7));
        assert_eq!(c.qer_id, QerId(1));
        assert_eq!(c.gate_status, GateStatus::default());
        assert_eq!(c.mbr.map(|m| m.downlink_kbps), Some(2_000_000));
        assert_eq!(c.qfi, Some(Qfi(9)));
        assert_eq!(c.gbr, None);
        // scapy 2.8: IE_UpdateQER(IE_list=[IE_QER_Id(id=1), IE_GateStatus(ul="CLOSED", dl="CLOSED")])
        let tlv = hex("000e000d006d0004000000010019000105");
        let u = check::canonical::<UpdateQer>(value_of(&tlv, 14));
        assert_eq!(u.gate_status.map(|g| g.uplink), Some(Gate::Closed));
        // scapy 2.8: IE_RemoveQER(IE_list=[IE_QER_Id(id=2)])
        let tlv = hex("00120008006d000400000002");
        assert_eq!(
            check::canonical::<RemoveQer>(value_of(&tlv, 18)).qer_id,
            QerId(2)
        );
        // Gate Status is mandatory in Create QER.
        let e = CreateQer::decode(&hex("006d000400000001")).unwrap_err();
        assert_eq!(e.offending_ie(), Some(25));
    }

    proptest! {
        #[test]
        fn roundtrip(
            c: CreateQer, u: UpdateQer, r: RemoveQer, g: GateStatus, m: Mbr, b: Gbr,
            p: PacketRate, q: QerCorrelationId, a: AveragingWindow, i: PagingPolicyIndicator,
            rq: Rqi,
        ) {
            check::roundtrip(&c); check::roundtrip(&u); check::roundtrip(&r);
            check::roundtrip(&g); check::roundtrip(&m); check::roundtrip(&b);
            check::roundtrip(&p); check::roundtrip(&q); check::roundtrip(&a);
            check::roundtrip(&i); check::roundtrip(&rq);
        }

        #[test]
        fn garbage_never_panics(v: Vec<u8>) {
            let _ = CreateQer::decode(&v); let _ = UpdateQer::decode(&v);
            let _ = RemoveQer::decode(&v); let _ = GateStatus::decode(&v);
            let _ = Mbr::decode(&v); let _ = Gbr::decode(&v); let _ = PacketRate::decode(&v);
            let _ = QerCorrelationId::decode(&v); let _ = AveragingWindow::decode(&v);
            let _ = PagingPolicyIndicator::decode(&v); let _ = Rqi::decode(&v);
        }
    }
}
