//! Arbitrary bytes as Ethernet frames through the I/O backends' parsers: the AF_PACKET receive
//! path's framing (`ip_of_frame`), the fanout steering reference (`fanout_worker`, which the
//! eBPF program must agree with) and the XDP program's reference (`xdp_worker`). Beyond "no
//! panic", checks that a chosen worker is always one of the workers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr};
use upf_io::af_packet::ip_of_frame;
use upf_io::af_xdp::{xdp_worker, Filter};
use upf_io::fanout::fanout_worker;
use upf_io::Port;

fuzz_target!(|frame: &[u8]| {
    if let Some(ip) = ip_of_frame(frame) {
        assert!(ip.len() <= frame.len());
    }
    let n = 1 + usize::from(frame.first().copied().unwrap_or(0) % 8);
    for port in Port::ALL {
        assert!(fanout_worker(port, frame, n) < n);
    }
    let local = vec![IpAddr::V4(Ipv4Addr::new(192, 168, 3, 1))];
    for gtpu in [true, false] {
        let f = Filter::new(gtpu, local.clone(), n as u32);
        if let Some(w) = xdp_worker(frame, &f) {
            assert!((w as usize) < n);
        }
    }
});
