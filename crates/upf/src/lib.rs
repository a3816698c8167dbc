//! The `upf` binary's library part: the daemon (config, interfaces, admin endpoint and
//! metrics), the one-command demo, the decode tool and capture files, shared with its tests.
#![forbid(unsafe_code)]

pub mod admin;
pub mod backends;
pub mod checkpoint;
pub mod cluster;
pub mod config;
pub mod datapath;
pub mod decode;
#[cfg(feature = "demo")]
pub mod demo;
pub mod metrics;
pub mod pcap;
pub mod run;
pub mod shards;
pub mod state;
