//! Every packet the pipeline does not send has a named reason, and each reason a counter.
//! Invariant (checked by tests): `received + created = sent + dropped + buffered`.

use upf_packet::Port;

macro_rules! drop_reasons {
    ($($(#[$m:meta])* $v:ident = $name:literal,)*) => {
        /// Why a packet was not forwarded.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum DropReason { $($(#[$m])* $v,)* }

        impl DropReason {
            pub const ALL: &'static [DropReason] = &[$(DropReason::$v,)*];
            pub const COUNT: usize = Self::ALL.len();

            /// Name for metrics and logs.
            pub const fn name(self) -> &'static str {
                match self { $(DropReason::$v => $name,)* }
            }
        }
    };
}

drop_reasons! {
    /// Outer IP/UDP/GTP-U header truncated or inconsistent.
    MalformedOuter = "malformed_outer",
    /// Outer IP fragment (reassembly is not done on the fast path).
    OuterFragment = "outer_fragment",
    /// GTP version other than 1, or GTP' (TS 29.281 §5.1).
    BadGtpVersion = "bad_gtp_version",
    /// GTP-U extension header we must understand but do not (TS 29.281 §5.2.1); its sender
    /// is sent a Supported Extension Headers Notification (§7.2.3, rate-limited).
    UnknownExtension = "unknown_extension",
    /// GTP-U message type the user plane does not handle.
    UnsupportedGtpMessage = "unsupported_gtp_message",
    /// G-PDU for a TEID no session owns (an Error Indication is sent, rate-limited).
    UnknownTeid = "unknown_teid",
    /// N6 packet for an address no session owns.
    UnknownUe = "unknown_ue",
    /// Inner (user) packet truncated or not IP.
    MalformedInner = "malformed_inner",
    /// The session has no PDR matching the packet.
    NoMatchingPdr = "no_matching_pdr",
    /// The uplink ACL denied the packet.
    AclDenied = "acl_denied",
    /// The FAR says drop (or has no action).
    FarDrop = "far_drop",
    /// The FAR forwards but names nowhere this UPF can send to.
    NoForwardingTarget = "no_forwarding_target",
    /// A QER gate is closed for this direction.
    GateClosed = "gate_closed",
    /// A QER's maximum bit rate was exceeded.
    MbrExceeded = "mbr_exceeded",
    /// A QER's packet rate (packets per time unit) was exceeded.
    PacketRateExceeded = "packet_rate_exceeded",
    /// A URR's volume quota is used up.
    QuotaExhausted = "quota_exhausted",
    /// The session's or the worker's buffer is full.
    BufferFull = "buffer_full",
    /// Buffered packets discarded (DROBU, session removal, FAR changed to drop).
    BufferDiscarded = "buffer_discarded",
    /// Buffered longer than the DL Buffering Duration of a Session Report Response.
    BufferExpired = "buffer_expired",
    /// TTL / Hop Limit would reach zero.
    TtlExpired = "ttl_expired",
    /// Encapsulation impossible (packet too large for the outer header).
    EncapFailed = "encap_failed",
    /// Echo Response, End Marker or Error Indication received: handled, not forwarded.
    Signalling = "signalling_consumed",
}

/// One worker's packet counters. Plain integers: each worker owns its own and they are
/// summed when read, so the fast path has no atomics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Counters {
    pub rx_packets: [u64; 3],
    pub rx_bytes: [u64; 3],
    pub tx_packets: [u64; 3],
    pub tx_bytes: [u64; 3],
    pub dropped: [u64; DropReason::COUNT],
    /// Packets made here: duplicates, Echo Requests and Responses, Error Indications,
    /// Supported Extension Headers Notifications, End Markers.
    pub created: u64,
    /// Packets held in buffers right now.
    pub buffered: u64,
    /// Error Indications not sent: the rate limit, or a TEID of another shard of the
    /// cluster (`PipelineConfig::silent_teids`).
    pub error_indications_suppressed: u64,
    /// Error Indications received for a session whose SMF was told of one since the session
    /// was last installed or modified: not reported again.
    pub error_indications_repeated: u64,
    /// Supported Extension Headers Notifications not sent because of the rate limit.
    pub ext_header_notifications_suppressed: u64,
    /// GTP-U path management: Echo Requests sent (retransmissions included), and Echo
    /// Responses that answered one.
    pub echo_requests: u64,
    pub echo_responses: u64,
    /// GTP-U peers probed right now (live tunnels lead to them), and those of them
    /// unreachable (gauges; only the worker that probes has any).
    pub gtpu_peers: u64,
    pub gtpu_peers_unreachable: u64,
}

impl Counters {
    #[inline(always)]
    pub fn drop(&mut self, r: DropReason) {
        self.dropped[r as usize] += 1;
    }

    #[inline(always)]
    pub fn rx(&mut self, port: Port, len: usize) {
        self.rx_packets[port.index()] += 1;
        self.rx_bytes[port.index()] += len as u64;
    }

    #[inline(always)]
    pub fn tx(&mut self, port: Port, len: usize) {
        self.tx_packets[port.index()] += 1;
        self.tx_bytes[port.index()] += len as u64;
    }

    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }

    pub fn received(&self) -> u64 {
        self.rx_packets.iter().sum()
    }

    pub fn sent(&self) -> u64 {
        self.tx_packets.iter().sum()
    }

    pub fn dropped(&self, r: DropReason) -> u64 {
        self.dropped[r as usize]
    }

    /// `received + created == sent + dropped + buffered`.
    pub fn balanced(&self) -> bool {
        self.received() + self.created == self.sent() + self.dropped_total() + self.buffered
    }

    /// Adds another worker's counters (for reporting).
    pub fn add(&mut self, o: &Counters) {
        for i in 0..3 {
            self.rx_packets[i] += o.rx_packets[i];
            self.rx_bytes[i] += o.rx_bytes[i];
            self.tx_packets[i] += o.tx_packets[i];
            self.tx_bytes[i] += o.tx_bytes[i];
        }
        for (a, b) in self.dropped.iter_mut().zip(o.dropped.iter()) {
            *a += b;
        }
        self.created += o.created;
        self.buffered += o.buffered;
        self.error_indications_suppressed += o.error_indications_suppressed;
        self.error_indications_repeated += o.error_indications_repeated;
        self.ext_header_notifications_suppressed += o.ext_header_notifications_suppressed;
        self.echo_requests += o.echo_requests;
        self.echo_responses += o.echo_responses;
        self.gtpu_peers += o.gtpu_peers;
        self.gtpu_peers_unreachable += o.gtpu_peers_unreachable;
    }
}
