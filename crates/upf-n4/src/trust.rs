//! The N4 trust boundary: who may act on an association or a session (TS 29.244 §6.2.6, §6.3;
//! TS 33.501 §9.9 leaves N4 without authentication of its own, so the source address is what
//! there is). A request is processed only from an address of an established association; a
//! session request only from the association that established the session; a node-level
//! request naming a Node ID only from that Node ID's association. Everything else is refused
//! with the cause the spec gives, counted by reason and reported as an event.

use crate::agent::{Agent, Association, Event};
use crate::session::SessionCtx;
use std::net::{IpAddr, SocketAddr};
use upf_pfcp::ie::NodeId;
use upf_rules::{Datapath, Seid};

/// Why a request was refused at the trust boundary. Each has its counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Association Setup from a peer outside the allow-list (cause 64).
    NotAllowed,
    /// Association Setup naming a Node ID that is associated from other addresses (cause 64):
    /// a restart is accepted only from the peer's own addresses.
    NodeAssociatedElsewhere,
    /// A request other than Heartbeat and Association Setup from an address that belongs to no
    /// association (cause 72).
    NotAssociated,
    /// A request naming a Node ID whose association is not the sender's (cause 72).
    NodeIdOfAnother,
    /// A session request for a SEID that no session has (cause 65).
    UnknownSeid,
    /// A session request for a session of another association (cause 65, as for an unknown
    /// SEID: the sender learns nothing of it).
    SessionOfAnother,
}

impl Refusal {
    pub const ALL: [Refusal; 6] = [
        Self::NotAllowed,
        Self::NodeAssociatedElsewhere,
        Self::NotAssociated,
        Self::NodeIdOfAnother,
        Self::UnknownSeid,
        Self::SessionOfAnother,
    ];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Self::NotAllowed => "not_allowed",
            Self::NodeAssociatedElsewhere => "node_associated_elsewhere",
            Self::NotAssociated => "not_associated",
            Self::NodeIdOfAnother => "node_id_of_another",
            Self::UnknownSeid => "unknown_seid",
            Self::SessionOfAnother => "session_of_another",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

impl Association {
    /// Whether `ip` is one of the peer's addresses: the one it set the association up from,
    /// and its Node ID's when that is an address (FQDN Node IDs are not resolved: their
    /// peers speak from the address they associated from).
    pub(crate) fn speaks_from(&self, ip: IpAddr) -> bool {
        self.addr.ip() == ip
            || match self.cp.node {
                NodeId::Ipv4(a) => IpAddr::V4(a) == ip,
                NodeId::Ipv6(a) => IpAddr::V6(a) == ip,
                NodeId::Fqdn(_) => false,
            }
    }
}

impl<D: Datapath> Agent<D> {
    /// Counts a refusal and reports it (the driver logs events at a bounded rate).
    pub(crate) fn refuse(&mut self, message_type: u8, peer: SocketAddr, reason: Refusal) {
        self.stats.refused[reason.index()] += 1;
        self.event(Event::Refused {
            message_type,
            peer,
            reason,
        });
    }

    /// Whether `peer` speaks for some established association.
    pub(crate) fn is_associated(&self, peer: SocketAddr) -> bool {
        self.assocs.values().any(|a| a.speaks_from(peer.ip()))
    }

    /// Whether `peer` speaks for the association of `node`.
    pub(crate) fn speaks_for(&self, peer: SocketAddr, node: &NodeId) -> bool {
        self.assocs
            .get(node)
            .is_some_and(|a| a.speaks_from(peer.ip()))
    }

    /// The session `seid` if `peer` speaks for the association that established it; else why
    /// not.
    pub(crate) fn owned_session(
        &self,
        peer: SocketAddr,
        seid: Seid,
    ) -> Result<&SessionCtx, Refusal> {
        let ctx = self.sessions.get(&seid).ok_or(Refusal::UnknownSeid)?;
        if self.speaks_for(peer, &ctx.cp.node) {
            Ok(ctx)
        } else {
            Err(Refusal::SessionOfAnother)
        }
    }
}
