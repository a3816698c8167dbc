//! SDF filters (TS 29.244 §8.2.5) and the IPFilterRule text of their Flow Description
//! (TS 29.212 §5.4.2, RFC 6733 §4.3.1), parsed once when a rule is created.

use crate::pdr::{prefix_match, PacketMeta};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::net::IpAddr;

/// One SDF filter: every present field must match (TS 29.244 §5.2.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct SdfFilter {
    pub flow: Option<FlowDescription>,
    /// ToS / Traffic Class value and mask.
    pub tos: Option<(u8, u8)>,
    pub spi: Option<u32>,
    pub flow_label: Option<u32>,
    /// SDF Filter ID (BID), by which the SMF refers to a bidirectional filter.
    pub filter_id: Option<u32>,
}

impl SdfFilter {
    /// Whether the packet matches. `from_ue` says the packet travels from the UE (uplink);
    /// `ue_addr` is its UE-side address when the PDI names one.
    pub fn matches(&self, p: &PacketMeta, from_ue: bool, ue_addr: Option<IpAddr>) -> bool {
        if let Some((value, mask)) = self.tos {
            if p.tos & mask != value & mask {
                return false;
            }
        }
        if self.spi.is_some() && p.spi != self.spi {
            return false;
        }
        if self.flow_label.is_some() && p.flow_label != self.flow_label {
            return false;
        }
        self.flow
            .as_ref()
            .is_none_or(|f| f.matches(p, from_ue, ue_addr))
    }
}

/// `permit`/`deny` of an IPFilterRule. Only `permit` appears in PFCP; `deny` never matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    Permit,
    Deny,
}

/// `in` (from the UE) or `out` (towards the UE), TS 29.212 §5.4.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Direction {
    In,
    Out,
}

/// The address part of an IPFilterRule endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Address {
    Any,
    /// The UE's own address(es) (keyword `assigned`).
    Assigned,
    Prefix(IpAddr, u8),
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

/// One side of an IPFilterRule (`from …` or `to …`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    pub address: Address,
    pub negated: bool,
    /// Empty: any port.
    pub ports: SmallVec<[PortRange; 1]>,
}

impl Endpoint {
    fn is_ue(&self, ue_addr: Option<IpAddr>) -> bool {
        match self.address {
            Address::Assigned => true,
            Address::Prefix(net, len) => {
                !self.negated && ue_addr.is_some_and(|a| in_prefix(net, len, a))
            }
            Address::Any => false,
        }
    }

    fn matches(&self, addr: IpAddr, port: u16, ue_addr: Option<IpAddr>) -> bool {
        let hit = match self.address {
            Address::Any => true,
            // Without a UE address in the PDI, `assigned` cannot be checked; the PDI's UE IP
            // (when present) has been checked already.
            Address::Assigned => ue_addr.is_none_or(|ue| ue == addr),
            Address::Prefix(net, len) => in_prefix(net, len, addr),
        };
        hit != self.negated
            && (self.ports.is_empty()
                || self
                    .ports
                    .iter()
                    .any(|r| (r.first..=r.last).contains(&port)))
    }
}

fn in_prefix(net: IpAddr, len: u8, addr: IpAddr) -> bool {
    match (net, addr) {
        (IpAddr::V4(n), IpAddr::V4(a)) => prefix_match(&n.octets(), &a.octets(), len),
        (IpAddr::V6(n), IpAddr::V6(a)) => prefix_match(&n.octets(), &a.octets(), len),
        _ => false,
    }
}

/// A parsed IPFilterRule: `action dir proto from SRC [ports] to DST [ports] [options]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FlowDescription {
    pub action: Action,
    pub direction: Direction,
    /// `None` for `ip` (any protocol).
    pub protocol: Option<u8>,
    pub from: Endpoint,
    pub to: Endpoint,
}

/// Why a Flow Description was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowParseError(pub &'static str);

impl core::fmt::Display for FlowParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.0)
    }
}

impl FlowDescription {
    pub fn parse(text: &str) -> Result<Self, FlowParseError> {
        let mut t = text.split_ascii_whitespace().peekable();
        let action = match t.next() {
            Some("permit") => Action::Permit,
            Some("deny") => Action::Deny,
            _ => return Err(FlowParseError("expected permit or deny")),
        };
        let direction = match t.next() {
            Some("in") => Direction::In,
            Some("out") => Direction::Out,
            _ => return Err(FlowParseError("expected in or out")),
        };
        let protocol = parse_protocol(t.next().ok_or(FlowParseError("missing protocol"))?)?;
        if t.next() != Some("from") {
            return Err(FlowParseError("expected from"));
        }
        let from = parse_endpoint(&mut t)?;
        if t.next() != Some("to") {
            return Err(FlowParseError("expected to"));
        }
        let to = parse_endpoint(&mut t)?;
        // RFC 6733 options (frag, ipoptions, tcpflags, …) are accepted and not enforced;
        // anything else is an error rather than a silently different filter.
        for opt in t {
            let known = [
                "frag",
                "ipoptions",
                "tcpoptions",
                "established",
                "setup",
                "tcpflags",
                "icmptypes",
            ];
            if !known.contains(&opt)
                && !opt
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ",!-".contains(c))
            {
                return Err(FlowParseError("unknown option"));
            }
        }
        Ok(Self {
            action,
            direction,
            protocol,
            from,
            to,
        })
    }

    /// Whether the packet matches. TS 29.244 §5.2.1A.2A writes filters in the downlink sense
    /// (`out`, from the remote side to the UE) even in uplink PDRs; SMFs in the field also
    /// write uplink filters the other way round ("from assigned to any"). So the UE side of the
    /// rule is found first — the endpoint that is `assigned` or holds the UE address, else `to`
    /// for `out` and `from` for `in` — and matched against the packet's UE-side address.
    pub fn matches(&self, p: &PacketMeta, from_ue: bool, ue_addr: Option<IpAddr>) -> bool {
        if self.action == Action::Deny {
            return false;
        }
        if self.protocol.is_some_and(|proto| proto != p.protocol) {
            return false;
        }
        let ue_is_to = if self.to.is_ue(ue_addr) {
            true
        } else if self.from.is_ue(ue_addr) {
            false
        } else {
            self.direction == Direction::Out
        };
        let (ue_side, remote_side) = if ue_is_to {
            (&self.to, &self.from)
        } else {
            (&self.from, &self.to)
        };
        let ((ue_a, ue_p), (re_a, re_p)) = if from_ue {
            ((p.src, p.src_port), (p.dst, p.dst_port))
        } else {
            ((p.dst, p.dst_port), (p.src, p.src_port))
        };
        ue_side.matches(ue_a, ue_p, ue_addr) && remote_side.matches(re_a, re_p, ue_addr)
    }
}

fn parse_protocol(s: &str) -> Result<Option<u8>, FlowParseError> {
    Ok(Some(match s {
        "ip" | "any" => return Ok(None),
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "gre" => 47,
        "esp" => 50,
        "icmpv6" | "ipv6-icmp" => 58,
        "sctp" => 132,
        n => n
            .parse::<u8>()
            .map_err(|_| FlowParseError("bad protocol"))?,
    }))
}

fn parse_endpoint<'a>(
    t: &mut core::iter::Peekable<impl Iterator<Item = &'a str>>,
) -> Result<Endpoint, FlowParseError> {
    let word = t.next().ok_or(FlowParseError("missing address"))?;
    let (negated, word) = match word.strip_prefix('!') {
        Some(w) => (true, w),
        None => (false, word),
    };
    let address = match word {
        "any" => Address::Any,
        "assigned" => Address::Assigned,
        w => parse_prefix(w)?,
    };
    let mut ports = SmallVec::new();
    if let Some(p) = t.peek() {
        if p.starts_with(|c: char| c.is_ascii_digit()) {
            for range in t.next().unwrap_or_default().split(',') {
                ports.push(parse_port_range(range)?);
            }
        }
    }
    Ok(Endpoint {
        address,
        negated,
        ports,
    })
}

fn parse_prefix(w: &str) -> Result<Address, FlowParseError> {
    let bad = FlowParseError("bad address");
    let (addr, mask) = match w.split_once('/') {
        Some((a, m)) => (a.parse::<IpAddr>().map_err(|_| bad.clone())?, Some(m)),
        None => (w.parse::<IpAddr>().map_err(|_| bad.clone())?, None),
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match mask {
        None => max,
        Some(m) => match m.parse::<u8>() {
            Ok(len) if len <= max => len,
            Ok(_) => return Err(bad),
            // A dotted mask, "/255.255.255.0": contiguous ones only.
            Err(_) => {
                let m: std::net::Ipv4Addr = m.parse().map_err(|_| bad.clone())?;
                let bits = u32::from(m);
                if bits.leading_ones() + bits.trailing_zeros() != 32 || !addr.is_ipv4() {
                    return Err(bad);
                }
                u8::try_from(bits.leading_ones()).map_err(|_| bad.clone())?
            }
        },
    };
    Ok(Address::Prefix(addr, len))
}

fn parse_port_range(s: &str) -> Result<PortRange, FlowParseError> {
    let bad = || FlowParseError("bad port");
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let first = a.parse::<u16>().map_err(|_| bad())?;
    let last = b.parse::<u16>().map_err(|_| bad())?;
    if first > last {
        return Err(bad());
    }
    Ok(PortRange { first, last })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdr::Interface;

    fn pkt(src: &str, sp: u16, dst: &str, dp: u16, proto: u8) -> PacketMeta {
        PacketMeta {
            source: Interface::Access,
            teid: None,
            qfi: None,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            protocol: proto,
            src_port: sp,
            dst_port: dp,
            tos: 0,
            spi: None,
            flow_label: None,
        }
    }

    #[test]
    fn parses_what_smfs_send() {
        // free5GC / Open5GS default rules, and a typical PCC rule.
        for s in [
            "permit out ip from any to assigned",
            "permit out 17 from 198.51.100.0/24 8000-9000 to assigned",
            "permit out ip from 2001:db8::/32 to assigned",
            "permit in udp from assigned 5000,6000-6001 to any",
            "permit out ip from 10.0.0.0/255.0.0.0 to !10.60.0.1 frag",
        ] {
            FlowDescription::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        }
        for s in [
            "",
            "allow out ip from any to any",
            "permit sideways ip from any to any",
            "permit out ip from any",
            "permit out 300 from any to any",
            "permit out ip from 10.0.0.1/33 to any",
            "permit out ip from any 9-8 to any",
            "permit out ip from any to any {weird}",
        ] {
            assert!(FlowDescription::parse(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn both_direction_conventions_match_uplink() {
        let ue: IpAddr = "10.60.0.1".parse().unwrap();
        let up = pkt("10.60.0.1", 40000, "198.51.100.7", 8080, 6);
        let down = pkt("198.51.100.7", 8080, "10.60.0.1", 40000, 6);
        // §5.2.1A.2A convention: written downlink-wise, used in the uplink PDR too.
        let spec =
            FlowDescription::parse("permit out 6 from 198.51.100.0/24 8080 to assigned").unwrap();
        // The other convention: written in the packet's own direction.
        let field =
            FlowDescription::parse("permit out 6 from assigned to 198.51.100.0/24 8080").unwrap();
        for f in [&spec, &field] {
            assert!(f.matches(&up, true, Some(ue)));
            assert!(f.matches(&down, false, Some(ue)));
            // The remote port is 8080, not the UE's.
            assert!(!f.matches(
                &pkt("10.60.0.1", 8080, "198.51.100.7", 1, 6),
                true,
                Some(ue)
            ));
            assert!(!f.matches(
                &pkt("10.60.0.1", 1, "198.51.100.7", 8080, 17),
                true,
                Some(ue)
            ));
        }
        // No UE address at all (N9 PDR): `out` puts the UE on the `to` side.
        let n9 = FlowDescription::parse("permit out ip from 198.51.100.7 to 10.60.0.0/16").unwrap();
        assert!(n9.matches(&up, true, None));
        assert!(!n9.matches(&pkt("10.61.0.1", 1, "198.51.100.7", 1, 6), true, None));
    }

    proptest::proptest! {
        /// Whatever text arrives in a Flow Description, parsing returns and a parsed rule
        /// prints nothing that panics when matched.
        #[test]
        fn parse_never_panics(s in "\\PC{0,80}", words in proptest::collection::vec(
            proptest::sample::select(vec!["permit", "deny", "in", "out", "ip", "17", "from", "to",
                "any", "assigned", "!10.0.0.1/8", "2001:db8::/129", "1-2,3", "65535", "0-70000",
                "frag", "10.0.0.0/255.0.0.0", "::/0"]), 0..12)) {
            let _ = FlowDescription::parse(&s);
            if let Ok(f) = FlowDescription::parse(&words.join(" ")) {
                let p = pkt("10.0.0.1", 1, "::1", 2, 17);
                let _ = f.matches(&p, true, Some(p.src));
                let _ = f.matches(&p, false, None);
            }
        }
    }

    #[test]
    fn tos_spi_and_flow_label() {
        let mut p = pkt("10.60.0.1", 1, "198.51.100.7", 2, 50);
        p.tos = 0xb8;
        p.spi = Some(7);
        let f = SdfFilter {
            tos: Some((0xb8, 0xfc)),
            spi: Some(7),
            ..Default::default()
        };
        assert!(f.matches(&p, true, None));
        p.tos = 0x00;
        assert!(!f.matches(&p, true, None));
        assert!(SdfFilter::default().matches(&p, true, None));
        let fl = SdfFilter {
            flow_label: Some(0x12345),
            ..Default::default()
        };
        assert!(!fl.matches(&p, true, None));
    }
}
