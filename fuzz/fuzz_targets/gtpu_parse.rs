//! Arbitrary bytes through every upf-wire parser: as an outer IP/UDP/GTP-U
//! packet (extension chain, PSC, inner 5-tuple), as a bare GTP-U message
//! (signalling IEs), and as an inner IP packet. Beyond "no panic", checks
//! that ranges stay in bounds and that re-emitting a parsed GTP-U header
//! parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use upf_wire::encap;
use upf_wire::ext::{PduSessionContainer, PduSessionInfo};
use upf_wire::flow::{self, Direction, FiveTuple};
use upf_wire::gtpu;
use upf_wire::gtpu_msg::{IeIter, Message};
use upf_wire::{ipv4, ipv6};

fn inner(ip: &[u8]) {
    if let Ok(t) = FiveTuple::parse(ip) {
        let _ = flow::flow_hash(&t);
    }
    let _ = flow::inner_ue_addr(ip, Direction::Uplink);
    if let Ok(p) = ipv4::Packet::new_checked(ip) {
        let _ = (p.verify_checksum(), p.options().len(), p.payload().len());
        let _ = ipv4::Repr::parse(&p);
    }
    if let Ok(p) = ipv6::Packet::new_checked(ip) {
        if let Ok(ul) = p.upper_layer() {
            assert!(ul.offset <= p.total_len());
        }
    }
}

fn gtpu_roundtrip(repr: &gtpu::Repr) {
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut gtpu::Packet::new_unchecked(&mut buf[..]))
        .expect("a parsed header re-emits");
    let p = gtpu::Packet::new_checked(&buf[..]).expect("re-emitted header checks");
    assert_eq!(gtpu::Repr::parse(&p), Ok(*repr));
}

fn gtpu_message(msg: &[u8]) {
    if let Ok(p) = gtpu::Packet::new_checked(msg) {
        for h in p.extensions().flatten() {
            let _ = PduSessionContainer::parse(h.content);
            if let Ok(i) = PduSessionInfo::new(h.content) {
                let _ = (i.qfi(), i.ppi(), i.dl_sending_timestamp());
            }
        }
        let _ = p.payload();
    }
    if let Ok((repr, payload)) = gtpu::decode(msg) {
        assert_eq!(payload.len(), repr.payload_len);
        gtpu_roundtrip(&repr);
        inner(payload);
        let _ = IeIter::new(payload).count();
    }
    let _ = Message::parse(msg);
}

fuzz_target!(|data: &[u8]| {
    for d in [encap::decapsulate(data), encap::decapsulate_verified(data)]
        .into_iter()
        .flatten()
    {
        let payload = data.get(d.inner.clone()).expect("inner range in bounds");
        assert_eq!(payload.len(), d.gtpu.payload_len);
        inner(payload);
    }
    gtpu_message(data);
    inner(data);
});
