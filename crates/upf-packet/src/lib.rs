//! What the I/O backends and the pipeline share, below both: the packet buffer with its
//! headroom and port, and the hash that steers a UE's packets to the worker owning its
//! session (the BPF steering programs are tested against [`steer`]).
#![forbid(unsafe_code)]

pub mod packet;
pub mod steer;

pub use packet::{Packet, Port, BUF_LEN, HEADROOM};
