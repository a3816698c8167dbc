//! PFCP decode of arbitrary datagrams: never panics, whatever arrives on N4.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for m in upf_pfcp::decode_all(data) {
        if let Err(e) = m {
            // The error must still map to a cause and print.
            let _ = (e.error.cause(), e.to_string());
        }
    }
});
