//! Classification into queue groups (seed 001, issue #28): which of 2 to 4 groups a packet
//! goes to as it arrives, by the QFI of a G-PDU's PDU Session Container on N3/N9 and the DSCP
//! of an N6 packet. Group 0 is the highest priority. The worker's scheduler
//! (`upf_runtime::priority`) and the XDP program in front of the AF_XDP sockets (which
//! classifies with the same tables) share it.

use crate::{Packet, Port};
/// Queue groups at most.
pub const MAX_GROUPS: usize = 4;
/// QFI and DSCP values: both 6 bits.
pub const CODES: usize = 64;

/// Which queue group each QFI (uplink and N9, from the PDU Session Container) and each DSCP
/// (N6) goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classes {
    groups: u8,
    qfi: [u8; CODES],
    dscp: [u8; CODES],
}

/// The default high-priority QFIs: a QFI is usually given the value of its standardized 5QI
/// (TS 23.501 Table 5.7.4-1), and 5QIs 1 to 4 are the GBR real-time services
/// (conversational voice, conversational video, real-time gaming, non-conversational
/// video; priority levels 20 to 50) and 5QI 5 is IMS signalling (priority level 10).
/// Non-GBR 6 to 9 (buffered video, TCP, the default bearer) are low. 5QIs above 63 (mission
/// critical, delay-critical GBR) do not fit a QFI: an operator maps the QFIs it gives them.
pub const DEFAULT_HIGH_QFI: [u8; 5] = [1, 2, 3, 4, 5];

/// The default high-priority DSCPs, by the service classes of RFC 4594 (Figure 3): EF 46
/// (telephony), VOICE-ADMIT 44 (RFC 5865), CS5 40 (signalling), CS4 32 (real-time
/// interactive), AF41-43 34/36/38 (multimedia conferencing), CS6 48 (network control) and
/// CS7 56. The rest (streaming, data, CS0 best effort, CS1 low priority) is low.
pub const DEFAULT_HIGH_DSCP: [u8; 9] = [46, 44, 40, 32, 34, 36, 38, 48, 56];

/// Why a [`Classes`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassesError {
    #[error("groups: {0} is not within 2..=4")]
    Groups(usize),
    #[error("{kind}: {lists} lists for {groups} groups")]
    Lists {
        kind: &'static str,
        lists: usize,
        groups: usize,
    },
    #[error("{kind}[{group}]: {value} is not within 0..=63")]
    Range {
        kind: &'static str,
        group: usize,
        value: u8,
    },
    #[error("{kind}[{group}]: {value} is already in group {first}")]
    Twice {
        kind: &'static str,
        group: usize,
        value: u8,
        first: usize,
    },
}

impl Default for Classes {
    fn default() -> Self {
        Self::new(
            2,
            &[DEFAULT_HIGH_QFI.to_vec()],
            &[DEFAULT_HIGH_DSCP.to_vec()],
        )
        .expect("the defaults are valid")
    }
}

impl Classes {
    /// `groups` queue groups; `qfi[g]` and `dscp[g]` list the values of group `g`, and values
    /// no list has go to the lowest group (`groups - 1`). A value listed twice is refused.
    pub fn new(groups: usize, qfi: &[Vec<u8>], dscp: &[Vec<u8>]) -> Result<Self, ClassesError> {
        if !(2..=MAX_GROUPS).contains(&groups) {
            return Err(ClassesError::Groups(groups));
        }
        let lowest = u8::try_from(groups - 1).map_err(|_| ClassesError::Groups(groups))?;
        let table = |kind: &'static str, lists: &[Vec<u8>]| {
            if lists.len() > groups {
                return Err(ClassesError::Lists {
                    kind,
                    lists: lists.len(),
                    groups,
                });
            }
            let mut t = [lowest; CODES];
            let mut seen: [Option<usize>; CODES] = [None; CODES];
            for (group, list) in (0u8..).zip(lists) {
                let group_index = usize::from(group);
                for &value in list {
                    let v = usize::from(value);
                    if v >= CODES {
                        return Err(ClassesError::Range {
                            kind,
                            group: group_index,
                            value,
                        });
                    }
                    if let Some(first) = seen[v] {
                        return Err(ClassesError::Twice {
                            kind,
                            group: group_index,
                            value,
                            first,
                        });
                    }
                    seen[v] = Some(group_index);
                    t[v] = group;
                }
            }
            Ok(t)
        };
        Ok(Self {
            groups: lowest + 1,
            qfi: table("qfi", qfi)?,
            dscp: table("dscp", dscp)?,
        })
    }

    pub fn groups(&self) -> usize {
        usize::from(self.groups)
    }

    /// The lowest-priority group: unlisted values, malformed packets and G-PDUs without a
    /// PDU Session Container.
    pub fn lowest(&self) -> u8 {
        self.groups - 1
    }

    pub fn of_qfi(&self, qfi: u8) -> u8 {
        self.qfi[usize::from(qfi & 0x3f)]
    }

    pub fn of_dscp(&self, dscp: u8) -> u8 {
        self.dscp[usize::from(dscp & 0x3f)]
    }

    /// The group of a packet as it arrives on `port()`, read at fixed offsets without a
    /// full parse: N3/N9 by the QFI of its PDU Session Container, N6 by the DSCP of its IP
    /// header. A G-PDU without a container, and anything malformed or short, goes to the
    /// lowest group (the UE sets its own inner DSCP: trusting it would let a UE raise its
    /// uplink). GTP-U messages other than G-PDUs (Echo, Error Indication) go to the highest:
    /// path supervision must survive an overload, and they are few.
    pub fn group_of(&self, p: &Packet) -> u8 {
        self.group_of_ip(p.port(), p.data())
    }

    /// [`Classes::group_of`] of the IP packet `d` arriving on `port`.
    pub fn group_of_ip(&self, port: Port, d: &[u8]) -> u8 {
        let g = match port {
            Port::N3 | Port::N9 => self.gtpu_group(d),
            Port::N6 => dscp(d).map(|c| self.of_dscp(c)),
        };
        g.unwrap_or(self.lowest())
    }

    fn gtpu_group(&self, d: &[u8]) -> Option<u8> {
        match gtpu_qfi(d)? {
            Gtpu::Signalling => Some(0),
            Gtpu::Qfi(q) => Some(self.of_qfi(q)),
        }
    }
}

/// What classification reads of a GTP-U packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gtpu {
    /// A GTP-U message other than a G-PDU.
    Signalling,
    /// A G-PDU's QFI.
    Qfi(u8),
}

/// Extension headers walked, at most, before the PDU Session Container is given up on.
const MAX_EXTENSIONS: usize = 4;

/// The QFI of a G-PDU behind an outer IPv4 (any IHL) or IPv6 (no extension header) and UDP
/// header; `None` when malformed or without a PDU Session Container.
fn gtpu_qfi(d: &[u8]) -> Option<Gtpu> {
    let udp = match d.first()? >> 4 {
        4 => {
            let ihl = usize::from(d[0] & 0x0f) * 4;
            (ihl >= 20 && *d.get(9)? == 17).then_some(ihl)?
        }
        6 => (*d.get(6)? == 17).then_some(40)?,
        _ => return None,
    };
    let g = d.get(udp + 8..)?;
    // Version 1, protocol type GTP.
    if g.len() < 8 || g[0] & 0xf0 != 0x30 {
        return None;
    }
    if g[1] != 0xff {
        return Some(Gtpu::Signalling);
    }
    if g[0] & 0x04 == 0 {
        return None;
    }
    let mut next = *g.get(11)?;
    let mut at = 12;
    for _ in 0..MAX_EXTENSIONS {
        if next == 0 {
            return None;
        }
        // Length in words, the last octet the next extension's type.
        let len = usize::from(*g.get(at)?) * 4;
        let ext = g.get(at..at + len)?;
        if len == 0 {
            return None;
        }
        if next == 0x85 {
            // Octet 1: PDU type; octet 2: QFI in its low 6 bits, DL and UL alike (TS 38.415).
            return Some(Gtpu::Qfi(*ext.get(2)? & 0x3f));
        }
        next = ext[len - 1];
        at += len;
    }
    None
}

/// The DSCP of an IPv4 or IPv6 header.
fn dscp(d: &[u8]) -> Option<u8> {
    match d.first()? >> 4 {
        4 if d.len() >= 20 => Some(d[1] >> 2),
        6 if d.len() >= 40 => Some((((d[0] & 0x0f) << 4) | (d[1] >> 4)) >> 2),
        _ => None,
    }
}
