//! Heap allocations made by decoding a Session Establishment Request with 4 PDRs, 4 FARs,
//! 2 QERs, 2 URRs and a BAR: the budget is one per rule (issue #2), so ≤ 12 here.
//! Counted with dhat's heap profiler in testing mode (its own test binary: one global allocator).

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[test]
fn establishment_decode_allocates_at_most_one_block_per_rule() {
    let s = include_str!("../../../testdata/pfcp/bench-establishment.hex").trim();
    let bytes: Vec<u8> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect();
    let _profiler = dhat::Profiler::builder().testing().build();
    let before = dhat::HeapStats::get();
    let (pdu, _) = upf_pfcp::Pdu::decode(&bytes).unwrap();
    let after = dhat::HeapStats::get();
    let allocations = after.total_blocks - before.total_blocks;
    let upf_pfcp::Message::SessionEstablishmentRequest(m) = &pdu.message else {
        panic!()
    };
    let rules =
        m.create_pdrs.len() + m.create_fars.len() + m.create_qers.len() + m.create_urrs.len();
    assert_eq!(rules, 12);
    eprintln!("decode of a {rules}-rule establishment request: {allocations} heap allocations");
    dhat::assert!(
        allocations <= rules as u64,
        "{allocations} allocations for {rules} rules"
    );
}
