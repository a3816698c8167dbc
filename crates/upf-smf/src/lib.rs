//! Builders for the requests an SMF sends, as free5GC / Open5GS shape them: for scenario
//! tests, benchmarks, the fuzz target and load generators. Nothing here is used by the agent.
#![forbid(unsafe_code)]

use std::net::Ipv4Addr;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{List, Message, Pdu};

/// How the UE address of a built session is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UeAddr {
    /// CHV4: the UPF allocates.
    Choose,
    /// The SMF allocated this address.
    Static(Ipv4Addr),
}

pub fn pdi(
    source: SourceInterface,
    f_teid: Option<FTeid>,
    ue: Option<UeIpAddress>,
    sdf: Option<&str>,
) -> Pdi {
    Pdi {
        source_interface: source,
        local_f_teid: f_teid,
        network_instance: Some(NetworkInstance("internet".into())),
        ue_ip_addresses: ue.into_iter().collect(),
        sdf_filters: sdf
            .map(|s| SdfFilter {
                flow_description: Some(s.to_string()),
                ..Default::default()
            })
            .into_iter()
            .collect(),
        qfis: [Qfi(9)].into_iter().collect(),
        ..Default::default()
    }
}

pub fn create_pdr(
    id: u16,
    precedence: u32,
    pdi: Pdi,
    far: u32,
    qers: &[u32],
    urrs: &[u32],
    ohr: bool,
) -> CreatePdr {
    CreatePdr {
        pdr_id: PdrId(id),
        precedence: Precedence(precedence),
        pdi,
        outer_header_removal: ohr.then_some(OuterHeaderRemoval {
            outer_header_removal_description: OuterHeaderRemoval::GTPU_UDP_IPV4,
            gtpu_extension_header_deletion: None,
        }),
        far_id: Some(FarId(far)),
        urr_ids: urrs.iter().map(|&u| UrrId(u)).collect(),
        qer_ids: qers.iter().map(|&q| QerId(q)).collect(),
        ..Default::default()
    }
}

pub fn forwarding(
    dest: DestinationInterface,
    ohc: Option<OuterHeaderCreation>,
) -> ForwardingParameters {
    ForwardingParameters {
        destination_interface: dest,
        network_instance: Some(NetworkInstance("internet".into())),
        outer_header_creation: ohc,
        ..Default::default()
    }
}

pub fn create_far(
    id: u32,
    action: ApplyAction,
    fwd: Option<ForwardingParameters>,
    bar: Option<u8>,
) -> CreateFar {
    CreateFar {
        far_id: FarId(id),
        apply_action: action,
        forwarding_parameters: fwd,
        duplicating_parameters: List::new(),
        bar_id: bar.map(BarId),
    }
}

pub fn create_qer(id: u32, mbr_kbps: Option<(u64, u64)>, qfi: Option<u8>) -> CreateQer {
    CreateQer {
        qer_id: QerId(id),
        gate_status: GateStatus::default(),
        mbr: mbr_kbps.map(|(u, d)| Mbr {
            uplink_kbps: u,
            downlink_kbps: d,
        }),
        qfi: qfi.map(Qfi),
        ..Default::default()
    }
}

pub fn create_urr(
    id: u32,
    triggers: ReportingTriggers,
    volume_threshold: Option<u64>,
) -> CreateUrr {
    CreateUrr {
        urr_id: UrrId(id),
        measurement_method: MeasurementMethod::VOLUM | MeasurementMethod::DURAT,
        reporting_triggers: triggers,
        volume_threshold: volume_threshold.map(|t| Volume {
            total: Some(t),
            uplink: None,
            downlink: None,
        }),
        ..Default::default()
    }
}

/// F-TEID CHOOSE (IPv4) with a CHOOSE ID.
pub fn choose_teid(chid: u8) -> FTeid {
    FTeid::Choose {
        ipv4: true,
        ipv6: false,
        choose_id: Some(chid),
    }
}

pub fn ue_ip(ue: UeAddr, is_destination: bool) -> UeIpAddress {
    match ue {
        UeAddr::Choose => UeIpAddress {
            choose_ipv4: true,
            is_destination,
            ..Default::default()
        },
        UeAddr::Static(a) => UeIpAddress {
            ipv4: Some(a),
            is_destination,
            ..Default::default()
        },
    }
}

/// A Session Establishment Request as a 5GC SMF sends it for one PDU session: 4 PDRs (default
/// and one dedicated flow, each way), 4 FARs (one buffering), 2 QERs (session AMBR + flow),
/// 2 URRs and a BAR — the shape of testdata/pfcp/bench-establishment.hex.
pub fn establishment(
    node: NodeId,
    cp_seid: u64,
    cp_ip: Ipv4Addr,
    ue: UeAddr,
) -> SessionEstablishmentRequest {
    let any = "permit out ip from any to assigned";
    let flow = "permit out 17 from 10.1.0.0/16 1000-2000 to assigned";
    let access = SourceInterface::ACCESS;
    let core = SourceInterface::CORE;
    SessionEstablishmentRequest {
        node_id: node,
        cp_f_seid: FSeid {
            seid: cp_seid,
            ipv4: Some(cp_ip),
            ipv6: None,
        },
        create_pdrs: [
            create_pdr(
                1,
                255,
                pdi(
                    access,
                    Some(choose_teid(1)),
                    Some(ue_ip(ue, false)),
                    Some(any),
                ),
                1,
                &[1, 2],
                &[1],
                true,
            ),
            create_pdr(
                2,
                255,
                pdi(core, None, Some(ue_ip(ue, true)), Some(any)),
                2,
                &[1, 2],
                &[1],
                false,
            ),
            create_pdr(
                3,
                100,
                pdi(
                    access,
                    Some(choose_teid(1)),
                    Some(ue_ip(ue, false)),
                    Some(flow),
                ),
                3,
                &[1],
                &[2],
                true,
            ),
            create_pdr(
                4,
                100,
                pdi(core, None, Some(ue_ip(ue, true)), Some(flow)),
                4,
                &[1],
                &[2],
                false,
            ),
        ]
        .into_iter()
        .collect(),
        create_fars: [
            create_far(
                1,
                ApplyAction::FORW,
                Some(forwarding(DestinationInterface::CORE, None)),
                None,
            ),
            create_far(
                2,
                ApplyAction::FORW,
                Some(forwarding(
                    DestinationInterface::ACCESS,
                    Some(OuterHeaderCreation::gtpu_ipv4(
                        0x0100_0001,
                        Ipv4Addr::new(10, 0, 1, 1),
                    )),
                )),
                None,
            ),
            create_far(
                3,
                ApplyAction::FORW,
                Some(forwarding(DestinationInterface::CORE, None)),
                None,
            ),
            create_far(4, ApplyAction::BUFF | ApplyAction::NOCP, None, Some(1)),
        ]
        .into_iter()
        .collect(),
        create_urrs: [
            create_urr(1, ReportingTriggers::VOLTH, Some(10_000_000)),
            create_urr(2, ReportingTriggers::PERIO, None),
        ]
        .into_iter()
        .collect(),
        create_qers: [
            create_qer(1, Some((200_000, 400_000)), None),
            create_qer(2, Some((50_000, 100_000)), Some(9)),
        ]
        .into_iter()
        .collect(),
        create_bar: Some(CreateBar {
            bar_id: BarId(1),
            downlink_data_notification_delay: Some(DownlinkDataNotificationDelay(2)),
            suggested_buffering_packets_count: None,
        }),
        pdn_type: Some(PdnType::IPV4),
        ..Default::default()
    }
}

/// An empty Session Modification Request, to fill in.
pub fn modification() -> SessionModificationRequest {
    SessionModificationRequest {
        ..Default::default()
    }
}

/// Update FAR: forward towards the gNB's tunnel (what an SMF sends once the N2 setup is done).
pub fn update_far_to_gnb(id: u32, teid: u32, gnb: Ipv4Addr) -> UpdateFar {
    UpdateFar {
        far_id: FarId(id),
        apply_action: Some(ApplyAction::FORW),
        update_forwarding_parameters: Some(UpdateForwardingParameters {
            destination_interface: Some(DestinationInterface::ACCESS),
            network_instance: None,
            redirect_information: None,
            outer_header_creation: Some(OuterHeaderCreation::gtpu_ipv4(teid, gnb)),
            transport_level_marking: None,
            forwarding_policy: None,
            header_enrichment: List::new(),
            pfcpsm_req_flags: None,
            destination_interface_type: None,
        }),
        ..Default::default()
    }
}

pub fn association_setup(node: NodeId, recovery: u32) -> AssociationSetupRequest {
    AssociationSetupRequest {
        node_id: node,
        recovery_time_stamp: RecoveryTimeStamp(recovery),
        ..Default::default()
    }
}

/// Encodes a message with the given SEID (for session messages) and sequence number.
pub fn encode(seid: Option<u64>, sequence: u32, m: impl Into<Message>) -> Vec<u8> {
    Pdu::new(seid, sequence, m).to_bytes()
}

/// For fuzzing: UP SEIDs are random, so inputs name the sessions they established by number.
/// A header SEID k in 1..=n (in any message of the datagram) becomes the k-th UP SEID handed
/// out (`seids`); the rest of the datagram is left as it is.
pub fn with_seids(dgram: &[u8], seids: &[u64]) -> Vec<u8> {
    let mut d = dgram.to_vec();
    let mut off = 0;
    while let Some(h) = d.get_mut(off..off + 12) {
        if h[0] & 1 != 0 {
            let k = u64::from_be_bytes([h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11]]);
            let i = usize::try_from(k).ok().and_then(|k| k.checked_sub(1));
            if let Some(&s) = i.and_then(|i| seids.get(i)) {
                h[4..12].copy_from_slice(&s.to_be_bytes());
            }
        }
        if h[0] & 2 == 0 {
            break;
        }
        off += 4 + usize::from(u16::from_be_bytes([h[2], h[3]]));
    }
    d
}
