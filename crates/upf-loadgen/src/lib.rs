//! `upf-loadgen`: the other side of the UPF, for end-to-end tests and load.
//!
//! - [`smf`]: an SMF emulator, a PFCP client over UDP (association, sessions with uplink and
//!   downlink tunnels, QER, URR; modification, deletion, release), requests in flight in a
//!   window, retransmission after T1 up to N1 times.
//! - [`gnb`]: a gNB/UE emulator: a TUN device holding the UE addresses on one side, GTP-U over
//!   UDP port 2152 on the other.
//! - [`xdpgen`]: a frame generator on BPF_PROG_RUN live frames (XDP) into a veth, and an
//!   XDP program that counts and drops what arrives at a veth (a counting sink).
//!
//! Namespaces and veths (to create the TUN and the sockets inside one) are upf-netns's.
//!
//! Everything is `#![forbid(unsafe_code)]` except the module `sys` (a thread signal), whose
//! every block has a `// SAFETY:` comment. The TUN device is upf-io's ([`upf_io::tun::open`]).

pub mod gnb;
pub mod smf;
mod sys;
pub mod xdpgen;
