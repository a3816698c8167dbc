//! Rule identifiers and other integer IEs shared by several rule families.

use crate::codec::{ie_uint, IeValue};
use crate::error::DecodeError;
use crate::tlv::Reader;

ie_uint!(
    /// TS 29.244 §8.2.36 PDR ID (rule id, 16 bits).
    PdrId(u16)
);
ie_uint!(
    /// TS 29.244 §8.2.74 FAR ID; bit 32 set means a predefined FAR.
    FarId(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.75 QER ID; bit 32 set means a predefined QER.
    QerId(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.54 URR ID; bit 32 set means a predefined URR.
    UrrId(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.88 BAR ID (8 bits).
    BarId(u8)
);
ie_uint!(
    /// TS 29.244 §8.2.11 Precedence: lower value, higher precedence.
    Precedence(u32)
);

/// TS 29.244 §8.2.89 QFI: a 6-bit QoS Flow Identifier in the low bits of one octet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(transparent)]
pub struct Qfi(#[cfg_attr(test, proptest(strategy = "0u8..64"))] pub u8);

impl IeValue for Qfi {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        Ok(Self(Reader::new(value).u8()? & 0x3f))
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.0 & 0x3f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check;
    use proptest::prelude::*;

    #[test]
    fn vectors() {
        // Values as scapy 2.8 IE_PDR_ID / IE_FAR_Id / IE_QFI encode them.
        assert_eq!(check::canonical::<PdrId>(&[0x00, 0x01]), PdrId(1));
        assert_eq!(check::canonical::<FarId>(&[0, 0, 0, 7]), FarId(7));
        assert_eq!(check::canonical::<Qfi>(&[9]), Qfi(9));
        assert!(PdrId::decode(&[1]).is_err());
    }

    proptest! {
        #[test]
        fn roundtrip(a: PdrId, b: FarId, c: QerId, d: UrrId, e: BarId, f: Precedence, q: Qfi) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c); check::roundtrip(&d);
            check::roundtrip(&e); check::roundtrip(&f); check::roundtrip(&q);
        }
    }
}
