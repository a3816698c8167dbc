//! The N4 agent: the PFCP procedures of TS 29.244 a UP function owes its SMFs, without I/O.
//! Datagrams go in with `handle_datagram(now, peer, bytes)`, datagrams to send come out of
//! `poll_transmit`, timers are `poll_timeout` / `handle_timeout(now)`. Sessions reach the
//! data path through `upf_rules::Datapath`.
#![forbid(unsafe_code)]

pub mod alloc;
pub mod reliability;
