//! The rule syntax: IPFilterRule lines parsed into [`AclRule`]s, and written back.

use super::{AclAction, AclRule, ANY_PORT, MAX_EXPANSION};
use crate::flow::{Addr, Flow, Prefix};
use upf_rules::sdf::{Action, Address, Direction, Endpoint, FlowDescription, FlowParseError};

/// Why a rule line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AclParseError {
    /// Not an IPFilterRule at all.
    Syntax(FlowParseError),
    /// `out`: the ACL only sees uplink packets; write the rule with `in`.
    Out,
    /// `assigned`: the ACL is not per UE.
    Assigned,
    /// `!address`.
    Negated,
    /// Options after the destination (`frag`, `established`, `tcpflags`, …).
    Options,
    /// An IPv4 source with an IPv6 destination or the reverse: it could never match.
    MixedVersions,
    /// Several port ranges on one side, given to [`AclRule::parse`]; [`parse_rules`] expands them.
    PortList,
    /// A line whose port lists expand into more than [`MAX_EXPANSION`] rules.
    TooManyRanges,
}

impl core::fmt::Display for AclParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Syntax(e) => write!(f, "not an IPFilterRule: {e}"),
            Self::Out => {
                f.write_str("direction `out`: the ACL applies to uplink packets, write `in`")
            }
            Self::Assigned => f.write_str("`assigned` is not supported in an ACL"),
            Self::Negated => f.write_str("negated addresses (`!`) are not supported in an ACL"),
            Self::Options => {
                f.write_str("options after the destination are not supported in an ACL")
            }
            Self::MixedVersions => f.write_str("source and destination of different IP versions"),
            Self::PortList => f.write_str("several port ranges make several rules"),
            Self::TooManyRanges => {
                write!(f, "port lists expand into more than {MAX_EXPANSION} rules")
            }
        }
    }
}

impl std::error::Error for AclParseError {}

/// A refused line of an ACL file; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclLoadError {
    pub line: usize,
    pub error: AclParseError,
}

impl core::fmt::Display for AclLoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ACL line {}: {}", self.line, self.error)
    }
}

impl std::error::Error for AclLoadError {}

/// A parsed line before its port lists are expanded.
pub(super) struct Parsed {
    rule: AclRule,
    src_ports: Vec<(u16, u16)>,
    dst_ports: Vec<(u16, u16)>,
}

pub(super) fn endpoint(e: &Endpoint) -> Result<Option<Prefix>, AclParseError> {
    if e.negated {
        return Err(AclParseError::Negated);
    }
    match e.address {
        Address::Any => Ok(None),
        Address::Assigned => Err(AclParseError::Assigned),
        Address::Prefix(ip, len) => Prefix::new(ip, len)
            .map(Some)
            .ok_or(AclParseError::Syntax(FlowParseError("bad address"))),
    }
}

pub(super) fn ranges(e: &Endpoint) -> Vec<(u16, u16)> {
    if e.ports.is_empty() {
        vec![ANY_PORT]
    } else {
        e.ports.iter().map(|r| (r.first, r.last)).collect()
    }
}

impl AclRule {
    /// A rule of any protocol, address and port: [`AclRule::matches`] every packet.
    pub const fn any(action: AclAction) -> Self {
        Self {
            action,
            proto: None,
            src: None,
            dst: None,
            src_ports: ANY_PORT,
            dst_ports: ANY_PORT,
        }
    }

    /// One IPFilterRule line as one rule; port lists are refused ([`AclParseError::PortList`]).
    pub fn parse(line: &str) -> Result<Self, AclParseError> {
        let p = Self::parse_parts(line)?;
        match (p.src_ports.as_slice(), p.dst_ports.as_slice()) {
            (&[src_ports], &[dst_ports]) => Ok(Self {
                src_ports,
                dst_ports,
                ..p.rule
            }),
            _ => Err(AclParseError::PortList),
        }
    }

    /// One IPFilterRule line as the rules it means, one per pair of port ranges, in order.
    pub fn parse_expanded(line: &str) -> Result<Vec<Self>, AclParseError> {
        let p = Self::parse_parts(line)?;
        if p.src_ports.len() * p.dst_ports.len() > MAX_EXPANSION {
            return Err(AclParseError::TooManyRanges);
        }
        let mut out = Vec::with_capacity(p.src_ports.len() * p.dst_ports.len());
        for &src_ports in &p.src_ports {
            for &dst_ports in &p.dst_ports {
                out.push(Self {
                    src_ports,
                    dst_ports,
                    ..p.rule
                });
            }
        }
        Ok(out)
    }

    fn parse_parts(line: &str) -> Result<Parsed, AclParseError> {
        let fd = FlowDescription::parse(line).map_err(AclParseError::Syntax)?;
        if fd.direction == Direction::Out {
            return Err(AclParseError::Out);
        }
        // `FlowDescription::parse` accepts and drops options; count the words to see them:
        // action, direction, protocol, `from`, address, [ports], `to`, address, [ports].
        let words =
            7 + usize::from(!fd.from.ports.is_empty()) + usize::from(!fd.to.ports.is_empty());
        if line.split_ascii_whitespace().count() > words {
            return Err(AclParseError::Options);
        }
        let (src, dst) = (endpoint(&fd.from)?, endpoint(&fd.to)?);
        if let (Some(s), Some(d)) = (src, dst) {
            if s.v6 != d.v6 {
                return Err(AclParseError::MixedVersions);
            }
        }
        let action = match fd.action {
            Action::Permit => AclAction::Permit,
            Action::Deny => AclAction::Deny,
        };
        Ok(Parsed {
            rule: Self {
                action,
                proto: fd.protocol,
                src,
                dst,
                src_ports: ANY_PORT,
                dst_ports: ANY_PORT,
            },
            src_ports: ranges(&fd.from),
            dst_ports: ranges(&fd.to),
        })
    }

    /// Whether the rule matches the packet: the reference that [`Acl::check`] must agree with.
    pub fn matches(&self, f: &Flow) -> bool {
        self.proto.is_none_or(|p| p == f.proto)
            && self.src.is_none_or(|p| p.contains(f.src))
            && self.dst.is_none_or(|p| p.contains(f.dst))
            && (self.src_ports.0..=self.src_ports.1).contains(&f.src_port)
            && (self.dst_ports.0..=self.dst_ports.1).contains(&f.dst_port)
    }
}

/// Writes the rule back as an IPFilterRule. What the syntax cannot say does not parse back:
/// a mask that is not a prefix (printed by its leading ones; [`Prefix::new`] never makes one)
/// and an empty port range.
impl core::fmt::Display for AclRule {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        fn side(
            f: &mut core::fmt::Formatter<'_>,
            p: Option<Prefix>,
            ports: (u16, u16),
        ) -> core::fmt::Result {
            match p {
                None => f.write_str("any")?,
                Some(p) => {
                    let ip = Addr {
                        v6: p.v6,
                        bits: p.net,
                    }
                    .to_ip();
                    write!(f, "{ip}/{}", lead_len(p.mask, p.v6))?;
                }
            }
            match ports {
                ANY_PORT => Ok(()),
                (a, b) if a == b => write!(f, " {a}"),
                (a, b) => write!(f, " {a}-{b}"),
            }
        }
        let action = match self.action {
            AclAction::Permit => "permit",
            AclAction::Deny => "deny",
        };
        write!(f, "{action} in ")?;
        match self.proto {
            None => f.write_str("ip")?,
            Some(p) => write!(f, "{p}")?,
        }
        f.write_str(" from ")?;
        side(f, self.src, self.src_ports)?;
        f.write_str(" to ")?;
        side(f, self.dst, self.dst_ports)
    }
}

/// An ACL file: one rule per line, `#` starts a comment, blank lines are skipped; port lists
/// are expanded ([`AclRule::parse_expanded`]).
pub fn parse_rules(text: &str) -> Result<Vec<AclRule>, AclLoadError> {
    let mut rules = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let more =
            AclRule::parse_expanded(line).map_err(|error| AclLoadError { line: n + 1, error })?;
        rules.extend(more);
    }
    Ok(rules)
}

/// Leading ones of a mask within its version's width: the longest prefix mask it contains.
pub(super) fn lead_len(mask: u128, v6: bool) -> u32 {
    if v6 {
        mask.leading_ones()
    } else {
        (mask << 96).leading_ones()
    }
}
