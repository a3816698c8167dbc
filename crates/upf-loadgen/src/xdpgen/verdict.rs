//! A program that returns a fixed verdict (`bpf/verdict.bpf.c`).

use super::object::load_xdp;
use crate::sys;
use aya::programs::XdpMode;
use aya::{Ebpf, EbpfLoader};
use std::io;
use upf_io::bpf;

static VERDICT_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/verdict.bpf.o"));

/// An XDP program returning `verdict` (XDP_PASS: lets a veth accept redirected frames and
/// hand them to the kernel; XDP_DROP), attached to `dev` of `netns` while the value lives.
#[derive(Debug)]
pub struct Fixed {
    _ebpf: Ebpf,
}

impl Fixed {
    pub fn attach_in(netns: &str, dev: &str, verdict: i32) -> io::Result<Fixed> {
        upf_netns::in_netns(netns, || {
            let ifindex = sys::ifindex(dev)?;
            let verdict = u32::try_from(verdict)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "XDP verdict"))?;
            let mut ebpf = EbpfLoader::new()
                .override_global("verdict", &verdict, true)
                .load(VERDICT_OBJECT)
                .map_err(|e| bpf::error("loading the verdict object", &e))?;
            load_xdp(&mut ebpf, "upf_verdict")?
                .attach_to_if_index(ifindex, XdpMode::Driver)
                .map_err(|e| bpf::error(&format!("attaching XDP to {dev}"), &e))?;
            Ok(Fixed { _ebpf: ebpf })
        })?
    }
}
