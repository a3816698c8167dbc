//! `upf-dataplane`: the packet pipeline of the UPF.
//!
//! Sessions of the abstract model (`upf-rules`) are compiled into per-worker tables (uplink by
//! TEID, downlink by UE IP, every entry carrying its resolved FAR/QER/URR slots) and batches of
//! packets run through them to completion: parse → classify → PDR → FAR → QER → URR →
//! encapsulate/forward. No I/O, no threads, no clock: `now` is a parameter.
#![forbid(unsafe_code)]

pub mod flow;
