//! `upf-xdp`: the XDP engine of the UPF (issue #27). Sessions of `upf-rules` are
//! compiled by [`compile`] into the maps of `bpf/engine.bpf.c`, an XDP program that runs the
//! common case (IPv4 and IPv6 UEs) in the kernel exactly as the user-space `upf_dataplane::Pipeline` does;
//! a session it does not run is punted ([`Punt`]), and so is every packet it does not claim:
//! counted, and tail-called unchanged into upf-io's AF_XDP steering program of the arriving
//! interface ([`Engine::attach`]), so it reaches the user-space engine as it would without
//! this one (XDP_PASS when no steering program is given).
//!
//! What the program claims (held to the `Pipeline` by `tests/differential.rs`):
//! - uplink: Ethernet, IPv4 without options (checksum right, not a fragment) to the N3
//!   address, or IPv6 without extension headers to the N3 IPv6 address ([`Config::n3_v6`];
//!   its UDP checksum not looked at, as the reference's `decapsulate` does not), UDP to port
//!   2152, a G-PDU without options or with exactly one one-word PDU Session Container (its
//!   QFI read), lengths consistent; the inner packet IPv4 without
//!   options, not a later fragment, at least 24 octets, of any protocol (ports: TCP, UDP,
//!   SCTP and UDP-Lite's; an ICMP echo's identifier as both; none, 0, for the rest, and a
//!   port-range filter then matches only if its range holds 0); a TEID the engine holds;
//! - downlink: Ethernet, the same inner form to a UE address the engine holds, else in the
//!   longest Framed Route it holds (an LPM trie; a route is one session's);
//! - IPv6 inner packets (in IPv4 or IPv6 tunnels), both ways, by a second program tail-called for them
//!   (`xdp_engine6`, so that each stays within the verifier's limits): no extension
//!   header, at least 8 octets of payload (ports, an ICMPv6 echo's identifier, an ESP SPI;
//!   Traffic Class and flow label read); downlink found by the /64 of the destination (a
//!   session's UE prefix must be a /64, one a session); a PDR's UE IP matches an address in
//!   that /64, and its SDF filters are matched as `Filter::matches` does for IPv6, which
//!   end is the UE's decided per packet; Hop Limit decremented. The uplink ACL: an IPv6
//!   packet from the UE gets the ACL's default when no rule can match an IPv6 packet
//!   ([`upf_dataplane::Acl::judges_ipv6`]), else it is punted;
//! - the PDRs of the TEID (or of the session, by UE address) in precedence order, matched
//!   by QFI, UE address (or one in the PDR's Framed Routes, up to 4, IPv4; `assigned` is
//!   then that address, as the reference reads it) and up to 4 SDF filters each (protocol, ToS, addresses with masks
//!   and negation, one port range a side, an ESP packet's SPI; a flow label matches none);
//! - FAR drop (`far_drop`), forward without a target (`no_forwarding_target`), forward to N6
//!   with the outer headers removed, or into a GTP-U/UDP/IPv4 or GTP-U/UDP/IPv6 tunnel from
//!   the N3 address (from N6 to the gNB) or, the outer headers removed, from the N3 or N9
//!   address to the gNB or another UPF (N9 leaves by N3's interface; no routed hop, as the
//!   reference); an IPv6 one from our IPv6 address on its side (none: the session is
//!   punted), as `upf_wire::encap::encapsulate_gtpu_v6` writes it (hop limit the outer TTL,
//!   flow label 0, the UDP checksum over the pseudo-header and the whole datagram); Transport
//!   Level Marking, ECN copied, PSC with the QERs' QFI and RQI to the access
//!   side (else the arriving QFI), an UL container with the arriving QFI first to the core;
//! - the uplink ACL on packets from the UE, after classification (`acl_denied`): the
//!   tables `upf_dataplane::Acl` compiles, probed as `Acl::check4` probes them (src/acl.rs);
//! - inner TTL decremented (`ttl_expired`); QER gates (`gate_closed`); QER MBRs per direction
//!   (`mbr_exceeded`) as the reference's token buckets (depth rate × averaging window, 2 s by
//!   default, at least 12,000 bits; every bucket of the PDR's QERs must conform before any is
//!   taken), shared by the session's PDRs that name the QER (a session AMBR is such a QER),
//!   one spin lock a session so that CPUs share them exactly; URR volume and packet counts per
//!   direction; URR Volume Quotas (total, uplink, downlink octets since the grant: the packet
//!   that reaches one passes, the next ones are `quota_exhausted`; a changed quota is a new
//!   grant), under the same lock; URR Volume Thresholds (total, uplink, downlink octets since
//!   the last report) and quotas reported when VOLTH and VOLQU ask: the packet that reaches
//!   one raises the report (the quota's first, as `UrrState::check`) on the `crossings` ring
//!   buffer, once until the caller re-arms the URR ([`Engine::crossings`], [`Engine::rearm`]);
//!   `no_matching_pdr`;
//! - egress: redirected (DEVMAP; XDP_TX on the arriving interface) to the port's interface,
//!   N6 uplink, N3 downlink, with the Ethernet addresses of `bpf_fib_lookup`; without a
//!   next hop there (no neighbour yet, no route, forwarding off, ...) punted unchanged,
//!   counted by [`Unrouted`]. With fixed [`Hops`] (for BPF_PROG_TEST_RUN): XDP_TX with them.
//!
//! URR reports (periodic, query, removal, and those the program raises) are the caller's,
//! from [`Engine::usage`] (`upf_runtime::Engines` adds them to the workers' reports). The
//! threshold counts what passed the URR's PDRs' QoS checks under the lock, before the next
//! hop is known: a packet punted for want of one counts there and in the workers (as it
//! counts against a quota), and what the kernel counts between the read of a report and the
//! re-arming (microseconds) counts toward the next threshold as well. A report the full ring
//! buffer had no room for is counted ([`Stats::crossings_lost`]) and found in the slots'
//! state by [`Engine::missed_crossings`]. A session entering the kernel counts toward its
//! thresholds what another engine measured since the last report ([`Engine::credit`]).
//!
//! The maps, for many sessions: a key (TEID, UE address) finds its session's own 48 octets
//! (slot, UE address, each PDR's tunnel, the index of its PDR list) in a direct-mapped array
//! entry, one cache line, or behind it in a hash map (`keys`); the PDR lists are interned
//! (shapes), so sessions of one policy share them and they stay in cache. An IPv6 tunnel's
//! far end is in the session slot's own entry of `peers6` (up to [`V6_PEERS`] a session),
//! read only for such a tunnel. An IPv6 G-PDU runs, past the first 20 octets of its header,
//! as an IPv4 one (so that the verifier's states of the two are pruned as one).
//!
//! Not here yet (punted): inner packets shorter than 24 octets or later fragments,
//! IPv4 options, VLAN tags, unknown TEIDs and UE addresses, GTP-U signalling, SDF filters
//! with more than one port range a side, UE prefixes other than a /64, IPv6 Framed Routes,
//! IPv6 packets with extension headers or judged by ACL rules, G-PDUs in IPv6 with extension
//! headers or to the N9 address (and in IPv4 to the N9 address), IPv6 tunnels without our
//! IPv6 address on their side, Framed Routes of a session with two UE addresses or whose SDF
//! prefixes tell the UE address from a routed one, GBR, packet
//! rates, QER Correlation IDs (rates shared between sessions), URR time thresholds and quotas,
//! triggers other than periodic and volume ones, Quota Action FARs, buffering,
//! duplication, tunnels in tunnels, times. Network Instances are not looked at: the engine
//! runs with one N6 (the daemon's config ensures it), which any instance the workers accept
//! names.

mod acl;
mod compile;
mod engine;
mod keys;

pub use acl::ACL_TABLES;
pub use compile::{
    compile, Action, CAddr, CBucket, CPdr, CSdf, CSide, Compiled, Hops, Ipv6Locals, NextHop, Punt,
    MAX_PDRS, MAX_PDR_MBRS, MAX_PDR_URRS, MAX_ROUTES, MAX_SDF, MAX_TEIDS, MAX_UES, QOS_BUCKETS,
    URR_SLOTS,
};
pub use engine::{
    BucketState, Config, Crossing, Detached, Engine, InstallError, QosState, Stats, Usage,
    SLOT_QUARANTINE, V6_PEERS,
};
pub use keys::ENTRY_QUARANTINE;

/// Why a packet the program would forward was punted unchanged instead: the answer of
/// `bpf_fib_lookup` for its port (`BPF_FIB_LKUP_RET_*`), the port's interface not attached
/// or the route leaving by another interface, or an error of the lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unrouted {
    Blackhole,
    Unreachable,
    Prohibit,
    NotForwarded,
    ForwardingDisabled,
    UnsupportedLwt,
    NoNeighbour,
    FragmentationNeeded,
    NoSourceAddress,
    OtherInterface,
    FibError,
}

impl Unrouted {
    /// In the order of the program's counters (`S_FIB` on in bpf/engine.bpf.c).
    pub const ALL: [Unrouted; 11] = [
        Unrouted::Blackhole,
        Unrouted::Unreachable,
        Unrouted::Prohibit,
        Unrouted::NotForwarded,
        Unrouted::ForwardingDisabled,
        Unrouted::UnsupportedLwt,
        Unrouted::NoNeighbour,
        Unrouted::FragmentationNeeded,
        Unrouted::NoSourceAddress,
        Unrouted::OtherInterface,
        Unrouted::FibError,
    ];

    /// Name for metrics and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Unrouted::Blackhole => "blackhole",
            Unrouted::Unreachable => "unreachable",
            Unrouted::Prohibit => "prohibit",
            Unrouted::NotForwarded => "not_forwarded",
            Unrouted::ForwardingDisabled => "forwarding_disabled",
            Unrouted::UnsupportedLwt => "unsupported_lwt",
            Unrouted::NoNeighbour => "no_neighbour",
            Unrouted::FragmentationNeeded => "fragmentation_needed",
            Unrouted::NoSourceAddress => "no_source_address",
            Unrouted::OtherInterface => "other_interface",
            Unrouted::FibError => "fib_error",
        }
    }
}

/// Why the program dropped a packet: the names are `upf_dataplane::DropReason`'s for the same
/// reasons (a test holds them equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    NoMatchingPdr,
    FarDrop,
    NoForwardingTarget,
    GateClosed,
    TtlExpired,
    EncapFailed,
    MbrExceeded,
    QuotaExhausted,
    AclDenied,
}

impl Reason {
    /// In the order of the program's counter indices (`R_*` in bpf/engine.bpf.c).
    pub const ALL: [Reason; 9] = [
        Reason::NoMatchingPdr,
        Reason::FarDrop,
        Reason::NoForwardingTarget,
        Reason::GateClosed,
        Reason::TtlExpired,
        Reason::EncapFailed,
        Reason::MbrExceeded,
        Reason::QuotaExhausted,
        Reason::AclDenied,
    ];

    /// Name for metrics and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Reason::NoMatchingPdr => "no_matching_pdr",
            Reason::FarDrop => "far_drop",
            Reason::NoForwardingTarget => "no_forwarding_target",
            Reason::GateClosed => "gate_closed",
            Reason::TtlExpired => "ttl_expired",
            Reason::EncapFailed => "encap_failed",
            Reason::MbrExceeded => "mbr_exceeded",
            Reason::QuotaExhausted => "quota_exhausted",
            Reason::AclDenied => "acl_denied",
        }
    }
}
