//! PFCP rule IEs → the abstract model of `upf-rules` (TS 29.244 §7.5.2 / §7.5.4), with the
//! Cause, Offending IE and Failed Rule ID of every refusal. Allocation (F-TEID CHOOSE, UE IP
//! CHV4/CHV6) is left to the session layer: a converted PDI says what it asks for.

use crate::reject::Reject;
use crate::support;
use compact_str::CompactString;
use std::time::Instant;
use upf_pfcp::ie as p;
use upf_pfcp::Cause;
use upf_rules as r;
use upf_rules::{FlowDescription, Interface, RuleRef};

// IE types named in refusals (TS 29.244 Table 8.1.2-1).
pub(crate) const IE_SDF_FILTER: u16 = 23;
pub(crate) const IE_SOURCE_INTERFACE: u16 = 20;
pub(crate) const IE_F_TEID: u16 = 21;
pub(crate) const IE_NETWORK_INSTANCE: u16 = 22;
pub(crate) const IE_DESTINATION_INTERFACE: u16 = 42;
pub(crate) const IE_APPLY_ACTION: u16 = 44;
pub(crate) const IE_OUTER_HEADER_CREATION: u16 = 84;
pub(crate) const IE_UE_IP_ADDRESS: u16 = 93;
pub(crate) const IE_FAR_ID: u16 = 108;
pub(crate) const IE_REDIRECT_INFORMATION: u16 = 38;
pub(crate) const IE_FRAMED_ROUTE: u16 = 153;
pub(crate) const IE_FRAMED_IPV6_ROUTE: u16 = 155;
pub(crate) const IE_REPORTING_TRIGGERS: u16 = 37;

/// What a PDI asks the UP function to allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PdiAsks {
    /// F-TEID CHOOSE: (CHOOSE ID, IPv4 wanted, IPv6 wanted).
    pub teid: Option<(Option<u8>, bool, bool)>,
    /// UE IP Address CHV4 / CHV6, and whether the UE address is the destination.
    pub ue_v4: bool,
    pub ue_v6: bool,
    pub ue_is_destination: bool,
}

fn interface(v: u8, ie: u16) -> Result<Interface, Reject> {
    Interface::from_pfcp(v)
        .ok_or_else(|| Reject::new(Cause::MANDATORY_IE_INCORRECT, "unknown interface value").ie(ie))
}

fn text(s: &str) -> CompactString {
    CompactString::from(s)
}

/// Create PDR → a PDR whose PDI may still need allocations (see [`PdiAsks`]).
pub fn pdr(c: &p::CreatePdr) -> Result<(r::Pdr, PdiAsks), Reject> {
    let id = r::PdrId(c.pdr_id.0);
    let rule = RuleRef::Pdr(id);
    support::create_pdr(c).map_err(|e| e.on_rule(rule))?;
    let (pdi, asks) = pdi(&c.pdi).map_err(|e| e.on_rule(rule))?;
    // §7.5.2.2: the FAR ID is conditional on the absence of predefined rules; this UP
    // function has none, so it is required.
    let Some(far) = c.far_id else {
        return Err(Reject {
            cause: Cause::CONDITIONAL_IE_MISSING,
            offending_ie: Some(IE_FAR_ID),
            failed_rule: Some(rule),
            detail: "Create PDR without FAR ID",
        });
    };
    Ok((
        r::Pdr {
            id,
            precedence: r::Precedence(c.precedence.0),
            pdi,
            outer_header_removal: c
                .outer_header_removal
                .map(outer_header_removal)
                .transpose()
                .map_err(|e| e.on_rule(rule))?,
            far: Some(r::FarId(far.0)),
            qers: c.qer_ids.iter().map(|q| r::QerId(q.0)).collect(),
            urrs: c.urr_ids.iter().map(|u| r::UrrId(u.0)).collect(),
        },
        asks,
    ))
}

/// Applies an Update PDR to `pdr`; returns what a new PDI asks for, if one was given.
pub fn update_pdr(pdr: &mut r::Pdr, u: &p::UpdatePdr) -> Result<Option<PdiAsks>, Reject> {
    let rule = RuleRef::Pdr(pdr.id);
    support::update_pdr(u).map_err(|e| e.on_rule(rule))?;
    if let Some(ohr) = u.outer_header_removal {
        pdr.outer_header_removal = Some(outer_header_removal(ohr).map_err(|e| e.on_rule(rule))?);
    }
    if let Some(prec) = u.precedence {
        pdr.precedence = r::Precedence(prec.0);
    }
    if let Some(far) = u.far_id {
        pdr.far = Some(r::FarId(far.0));
    }
    // §7.5.4.2: URR IDs and QER IDs in an Update PDR replace the former lists.
    if !u.urr_ids.is_empty() {
        pdr.urrs = u.urr_ids.iter().map(|x| r::UrrId(x.0)).collect();
    }
    if !u.qer_ids.is_empty() {
        pdr.qers = u.qer_ids.iter().map(|x| r::QerId(x.0)).collect();
    }
    match &u.pdi {
        Some(new) => {
            let (pdi, asks) = pdi(new).map_err(|e| e.on_rule(rule))?;
            pdr.pdi = pdi;
            Ok(Some(asks))
        }
        None => Ok(None),
    }
}

/// TS 29.244 §8.2.64. Descriptions 0, 1 and 6 all remove GTP-U/UDP/IP (the IP version is the
/// packet's); values above 8 are read as 1 (Table 8.2.64-1 note), i.e. GTP-U too.
fn outer_header_removal(o: p::OuterHeaderRemoval) -> Result<r::OuterHeaderRemoval, Reject> {
    let psc = o
        .gtpu_extension_header_deletion
        .is_some_and(|b| b & p::OuterHeaderRemoval::PDU_SESSION_CONTAINER != 0);
    Ok(match o.outer_header_removal_description {
        2 | 3 => r::OuterHeaderRemoval::UdpIp,
        4 | 5 => r::OuterHeaderRemoval::Ip,
        7 => r::OuterHeaderRemoval::Vlan { c_tag_too: false },
        8 => r::OuterHeaderRemoval::Vlan { c_tag_too: true },
        _ => r::OuterHeaderRemoval::GtpuUdpIp {
            delete_pdu_session_container: psc,
        },
    })
}

fn pdi(d: &p::Pdi) -> Result<(r::Pdi, PdiAsks), Reject> {
    let mut asks = PdiAsks::default();
    let mut pdi = r::Pdi::any(interface(d.source_interface.0, IE_SOURCE_INTERFACE)?);
    match d.local_f_teid {
        Some(p::FTeid::Assigned { teid, ipv4, ipv6 }) => {
            if teid == 0 || (ipv4.is_none() && ipv6.is_none()) {
                return Err(Reject::new(
                    Cause::MANDATORY_IE_INCORRECT,
                    "F-TEID without TEID or address",
                )
                .ie(IE_F_TEID));
            }
            pdi.local_f_teid = Some(r::LocalFTeid {
                teid: r::Teid(teid),
                ipv4,
                ipv6,
            });
        }
        Some(p::FTeid::Choose {
            ipv4,
            ipv6,
            choose_id,
        }) => asks.teid = Some((choose_id, ipv4, ipv6)),
        None => {}
    }
    let extra = r::PdiExtra {
        network_instance: d.network_instance.as_ref().map(|n| n.0.clone()),
        application_id: d.application_id.as_ref().map(|a| text(&a.0)),
        interface_type: d.source_interface_type.map(|t| t.0),
    };
    if extra != r::PdiExtra::default() {
        *pdi.extra_mut() = extra;
    }
    // Several UE IP Address IEs may come (one per family); the S/D flag of the first decides.
    let mut ue = None::<r::UeIp>;
    for u in d.ue_ip_addresses.iter() {
        let e = ue.get_or_insert(r::UeIp {
            ipv4: None,
            ipv6: None,
            is_destination: u.is_destination,
        });
        e.ipv4 = e.ipv4.or(u.ipv4);
        if let Some(a) = u.ipv6 {
            e.ipv6 = Some((a, u.ipv6_prefix_length.unwrap_or(128).min(128)));
        }
        asks.ue_v4 |= u.choose_ipv4;
        asks.ue_v6 |= u.choose_ipv6;
        asks.ue_is_destination = e.is_destination;
    }
    pdi.ue_ip = ue;
    pdi.sdf_filters = d
        .sdf_filters
        .iter()
        .map(sdf_filter)
        .collect::<Result<Vec<_>, _>>()?
        .into();
    pdi.qfis = d.qfis.iter().map(|q| r::Qfi(q.0)).collect();
    let v4 = d
        .framed_routes
        .iter()
        .map(|x| (x.0.as_str(), IE_FRAMED_ROUTE));
    let v6 = d
        .framed_ipv6_routes
        .iter()
        .map(|x| (x.0.as_str(), IE_FRAMED_IPV6_ROUTE));
    pdi.framed_routes = v4
        .chain(v6)
        .map(|(t, ie)| {
            r::FramedRoute::parse(t).ok_or_else(|| {
                Reject::new(Cause::MANDATORY_IE_INCORRECT, "unreadable framed route").ie(ie)
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((pdi, asks))
}

fn sdf_filter(f: &p::SdfFilter) -> Result<r::SdfFilter, Reject> {
    let flow = match f.flow_description.as_deref() {
        // An empty Flow Description is treated like an absent one (seen in the field).
        Some(t) if !t.trim().is_empty() => Some(FlowDescription::parse(t).map_err(|_| {
            Reject::new(
                Cause::RULE_CREATION_MODIFICATION_FAILURE,
                "unreadable flow description",
            )
            .ie(IE_SDF_FILTER)
        })?),
        _ => None,
    };
    Ok(r::SdfFilter {
        flow,
        tos: f.tos_traffic_class.map(|v| {
            let [value, mask] = v.to_be_bytes();
            (value, mask)
        }),
        spi: f.security_parameter_index,
        flow_label: f.flow_label,
        filter_id: f.sdf_filter_id,
    })
}

/// Create FAR → FAR.
pub fn far(c: &p::CreateFar) -> Result<r::Far, Reject> {
    let id = r::FarId(c.far_id.0);
    let rule = RuleRef::Far(id);
    let on = |e: Reject| e.on_rule(rule);
    support::create_far(c).map_err(on)?;
    Ok(r::Far {
        id,
        action: apply_action(c.apply_action).map_err(on)?,
        forwarding: c
            .forwarding_parameters
            .as_ref()
            .map(forwarding)
            .transpose()
            .map_err(on)?,
        duplicating: c
            .duplicating_parameters
            .iter()
            .map(duplicating)
            .collect::<Result<_, _>>()
            .map_err(on)?,
        bar: c.bar_id.map(|b| r::BarId(b.0)),
    })
}

/// TS 29.244 §8.2.26: one of DROP, FORW and BUFF must be set (NOCP, DUPL … qualify them).
fn apply_action(a: p::ApplyAction) -> Result<r::ApplyAction, Reject> {
    let a = r::ApplyAction::from_bits_retain(a.bits());
    let base = r::ApplyAction::DROP | r::ApplyAction::FORW | r::ApplyAction::BUFF;
    if !a.intersects(base) && !a.contains(r::ApplyAction::DUPL) {
        return Err(Reject::new(
            Cause::MANDATORY_IE_INCORRECT,
            "Apply Action without DROP, FORW or BUFF",
        )
        .ie(IE_APPLY_ACTION));
    }
    Ok(a)
}

fn forwarding(f: &p::ForwardingParameters) -> Result<r::Forwarding, Reject> {
    let mut fw = r::Forwarding::to(interface(
        f.destination_interface.0,
        IE_DESTINATION_INTERFACE,
    )?);
    fw.outer_header_creation = f
        .outer_header_creation
        .map(outer_header_creation)
        .transpose()?;
    fw.transport_level_marking = f
        .transport_level_marking
        .map(|t| (t.tos_traffic_class, t.mask));
    let extra = r::ForwardingExtra {
        network_instance: f.network_instance.as_ref().map(|n| n.0.clone()),
        forwarding_policy: f.forwarding_policy.as_ref().map(|x| text(&x.identifier)),
        redirect: f.redirect_information.as_ref().map(redirect).transpose()?,
        interface_type: f.destination_interface_type.map(|t| t.0),
    };
    if extra != r::ForwardingExtra::default() {
        *fw.extra_mut() = extra;
    }
    Ok(fw)
}

fn duplicating(d: &p::DuplicatingParameters) -> Result<r::Duplicating, Reject> {
    Ok(r::Duplicating {
        destination: interface(d.destination_interface.0, IE_DESTINATION_INTERFACE)?,
        outer_header_creation: d
            .outer_header_creation
            .map(outer_header_creation)
            .transpose()?,
        transport_level_marking: d
            .transport_level_marking
            .map(|t| (t.tos_traffic_class, t.mask)),
        forwarding_policy: d.forwarding_policy.as_ref().map(|x| text(&x.identifier)),
    })
}

/// TS 29.244 §8.2.56: the first header kind the description asks for (IPv4 before IPv6 when
/// both are offered). VLAN tags alone are Ethernet PDU sessions, which this UPF lacks.
fn outer_header_creation(o: p::OuterHeaderCreation) -> Result<r::OuterHeaderCreation, Reject> {
    type O = p::OuterHeaderCreation;
    let bad = || {
        Reject::new(
            Cause::MANDATORY_IE_INCORRECT,
            "outer header creation incomplete",
        )
        .ie(IE_OUTER_HEADER_CREATION)
    };
    let peer = |v4: u16| -> Result<std::net::IpAddr, Reject> {
        if o.has(v4) {
            o.ipv4.map(Into::into).ok_or_else(bad)
        } else {
            o.ipv6.map(Into::into).ok_or_else(bad)
        }
    };
    if o.has(O::GTPU_UDP_IPV4 | O::GTPU_UDP_IPV6) {
        let teid = o.teid.ok_or_else(bad)?;
        Ok(r::OuterHeaderCreation::Gtpu {
            teid: r::Teid(teid),
            peer: peer(O::GTPU_UDP_IPV4)?,
        })
    } else if o.has(O::UDP_IPV4 | O::UDP_IPV6) {
        Ok(r::OuterHeaderCreation::Udp {
            peer: peer(O::UDP_IPV4)?,
            port: o.port_number.ok_or_else(bad)?,
        })
    } else if o.has(O::IPV4 | O::IPV6) {
        Ok(r::OuterHeaderCreation::Ip {
            peer: peer(O::IPV4)?,
        })
    } else {
        Err(
            Reject::new(Cause::SERVICE_NOT_SUPPORTED, "only VLAN tags asked for")
                .ie(IE_OUTER_HEADER_CREATION),
        )
    }
}

fn redirect(ri: &p::RedirectInformation) -> Result<r::Redirect, Reject> {
    type R = p::RedirectInformation;
    let bad = || {
        Reject::new(Cause::MANDATORY_IE_INCORRECT, "bad redirect address")
            .ie(IE_REDIRECT_INFORMATION)
    };
    let addr = ri.redirect_server_address.as_str();
    Ok(match ri.redirect_address_type {
        R::IPV4_ADDRESS
        | R::IPV4_ADDRESS_AND_PORT
        | R::IPV4_AND_IPV6_ADDRESSES
        | R::IPV4_AND_IPV6_ADDRESSES_AND_PORT => {
            r::Redirect::Ipv4(addr.parse().map_err(|_| bad())?)
        }
        R::IPV6_ADDRESS | R::IPV6_ADDRESS_AND_PORT => {
            r::Redirect::Ipv6(addr.parse().map_err(|_| bad())?)
        }
        R::URL => r::Redirect::Url(text(addr)),
        R::SIP_URI => r::Redirect::SipUri(text(addr)),
        _ => {
            return Err(
                Reject::new(Cause::SERVICE_NOT_SUPPORTED, "redirect type not supported")
                    .ie(IE_REDIRECT_INFORMATION),
            )
        }
    })
}

/// Applies an Update FAR (TS 29.244 §7.5.4.3): present IEs replace, absent ones stay.
pub fn update_far(far: &mut r::Far, u: &p::UpdateFar) -> Result<(), Reject> {
    let rule = RuleRef::Far(far.id);
    let on = |e: Reject| e.on_rule(rule);
    support::update_far(u).map_err(on)?;
    if let Some(a) = u.apply_action {
        far.action = apply_action(a).map_err(on)?;
    }
    // OMEC's SMF sends Forwarding Parameters in an Update FAR: read them as an update.
    let omec = u
        .forwarding_parameters
        .as_ref()
        .filter(|_| u.update_forwarding_parameters.is_none())
        .map(|f| p::UpdateForwardingParameters {
            destination_interface: Some(f.destination_interface),
            network_instance: f.network_instance.clone(),
            redirect_information: f.redirect_information.clone(),
            outer_header_creation: f.outer_header_creation,
            transport_level_marking: f.transport_level_marking,
            forwarding_policy: f.forwarding_policy.clone(),
            header_enrichment: f.header_enrichment.clone(),
            pfcpsm_req_flags: None,
            destination_interface_type: f.destination_interface_type,
        });
    if let Some(f) = u.update_forwarding_parameters.as_ref().or(omec.as_ref()) {
        let fw = match far.forwarding.as_mut() {
            Some(fw) => fw,
            None => {
                // A FAR created without Forwarding Parameters (BUFF before the tunnel is known)
                // gets them now; the Destination Interface must come with them.
                let Some(d) = f.destination_interface else {
                    return Err(Reject {
                        cause: Cause::CONDITIONAL_IE_MISSING,
                        offending_ie: Some(IE_DESTINATION_INTERFACE),
                        failed_rule: Some(rule),
                        detail: "new forwarding parameters without Destination Interface",
                    });
                };
                far.forwarding.insert(r::Forwarding::to(
                    interface(d.0, IE_DESTINATION_INTERFACE).map_err(on)?,
                ))
            }
        };
        if let Some(d) = f.destination_interface {
            fw.destination = interface(d.0, IE_DESTINATION_INTERFACE).map_err(on)?;
        }
        if let Some(n) = &f.network_instance {
            fw.extra_mut().network_instance = Some(n.0.clone());
        }
        if let Some(o) = f.outer_header_creation {
            fw.outer_header_creation = Some(outer_header_creation(o).map_err(on)?);
        }
        if let Some(t) = f.transport_level_marking {
            fw.transport_level_marking = Some((t.tos_traffic_class, t.mask));
        }
        if let Some(x) = &f.forwarding_policy {
            fw.extra_mut().forwarding_policy = Some(text(&x.identifier));
        }
        if let Some(ri) = &f.redirect_information {
            fw.extra_mut().redirect = Some(redirect(ri).map_err(on)?);
        }
        if let Some(t) = f.destination_interface_type {
            fw.extra_mut().interface_type = Some(t.0);
        }
    }
    for d in u.update_duplicating_parameters.iter() {
        // §7.5.4.3-3: identified by the destination interface.
        let Some(dest) = d.destination_interface else {
            continue;
        };
        let dest = interface(dest.0, IE_DESTINATION_INTERFACE).map_err(on)?;
        let ohc = d
            .outer_header_creation
            .map(outer_header_creation)
            .transpose()
            .map_err(on)?;
        let tlm = d
            .transport_level_marking
            .map(|t| (t.tos_traffic_class, t.mask));
        let policy = d.forwarding_policy.as_ref().map(|x| text(&x.identifier));
        match far.duplicating.iter_mut().find(|x| x.destination == dest) {
            Some(x) => {
                x.outer_header_creation = ohc.or(x.outer_header_creation);
                x.transport_level_marking = tlm.or(x.transport_level_marking);
                x.forwarding_policy = policy.or(x.forwarding_policy.take());
            }
            None => {
                let mut all = std::mem::take(&mut far.duplicating).into_vec();
                all.push(r::Duplicating {
                    destination: dest,
                    outer_header_creation: ohc,
                    transport_level_marking: tlm,
                    forwarding_policy: policy,
                });
                far.duplicating = all.into_boxed_slice();
            }
        }
    }
    if let Some(b) = u.bar_id {
        far.bar = Some(r::BarId(b.0));
    }
    Ok(())
}

fn bitrate(uplink_kbps: u64, downlink_kbps: u64) -> r::Bitrate {
    r::Bitrate {
        uplink_kbps,
        downlink_kbps,
    }
}

fn gate(g: p::Gate) -> r::Gate {
    match g {
        p::Gate::Open => r::Gate::Open,
        p::Gate::Closed => r::Gate::Closed,
    }
}

/// §8.2.63 time units in seconds (spare values read as a minute).
fn rate(l: p::PacketRateLimit) -> (u16, u32) {
    let per = match l.time_unit {
        1 => 360,
        2 => 3600,
        3 => 86_400,
        4 => 604_800,
        _ => 60,
    };
    (l.max_packets, per)
}

fn packet_rate(pr: p::PacketRate) -> r::PacketRate {
    r::PacketRate {
        uplink: pr.uplink.map(rate),
        downlink: pr.downlink.map(rate),
    }
}

/// Create QER → QER.
pub fn qer(c: &p::CreateQer) -> Result<r::Qer, Reject> {
    support::create_qer(c).map_err(|e| e.on_rule(RuleRef::Qer(r::QerId(c.qer_id.0))))?;
    Ok(r::Qer {
        id: r::QerId(c.qer_id.0),
        correlation_id: c.qer_correlation_id.map(|x| x.0),
        gate_uplink: gate(c.gate_status.uplink),
        gate_downlink: gate(c.gate_status.downlink),
        mbr: c.mbr.map(|m| bitrate(m.uplink_kbps, m.downlink_kbps)),
        gbr: c.gbr.map(|m| bitrate(m.uplink_kbps, m.downlink_kbps)),
        packet_rate: c.packet_rate.map(packet_rate),
        qfi: c.qfi.map(|q| r::Qfi(q.0)),
        rqi: c.rqi.is_some_and(|x| x.0),
        ppi: c.paging_policy_indicator.map(|x| x.0),
        averaging_window_ms: c.averaging_window.map(|x| x.0),
        aggregate: None,
    })
}

/// Applies an Update QER (§7.5.4.6).
pub fn update_qer(q: &mut r::Qer, u: &p::UpdateQer) -> Result<(), Reject> {
    support::update_qer(u).map_err(|e| e.on_rule(RuleRef::Qer(q.id)))?;
    if let Some(x) = u.qer_correlation_id {
        q.correlation_id = Some(x.0);
    }
    if let Some(g) = u.gate_status {
        q.gate_uplink = gate(g.uplink);
        q.gate_downlink = gate(g.downlink);
    }
    if let Some(m) = u.mbr {
        q.mbr = Some(bitrate(m.uplink_kbps, m.downlink_kbps));
    }
    if let Some(m) = u.gbr {
        q.gbr = Some(bitrate(m.uplink_kbps, m.downlink_kbps));
    }
    if let Some(x) = u.packet_rate {
        q.packet_rate = Some(packet_rate(x));
    }
    if let Some(x) = u.qfi {
        q.qfi = Some(r::Qfi(x.0));
    }
    if let Some(x) = u.rqi {
        q.rqi = x.0;
    }
    if let Some(x) = u.paging_policy_indicator {
        q.ppi = Some(x.0);
    }
    if let Some(x) = u.averaging_window {
        q.averaging_window_ms = Some(x.0);
    }
    Ok(())
}

fn volume(v: p::Volume) -> r::VolumeLimit {
    r::VolumeLimit {
        total: v.total,
        uplink: v.uplink,
        downlink: v.downlink,
    }
}

/// The optional URR IEs Create URR and Update URR share, read from either (same field names).
macro_rules! urr_fields {
    ($c:expr) => {{
        let c = $c;
        UrrFields {
            measurement_period: c.measurement_period.map(|x| x.0),
            volume_threshold: c.volume_threshold,
            volume_quota: c.volume_quota,
            time_threshold: c.time_threshold.map(|x| x.0),
            time_quota: c.time_quota.map(|x| x.0),
            quota_holding_time: c.quota_holding_time.map(|x| x.0),
            dropped_dl: c.dropped_dl_traffic_threshold,
            quota_validity_time: c.quota_validity_time.map(|x| x.0),
            monitoring_time: c.monitoring_time.map(|x| x.0),
            subsequent_volume_threshold: c.subsequent_volume_threshold,
            subsequent_time_threshold: c.subsequent_time_threshold.map(|x| x.0),
            subsequent_volume_quota: c.subsequent_volume_quota,
            subsequent_time_quota: c.subsequent_time_quota.map(|x| x.0),
            inactivity_detection_time: c.inactivity_detection_time.map(|x| x.0),
            linked: c.linked_urr_ids.iter().map(|x| r::UrrId(x.0)).collect(),
            info: c.measurement_information.map(|x| x.bits()),
            far_for_quota_action: c.far_id_for_quota_action.map(|x| x.0),
            number_of_reports: c.number_of_reports.map(|x| x.0),
        }
    }};
}

/// Create URR → URR; `instant` places NTP times (Monitoring Time) on our clock.
pub fn urr(c: &p::CreateUrr, instant: impl Fn(u32) -> Instant) -> Result<r::Urr, Reject> {
    let mut u = r::Urr::new(r::UrrId(c.urr_id.0));
    support::create_urr(c).map_err(|e| e.on_rule(RuleRef::Urr(u.id)))?;
    u.method = r::MeasurementMethod::from_bits_retain(c.measurement_method.bits());
    u.triggers = r::ReportingTriggers::from_bits_retain(c.reporting_triggers.bits());
    apply_urr_fields(&mut u, &urr_fields!(c), instant);
    stop_of_traffic(&u)?;
    Ok(u)
}

/// Applies an Update URR (§7.5.4.4): present IEs replace, absent ones stay.
pub fn update_urr(
    u: &mut r::Urr,
    c: &p::UpdateUrr,
    instant: impl Fn(u32) -> Instant,
) -> Result<(), Reject> {
    support::update_urr(c).map_err(|e| e.on_rule(RuleRef::Urr(u.id)))?;
    if let Some(m) = c.measurement_method {
        u.method = r::MeasurementMethod::from_bits_retain(m.bits());
    }
    if let Some(t) = c.reporting_triggers {
        u.triggers = r::ReportingTriggers::from_bits_retain(t.bits());
    }
    apply_urr_fields(u, &urr_fields!(c), instant);
    stop_of_traffic(u)
}

/// STOPT needs an Inactivity Detection Time: that much silence after traffic is what the
/// UPF takes for a stop of traffic. Without one nothing says when traffic has stopped (no
/// application detection either, §5.2.2.3.1), so STOPT would never fire: the URR is refused
/// (on the URR as it stands after an Update URR).
fn stop_of_traffic(u: &r::Urr) -> Result<(), Reject> {
    let idt = u.inactivity_detection_time_s.is_some_and(|s| s > 0);
    if u.triggers.contains(r::ReportingTriggers::STOPT) && !idt {
        return Err(Reject::new(
            Cause::SERVICE_NOT_SUPPORTED,
            "STOPT without an Inactivity Detection Time",
        )
        .ie(IE_REPORTING_TRIGGERS)
        .on_rule(RuleRef::Urr(u.id)));
    }
    Ok(())
}

/// The optional URR IEs Create URR and Update URR share.
struct UrrFields {
    measurement_period: Option<u32>,
    volume_threshold: Option<p::Volume>,
    volume_quota: Option<p::Volume>,
    time_threshold: Option<u32>,
    time_quota: Option<u32>,
    quota_holding_time: Option<u32>,
    dropped_dl: Option<p::DroppedDlTrafficThreshold>,
    quota_validity_time: Option<u32>,
    monitoring_time: Option<u32>,
    subsequent_volume_threshold: Option<p::Volume>,
    subsequent_time_threshold: Option<u32>,
    subsequent_volume_quota: Option<p::Volume>,
    subsequent_time_quota: Option<u32>,
    inactivity_detection_time: Option<u32>,
    linked: smallvec::SmallVec<[r::UrrId; 1]>,
    info: Option<u8>,
    far_for_quota_action: Option<u32>,
    number_of_reports: Option<u16>,
}

fn apply_urr_fields(u: &mut r::Urr, f: &UrrFields, instant: impl Fn(u32) -> Instant) {
    fn set<T: Copy>(slot: &mut Option<T>, v: Option<T>) {
        if v.is_some() {
            *slot = v;
        }
    }
    set(&mut u.measurement_period_s, f.measurement_period);
    set(&mut u.volume_threshold, f.volume_threshold.map(volume));
    set(&mut u.volume_quota, f.volume_quota.map(volume));
    set(&mut u.time_threshold_s, f.time_threshold);
    set(&mut u.time_quota_s, f.time_quota);
    set(&mut u.quota_holding_time_s, f.quota_holding_time);
    set(
        &mut u.inactivity_detection_time_s,
        f.inactivity_detection_time,
    );
    if let Some(i) = f.info {
        u.info = r::MeasurementInfo::from_bits_retain(i);
    }
    let rare = f.quota_validity_time.is_some()
        || f.dropped_dl.is_some()
        || f.monitoring_time.is_some()
        || f.subsequent_volume_threshold.is_some()
        || f.subsequent_time_threshold.is_some()
        || f.subsequent_volume_quota.is_some()
        || f.subsequent_time_quota.is_some()
        || !f.linked.is_empty()
        || f.far_for_quota_action.is_some()
        || f.number_of_reports.is_some();
    if !rare {
        return;
    }
    let x = u.extra_mut();
    set(&mut x.quota_validity_time_s, f.quota_validity_time);
    set(
        &mut x.dropped_dl_threshold,
        f.dropped_dl.map(|d| (d.downlink_packets, d.downlink_bytes)),
    );
    set(&mut x.monitoring_time, f.monitoring_time.map(instant));
    set(
        &mut x.subsequent_volume_threshold,
        f.subsequent_volume_threshold.map(volume),
    );
    set(
        &mut x.subsequent_time_threshold_s,
        f.subsequent_time_threshold,
    );
    set(
        &mut x.subsequent_volume_quota,
        f.subsequent_volume_quota.map(volume),
    );
    set(&mut x.subsequent_time_quota_s, f.subsequent_time_quota);
    if !f.linked.is_empty() {
        x.linked_urrs = f.linked.clone();
    }
    set(
        &mut x.far_for_quota_action,
        f.far_for_quota_action.map(r::FarId),
    );
    set(&mut x.number_of_reports, f.number_of_reports);
}

/// Create BAR → BAR.
pub fn bar(c: &p::CreateBar) -> Result<r::Bar, Reject> {
    support::create_bar(c).map_err(|e| e.on_rule(RuleRef::Bar(r::BarId(c.bar_id.0))))?;
    Ok(r::Bar {
        id: r::BarId(c.bar_id.0),
        downlink_data_notification_delay_ms: c
            .downlink_data_notification_delay
            .map_or(0, |d| d.as_millis()),
        suggested_buffering_packets: c.suggested_buffering_packets_count.map(|x| x.0),
        dl_buffering_duration_s: None,
        dl_buffering_packets: None,
    })
}

/// Applies an Update BAR of a Session Modification (§7.5.4.14).
pub fn update_bar(b: &mut r::Bar, u: &p::UpdateBarSessionModification) -> Result<(), Reject> {
    support::update_bar(u).map_err(|e| e.on_rule(RuleRef::Bar(b.id)))?;
    if let Some(d) = u.downlink_data_notification_delay {
        b.downlink_data_notification_delay_ms = d.as_millis();
    }
    if let Some(c) = u.suggested_buffering_packets_count {
        b.suggested_buffering_packets = Some(c.0);
    }
    Ok(())
}
