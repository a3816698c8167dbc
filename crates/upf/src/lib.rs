//! The `upf` binary's library part: the decode tool and capture files, shared with its tests.
#![forbid(unsafe_code)]

pub mod decode;
pub mod pcap;
pub mod run;
