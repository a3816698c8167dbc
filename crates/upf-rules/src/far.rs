//! Forwarding Action Rules (TS 29.244 §5.2.3, §7.5.2.3) and Buffering Action Rules (§5.2.6).

use crate::flags::flags;
use crate::ids::{BarId, FarId, Teid};
use crate::pdr::Interface;
use crate::shared::Shared;
use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

flags!(
    /// Apply Action flags (TS 29.244 §8.2.26), bit positions as in the IE (octet 5 low byte).
    ApplyAction(u16) {
        DROP = 0x0001,
        FORW = 0x0002,
        BUFF = 0x0004,
        NOCP = 0x0008,
        DUPL = 0x0010,
        IPMA = 0x0020,
        IPMD = 0x0040,
        DFRT = 0x0080,
        EDRT = 0x0100,
        BDPN = 0x0200,
        DDPN = 0x0400,
    }
);

/// Outer header to add when forwarding (TS 29.244 §8.2.56), resolved to one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OuterHeaderCreation {
    /// GTP-U/UDP/IP towards `peer` with `teid` (N3 downlink, N9).
    Gtpu { teid: Teid, peer: IpAddr },
    /// UDP/IP towards `peer:port` (N6 tunnelling).
    Udp { peer: IpAddr, port: u16 },
    /// IP-in-IP towards `peer`.
    Ip { peer: IpAddr },
}

/// Redirect Information (TS 29.244 §8.2.20).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Redirect {
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    Url(CompactString),
    SipUri(CompactString),
}

/// Forwarding Parameters (TS 29.244 §7.5.2.3-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forwarding {
    pub destination: Interface,
    pub outer_header_creation: Option<OuterHeaderCreation>,
    /// DSCP for the outer (or, without one, the IP) header: ToS value and mask (§8.2.12).
    pub transport_level_marking: Option<(u8, u8)>,
    /// Network instance, forwarding policy, redirect: read through the accessors. Shared,
    /// as most FARs of a UP function name the same few network instances.
    pub extra: Shared<ForwardingExtra>,
}

/// The parts of [`Forwarding`] that many FARs have alike, or few have at all.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct ForwardingExtra {
    pub network_instance: Option<CompactString>,
    pub forwarding_policy: Option<CompactString>,
    pub redirect: Option<Redirect>,
    /// Destination Interface Type (§8.2.118), the 6-bit value.
    pub interface_type: Option<u8>,
}

impl Forwarding {
    pub fn to(destination: Interface) -> Self {
        Self {
            destination,
            outer_header_creation: None,
            transport_level_marking: None,
            extra: Shared::new(),
        }
    }

    pub fn network_instance(&self) -> Option<&str> {
        self.extra.get()?.network_instance.as_deref()
    }

    pub fn forwarding_policy(&self) -> Option<&str> {
        self.extra.get()?.forwarding_policy.as_deref()
    }

    pub fn redirect(&self) -> Option<&Redirect> {
        self.extra.get()?.redirect.as_ref()
    }

    pub fn interface_type(&self) -> Option<u8> {
        self.extra.get()?.interface_type
    }

    /// Whether its tunnel (if it has one) leaves by the N9 side ([`Interface::tunnels_on_n9`]).
    pub fn tunnels_on_n9(&self) -> bool {
        self.destination.tunnels_on_n9(self.interface_type())
    }

    /// The extra parts to change (a copy of their own if they were shared).
    pub fn extra_mut(&mut self) -> &mut ForwardingExtra {
        self.extra.make_mut()
    }
}

/// Duplicating Parameters (TS 29.244 §7.5.2.3-3), e.g. towards a lawful-interception function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Duplicating {
    pub destination: Interface,
    pub outer_header_creation: Option<OuterHeaderCreation>,
    pub transport_level_marking: Option<(u8, u8)>,
    pub forwarding_policy: Option<CompactString>,
}

/// A Forwarding Action Rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Far {
    pub id: FarId,
    pub action: ApplyAction,
    /// Absent in a FAR that drops or buffers; SMFs also send FORW without it while the
    /// downlink tunnel is not known yet, which then behaves as a drop.
    pub forwarding: Option<Forwarding>,
    /// Rare; a boxed slice allocates nothing when empty.
    pub duplicating: Box<[Duplicating]>,
    pub bar: Option<BarId>,
}

/// A Buffering Action Rule (TS 29.244 §7.5.2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Bar {
    pub id: BarId,
    /// Delay before the first Downlink Data Report (§8.2.28), in milliseconds.
    pub downlink_data_notification_delay_ms: u32,
    /// How many packets to buffer (§8.2.100); `None` leaves it to the UP function.
    pub suggested_buffering_packets: Option<u8>,
    /// Extended buffering, from a Session Report Response: how long a downlink packet may
    /// stay buffered (DL Buffering Duration, §8.2.29; `None`: no limit) and how many may be
    /// (DL Buffering Suggested Packet Count, §8.2.30).
    pub dl_buffering_duration_s: Option<u64>,
    pub dl_buffering_packets: Option<u16>,
}
