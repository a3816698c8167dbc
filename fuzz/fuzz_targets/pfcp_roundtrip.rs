//! PFCP decode → encode → decode: whatever decodes re-encodes canonically, and the canonical
//! form decodes to the same message and re-encodes to the same octets.
#![no_main]
use libfuzzer_sys::fuzz_target;
use upf_pfcp::Pdu;

fuzz_target!(|data: &[u8]| {
    for pdu in upf_pfcp::decode_all(data).map_while(Result::ok) {
        let bytes = pdu.to_bytes();
        let (again, rest) = Pdu::decode(&bytes).expect("canonical encoding must decode");
        assert!(rest.is_empty());
        assert_eq!(again, pdu);
        assert_eq!(again.to_bytes(), bytes);
    }
});
