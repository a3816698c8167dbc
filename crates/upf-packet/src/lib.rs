//! What the I/O backends and the pipeline share, below both: the packet buffer with its
//! headroom and port, the hash that steers a UE's packets to the worker owning its session
//! (the BPF steering programs are tested against [`steer`]), and the queue groups packets
//! are classified into ([`classes`]).
#![forbid(unsafe_code)]

pub mod classes;
pub mod packet;
pub mod steer;

pub use packet::{Packet, Port, BUF_LEN, HEADROOM};
