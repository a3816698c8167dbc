//! The interop corpus: one representative message of every PFCP message type (plus a few header
//! variants), built with the codec's types and encoded to `testdata/pfcp/corpus/<name>.hex`.
//! Those files are what `interop/run.py` feeds to scapy and tshark and what
//! `tests/rs_pfcp_oracle.rs` feeds to rs-pfcp, so a change in encoding shows up here first.
//!
//! `UPDATE_CORPUS=1 cargo test -p upf-pfcp --test corpus` rewrites the files.

use compact_str::CompactString;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{decode_all, Cause, Header, Message, Multi, Pdu};

// Addresses from the documentation ranges: SMF (N4), UPF (N4 and N3), gNB (N3), UE, server.
const SMF: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const SMF_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
const UPF: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const UPF_N3: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const GNB: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 1);
/// The SMF's and the UPF's SEIDs of the session every session message belongs to.
const CP_SEID: u64 = 0x1000_0000_0000_0001;
const UP_SEID: u64 = 0x2000_0000_0000_0001;
/// Recovery Time Stamps (NTP seconds).
const SMF_STARTED: u32 = 3_913_056_000;
const UPF_STARTED: u32 = 3_913_057_000;

fn name(s: &str) -> CompactString {
    CompactString::from(s)
}
fn many<T, const N: usize>(v: Vec<T>) -> Multi<T, N> {
    v.into()
}
fn node(seq: u32) -> Header {
    Header {
        sequence: seq,
        ..Header::default()
    }
}
fn session(seid: u64, seq: u32) -> Header {
    Header {
        seid: Some(seid),
        sequence: seq,
        ..Header::default()
    }
}
fn pdu(header: Header, m: impl Into<Message>) -> Pdu {
    Pdu {
        header,
        message: m.into(),
    }
}

// ---- rule building blocks: mandatory fields as arguments, everything else absent ----

fn pdi(source_interface: SourceInterface) -> Pdi {
    Pdi {
        source_interface,
        local_f_teid: None,
        network_instance: None,
        ue_ip_addresses: Multi::new(),
        sdf_filters: Multi::new(),
        application_id: None,
        ethernet_pdu_session_information: None,
        qfis: Multi::new(),
        framed_routes: Multi::new(),
        framed_routing: None,
        framed_ipv6_routes: Multi::new(),
        source_interface_type: None,
    }
}
fn create_pdr(id: u16, precedence: u32, pdi: Pdi, far: u32) -> CreatePdr {
    CreatePdr {
        pdr_id: PdrId(id),
        precedence: Precedence(precedence),
        pdi,
        outer_header_removal: None,
        far_id: Some(FarId(far)),
        urr_ids: Multi::new(),
        qer_ids: Multi::new(),
        activate_predefined_rules: Multi::new(),
        activation_time: None,
        deactivation_time: None,
    }
}
fn update_pdr(id: u16) -> UpdatePdr {
    UpdatePdr {
        pdr_id: PdrId(id),
        outer_header_removal: None,
        precedence: None,
        pdi: None,
        far_id: None,
        urr_ids: Multi::new(),
        qer_ids: Multi::new(),
        activate_predefined_rules: Multi::new(),
        deactivate_predefined_rules: Multi::new(),
        activation_time: None,
        deactivation_time: None,
    }
}
fn forwarding(destination_interface: DestinationInterface) -> ForwardingParameters {
    ForwardingParameters {
        destination_interface,
        network_instance: None,
        redirect_information: None,
        outer_header_creation: None,
        transport_level_marking: None,
        forwarding_policy: None,
        header_enrichment: Multi::new(),
        proxying: None,
        destination_interface_type: None,
    }
}
fn create_far(id: u32, apply_action: ApplyAction, fp: Option<ForwardingParameters>) -> CreateFar {
    CreateFar {
        far_id: FarId(id),
        apply_action,
        forwarding_parameters: fp,
        duplicating_parameters: Multi::new(),
        bar_id: None,
    }
}
fn gate(uplink: Gate, downlink: Gate) -> GateStatus {
    GateStatus { uplink, downlink }
}
fn create_qer(id: u32, gate_status: GateStatus) -> CreateQer {
    CreateQer {
        qer_id: QerId(id),
        qer_correlation_id: None,
        gate_status,
        mbr: None,
        gbr: None,
        packet_rate: None,
        qfi: None,
        rqi: None,
        paging_policy_indicator: None,
        averaging_window: None,
    }
}
fn update_qer(id: u32) -> UpdateQer {
    UpdateQer {
        qer_id: QerId(id),
        qer_correlation_id: None,
        gate_status: None,
        mbr: None,
        gbr: None,
        packet_rate: None,
        qfi: None,
        rqi: None,
        paging_policy_indicator: None,
        averaging_window: None,
    }
}
fn create_urr(id: u32, mm: MeasurementMethod, rt: ReportingTriggers) -> CreateUrr {
    CreateUrr {
        urr_id: UrrId(id),
        measurement_method: mm,
        reporting_triggers: rt,
        measurement_period: None,
        volume_threshold: None,
        volume_quota: None,
        time_threshold: None,
        time_quota: None,
        quota_holding_time: None,
        dropped_dl_traffic_threshold: None,
        quota_validity_time: None,
        monitoring_time: None,
        subsequent_volume_threshold: None,
        subsequent_time_threshold: None,
        subsequent_volume_quota: None,
        subsequent_time_quota: None,
        inactivity_detection_time: None,
        linked_urr_ids: Multi::new(),
        measurement_information: None,
        far_id_for_quota_action: None,
        number_of_reports: None,
    }
}
fn update_urr(id: u32) -> UpdateUrr {
    UpdateUrr {
        urr_id: UrrId(id),
        measurement_method: None,
        reporting_triggers: None,
        measurement_period: None,
        volume_threshold: None,
        volume_quota: None,
        time_threshold: None,
        time_quota: None,
        quota_holding_time: None,
        dropped_dl_traffic_threshold: None,
        quota_validity_time: None,
        monitoring_time: None,
        subsequent_volume_threshold: None,
        subsequent_time_threshold: None,
        subsequent_volume_quota: None,
        subsequent_time_quota: None,
        inactivity_detection_time: None,
        linked_urr_ids: Multi::new(),
        measurement_information: None,
        far_id_for_quota_action: None,
        number_of_reports: None,
    }
}
fn usage_report(id: u32, seqn: u32, trigger: UsageReportTrigger) -> UsageReport {
    UsageReport {
        urr_id: UrrId(id),
        ur_seqn: UrSeqn(seqn),
        usage_report_trigger: trigger,
        start_time: Some(StartTime(UPF_STARTED + 100)),
        end_time: Some(EndTime(UPF_STARTED + 700)),
        volume_measurement: Some(VolumeMeasurement {
            total_volume: Some(1_500_000),
            uplink_volume: Some(500_000),
            downlink_volume: Some(1_000_000),
            total_packets: Some(1_500),
            uplink_packets: Some(600),
            downlink_packets: Some(900),
        }),
        duration_measurement: Some(DurationMeasurement(600)),
        time_of_first_packet: Some(TimeOfFirstPacket(UPF_STARTED + 101)),
        time_of_last_packet: Some(TimeOfLastPacket(UPF_STARTED + 699)),
        usage_information: None,
        query_urr_reference: None,
        ue_ip_address: None,
        network_instance: None,
    }
}
fn sdf(flow: &str) -> SdfFilter {
    SdfFilter {
        flow_description: Some(flow.into()),
        ..SdfFilter::default()
    }
}
fn ue_ip(is_destination: bool) -> UeIpAddress {
    UeIpAddress {
        ipv4: Some(UE),
        is_destination,
        ..UeIpAddress::default()
    }
}
fn assigned(teid: u32, ipv4: Ipv4Addr) -> FTeid {
    FTeid::Assigned {
        teid,
        ipv4: Some(ipv4),
        ipv6: None,
    }
}
fn ni(s: &str) -> Option<NetworkInstance> {
    Some(NetworkInstance(name(s)))
}
fn volume(total: u64, uplink: u64, downlink: u64) -> Volume {
    Volume {
        total: Some(total),
        uplink: Some(uplink),
        downlink: Some(downlink),
    }
}

// ---- node messages (§7.4) ----

fn heartbeat_request() -> Pdu {
    let m = HeartbeatRequest {
        recovery_time_stamp: RecoveryTimeStamp(SMF_STARTED),
        source_ip_address: Some(SourceIpAddress {
            ipv4: Some(SMF),
            mask_prefix_length: Some(24),
            ..SourceIpAddress::default()
        }),
    };
    pdu(node(0x00_0001), m)
}

fn heartbeat_response() -> Pdu {
    let m = HeartbeatResponse {
        recovery_time_stamp: RecoveryTimeStamp(UPF_STARTED),
    };
    pdu(node(0x00_0001), m)
}

fn pfd_management_request() -> Pdu {
    let contents = PfdContents {
        flow_description: Some("permit out 6 from 203.0.113.0/24 443 to any".into()),
        url: Some("https://video.example.com/".into()),
        domain_name: Some("video.example.com".into()),
        ..PfdContents::default()
    };
    let m = PfdManagementRequest {
        application_ids_pfds: many(vec![ApplicationIdsPfds {
            application_id: ApplicationId("app-video".into()),
            pfd_contexts: many(vec![PfdContext {
                pfd_contents: many(vec![contents]),
            }]),
        }]),
        node_id: Some(NodeId::Ipv4(SMF)),
    };
    pdu(node(0x00_0002), m)
}

fn pfd_management_response() -> Pdu {
    let m = PfdManagementResponse {
        cause: Cause::REQUEST_ACCEPTED,
        offending_ie: None,
        node_id: Some(NodeId::Ipv4(UPF)),
    };
    pdu(node(0x00_0002), m)
}

fn association_setup_request() -> Pdu {
    let m = AssociationSetupRequest {
        node_id: NodeId::Fqdn(name("smf1.smf.5gc.mnc001.mcc001.3gppnetwork.org")),
        recovery_time_stamp: RecoveryTimeStamp(SMF_STARTED),
        up_function_features: None,
        cp_function_features: Some(CpFunctionFeatures::LOAD.union(CpFunctionFeatures::OVRL)),
        user_plane_ip_resource_information: Multi::new(),
        alternative_smf_ip_addresses: many(vec![AlternativeSmfIpAddress {
            ipv4: Some(Ipv4Addr::new(192, 0, 2, 11)),
            ..AlternativeSmfIpAddress::default()
        }]),
        smf_set_id: Some(SmfSetId(name(
            "set1.smfset.5gc.mnc001.mcc001.3gppnetwork.org",
        ))),
        pfcp_session_retention_information: None,
        ue_ip_address_pool_information: Multi::new(),
        pfcpasreq_flags: None,
    };
    pdu(node(0x00_0003), m)
}

fn up_features() -> UpFunctionFeatures {
    [
        UpFunctionFeatures::BUCP,
        UpFunctionFeatures::DDND,
        UpFunctionFeatures::DLBD,
        UpFunctionFeatures::FTUP,
        UpFunctionFeatures::EMPU,
        UpFunctionFeatures::PDIU,
        UpFunctionFeatures::QUOAC,
        // Octet 7 (Rel-16): the UPF allocates UE IP addresses.
        UpFunctionFeatures::UEIP,
    ]
    .into_iter()
    .fold(UpFunctionFeatures::default(), UpFunctionFeatures::union)
}

fn association_setup_response() -> Pdu {
    let m = AssociationSetupResponse {
        node_id: NodeId::Ipv4(UPF),
        cause: Cause::REQUEST_ACCEPTED,
        recovery_time_stamp: RecoveryTimeStamp(UPF_STARTED),
        up_function_features: Some(up_features()),
        cp_function_features: None,
        user_plane_ip_resource_information: many(vec![UserPlaneIpResourceInformation {
            teid_range_indication: 2,
            teid_range: Some(1),
            ipv4: Some(UPF_N3),
            ipv6: None,
            network_instance: ni("access"),
            source_interface: Some(SourceInterface::ACCESS),
        }]),
        alternative_smf_ip_addresses: Multi::new(),
        smf_set_id: None,
        pfcpasrsp_flags: None,
        ue_ip_address_pool_information: Multi::new(),
    };
    pdu(node(0x00_0003), m)
}

fn association_update_request() -> Pdu {
    let m = AssociationUpdateRequest {
        node_id: NodeId::Ipv4(UPF),
        up_function_features: Some(up_features()),
        cp_function_features: None,
        pfcp_association_release_request: Some(AssociationReleaseFlags {
            sarr: true,
            urss: true,
        }),
        graceful_release_period: Some(GracefulReleasePeriod {
            unit: GracefulReleasePeriod::UNIT_1_MINUTE,
            value: 5,
        }),
        user_plane_ip_resource_information: Multi::new(),
        pfcpaureq_flags: Some(PfcpAuReqFlags::PARPS),
        alternative_smf_ip_addresses: Multi::new(),
        smf_set_id: None,
        ue_ip_address_pool_information: Multi::new(),
    };
    pdu(node(0x00_0004), m)
}

fn association_update_response() -> Pdu {
    let m = AssociationUpdateResponse {
        node_id: NodeId::Ipv4(SMF),
        cause: Cause::REQUEST_ACCEPTED,
        up_function_features: None,
        cp_function_features: Some(CpFunctionFeatures::LOAD),
        ue_ip_address_pool_information: Multi::new(),
    };
    pdu(node(0x00_0004), m)
}

fn association_release_request() -> Pdu {
    let m = AssociationReleaseRequest {
        node_id: NodeId::Ipv6(SMF_V6),
    };
    pdu(node(0x00_0005), m)
}

fn association_release_response() -> Pdu {
    let m = AssociationReleaseResponse {
        node_id: NodeId::Ipv4(UPF),
        cause: Cause::REQUEST_ACCEPTED,
    };
    pdu(node(0x00_0005), m)
}

fn version_not_supported_response() -> Pdu {
    pdu(node(0x00_0006), VersionNotSupportedResponse {})
}

fn node_report_request() -> Pdu {
    let peers = vec![
        RemoteGtpuPeer {
            ipv4: Some(GNB),
            destination_interface: Some(DestinationInterface::ACCESS),
            network_instance: ni("access"),
            ..RemoteGtpuPeer::default()
        },
        RemoteGtpuPeer {
            ipv4: Some(Ipv4Addr::new(192, 0, 2, 101)),
            ..RemoteGtpuPeer::default()
        },
    ];
    let m = NodeReportRequest {
        node_id: NodeId::Ipv4(UPF),
        node_report_type: NodeReportType::UPFR,
        user_plane_path_failure_report: Some(UserPlanePathFailureReport {
            remote_gtpu_peers: many(peers),
        }),
        user_plane_path_recovery_report: None,
    };
    pdu(node(0x00_0007), m)
}

fn node_report_response() -> Pdu {
    let m = NodeReportResponse {
        node_id: NodeId::Ipv4(SMF),
        cause: Cause::REQUEST_ACCEPTED,
        offending_ie: None,
    };
    pdu(node(0x00_0007), m)
}

fn session_set_deletion_request() -> Pdu {
    let m = SessionSetDeletionRequest {
        node_id: NodeId::Ipv4(SMF),
        fq_csids: many(vec![FqCsid {
            node_address: FqCsidNodeAddress::Ipv4(SMF),
            csids: many(vec![1, 2]),
        }]),
    };
    pdu(node(0x00_0008), m)
}

fn session_set_deletion_response() -> Pdu {
    let m = SessionSetDeletionResponse {
        node_id: NodeId::Ipv4(UPF),
        cause: Cause::REQUEST_ACCEPTED,
        offending_ie: None,
    };
    pdu(node(0x00_0008), m)
}

// ---- session messages (§7.5) ----

/// As an SMF sends it for a new PDU session: default flow UL/DL plus one SDF-specific flow each
/// way, UL F-TEIDs chosen by the UPF (one TEID for both UL PDRs: same CHOOSE ID), DL buffered
/// until the gNB's F-TEID is known, session AMBR + flow QER, two URRs.
fn session_establishment_request() -> Pdu {
    let ul_fteid = Some(FTeid::Choose {
        ipv4: true,
        ipv6: false,
        choose_id: Some(1),
    });
    let ul_default = CreatePdr {
        outer_header_removal: Some(OuterHeaderRemoval {
            outer_header_removal_description: OuterHeaderRemoval::GTPU_UDP_IPV4,
            gtpu_extension_header_deletion: Some(OuterHeaderRemoval::PDU_SESSION_CONTAINER),
        }),
        urr_ids: many(vec![UrrId(1)]),
        qer_ids: many(vec![QerId(1), QerId(2)]),
        ..create_pdr(
            1,
            255,
            Pdi {
                local_f_teid: ul_fteid,
                network_instance: ni("access"),
                qfis: many(vec![Qfi(9)]),
                source_interface_type: Some(InterfaceType3gpp::N3_3GPP_ACCESS),
                ..pdi(SourceInterface::ACCESS)
            },
            1,
        )
    };
    let dl_default = CreatePdr {
        urr_ids: many(vec![UrrId(1)]),
        qer_ids: many(vec![QerId(1), QerId(2)]),
        ..create_pdr(
            2,
            255,
            Pdi {
                network_instance: ni("internet"),
                ue_ip_addresses: many(vec![ue_ip(true)]),
                sdf_filters: many(vec![sdf("permit out ip from any to assigned")]),
                ..pdi(SourceInterface::CORE)
            },
            2,
        )
    };
    let ul_sip = CreatePdr {
        // The one-octet form (no GTP-U extension header deletion).
        outer_header_removal: Some(OuterHeaderRemoval {
            outer_header_removal_description: OuterHeaderRemoval::GTPU_UDP_IPV4,
            gtpu_extension_header_deletion: None,
        }),
        urr_ids: many(vec![UrrId(2)]),
        qer_ids: many(vec![QerId(1)]),
        ..create_pdr(
            3,
            100,
            Pdi {
                local_f_teid: ul_fteid,
                network_instance: ni("access"),
                ue_ip_addresses: many(vec![ue_ip(false)]),
                sdf_filters: many(vec![SdfFilter {
                    tos_traffic_class: Some(0xb8fc),
                    sdf_filter_id: Some(7),
                    ..sdf("permit out 17 from 203.0.113.5 5060 to assigned")
                }]),
                qfis: many(vec![Qfi(5)]),
                ..pdi(SourceInterface::ACCESS)
            },
            3,
        )
    };
    let dl_sip = CreatePdr {
        urr_ids: many(vec![UrrId(2)]),
        qer_ids: many(vec![QerId(1)]),
        ..create_pdr(
            4,
            100,
            Pdi {
                network_instance: ni("internet"),
                ue_ip_addresses: many(vec![ue_ip(true)]),
                sdf_filters: many(vec![sdf("permit out 17 from 203.0.113.5 5060 to assigned")]),
                ..pdi(SourceInterface::CORE)
            },
            4,
        )
    };
    let fars = vec![
        create_far(
            1,
            ApplyAction::FORW,
            Some(ForwardingParameters {
                network_instance: ni("internet"),
                ..forwarding(DestinationInterface::CORE)
            }),
        ),
        CreateFar {
            bar_id: Some(BarId(1)),
            ..create_far(2, ApplyAction::BUFF | ApplyAction::NOCP, None)
        },
        create_far(
            3,
            ApplyAction::FORW,
            Some(ForwardingParameters {
                network_instance: ni("internet"),
                transport_level_marking: Some(TransportLevelMarking {
                    tos_traffic_class: 0xb8,
                    mask: 0xfc,
                }),
                ..forwarding(DestinationInterface::CORE)
            }),
        ),
        create_far(
            4,
            ApplyAction::FORW,
            Some(ForwardingParameters {
                network_instance: ni("access"),
                outer_header_creation: Some(OuterHeaderCreation::gtpu_ipv4(0x0000_1234, GNB)),
                destination_interface_type: Some(InterfaceType3gpp::N3_3GPP_ACCESS),
                ..forwarding(DestinationInterface::ACCESS)
            }),
        ),
    ];
    let qers = vec![
        // Session AMBR.
        CreateQer {
            mbr: Some(Mbr {
                uplink_kbps: 100_000,
                downlink_kbps: 200_000,
            }),
            ..create_qer(1, gate(Gate::Open, Gate::Open))
        },
        // The QoS flow.
        CreateQer {
            qer_correlation_id: Some(QerCorrelationId(0x11)),
            mbr: Some(Mbr {
                uplink_kbps: 10_000,
                downlink_kbps: 20_000,
            }),
            gbr: Some(Gbr {
                uplink_kbps: 5_000,
                downlink_kbps: 10_000,
            }),
            qfi: Some(Qfi(9)),
            ..create_qer(2, gate(Gate::Open, Gate::Open))
        },
    ];
    let urrs = vec![
        CreateUrr {
            volume_threshold: Some(volume(1_000_000_000, 400_000_000, 600_000_000)),
            time_threshold: Some(TimeThreshold(3600)),
            ..create_urr(
                1,
                MeasurementMethod::VOLUM | MeasurementMethod::DURAT,
                ReportingTriggers::VOLTH | ReportingTriggers::TIMTH,
            )
        },
        CreateUrr {
            measurement_period: Some(MeasurementPeriod(600)),
            volume_threshold: Some(Volume {
                total: Some(500_000_000),
                ..Volume::default()
            }),
            time_threshold: Some(TimeThreshold(1800)),
            measurement_information: Some(MeasurementInformation::MBQE),
            ..create_urr(
                2,
                MeasurementMethod::VOLUM | MeasurementMethod::DURAT,
                ReportingTriggers::PERIO | ReportingTriggers::VOLTH | ReportingTriggers::TIMTH,
            )
        },
    ];
    let m = SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(SMF),
        cp_f_seid: FSeid {
            seid: CP_SEID,
            ipv4: Some(SMF),
            ipv6: None,
        },
        create_pdrs: many(vec![ul_default, dl_default, ul_sip, dl_sip]),
        create_fars: many(fars),
        create_urrs: many(urrs),
        create_qers: many(qers),
        create_bar: Some(CreateBar {
            bar_id: BarId(1),
            downlink_data_notification_delay: Some(DownlinkDataNotificationDelay(2)),
            suggested_buffering_packets_count: Some(SuggestedBufferingPacketsCount(10)),
        }),
        pdn_type: Some(PdnType::IPV4),
        fq_csids: Multi::new(),
        user_plane_inactivity_timer: Some(UserPlaneInactivityTimer(300)),
        user_id: Some(UserId {
            imsi: Some("001010123456789".into()),
            imei: Some("3520990017614823".into()),
            msisdn: Some("15551234567".into()),
            ..UserId::default()
        }),
        apn_dnn: Some(ApnDnn(name("internet"))),
        pfcpsereq_flags: None,
        s_nssai: Some(SNssai {
            sst: 1,
            sd: 0x01_0203,
        }),
        recovery_time_stamp: None,
    };
    // The UP SEID is not known yet: the header carries SEID 0 (TS 29.244 §7.2.2.4.2).
    pdu(session(0, 0x00_0101), m)
}

fn session_establishment_response() -> Pdu {
    let created = |id| CreatedPdr {
        pdr_id: PdrId(id),
        local_f_teid: Some(assigned(0x0000_a001, UPF_N3)),
        ue_ip_addresses: Multi::new(),
    };
    let m = SessionEstablishmentResponse {
        node_id: NodeId::Ipv4(UPF),
        cause: Cause::REQUEST_ACCEPTED,
        offending_ie: None,
        up_f_seid: Some(FSeid {
            seid: UP_SEID,
            ipv4: Some(UPF),
            ipv6: None,
        }),
        created_pdrs: many(vec![created(1), created(3)]),
        load_control_information: Some(LoadControlInformation {
            sequence_number: SequenceNumber(1),
            metric: Metric(20),
        }),
        overload_control_information: None,
        fq_csids: Multi::new(),
        failed_rule_id: None,
    };
    pdu(session(CP_SEID, 0x00_0101), m)
}

/// A rejection naming the rule that failed.
fn session_establishment_response_rejected() -> Pdu {
    let m = SessionEstablishmentResponse {
        node_id: NodeId::Ipv4(UPF),
        cause: Cause::RULE_CREATION_MODIFICATION_FAILURE,
        offending_ie: Some(OffendingIe(1)),
        up_f_seid: None,
        created_pdrs: Multi::new(),
        load_control_information: None,
        overload_control_information: Some(OverloadControlInformation {
            sequence_number: SequenceNumber(2),
            metric: Metric(50),
            timer: Timer {
                unit: Timer::UNIT_1_MINUTE,
                value: 2,
            },
            oci_flags: Some(OciFlags { aoci: true }),
        }),
        fq_csids: Multi::new(),
        failed_rule_id: Some(FailedRuleId::Pdr(PdrId(3))),
    };
    pdu(session(CP_SEID, 0x00_0111), m)
}

/// Create, update and remove of every rule kind, a URR query and the DROBU/SNDEM flags. The new
/// PDR 5 carries SDF filters without a flow description (ToS only, SPI only, flow label only).
fn session_modification_request() -> Pdu {
    let dl_ipsec = CreatePdr {
        qer_ids: many(vec![QerId(3)]),
        urr_ids: many(vec![UrrId(3)]),
        ..create_pdr(
            5,
            50,
            Pdi {
                network_instance: ni("internet"),
                ue_ip_addresses: many(vec![ue_ip(true)]),
                sdf_filters: many(vec![
                    SdfFilter {
                        tos_traffic_class: Some(0x2eff),
                        ..SdfFilter::default()
                    },
                    SdfFilter {
                        security_parameter_index: Some(0x0000_1001),
                        ..SdfFilter::default()
                    },
                    SdfFilter {
                        flow_label: Some(0x0_abcde),
                        ..SdfFilter::default()
                    },
                ]),
                ..pdi(SourceInterface::CORE)
            },
            5,
        )
    };
    let to_gnb = |teid| ForwardingParameters {
        network_instance: ni("access"),
        outer_header_creation: Some(OuterHeaderCreation::gtpu_ipv4(teid, GNB)),
        ..forwarding(DestinationInterface::ACCESS)
    };
    let m = SessionModificationRequest {
        cp_f_seid: None,
        remove_pdrs: many(vec![RemovePdr { pdr_id: PdrId(4) }]),
        remove_fars: many(vec![RemoveFar { far_id: FarId(4) }]),
        remove_urrs: many(vec![RemoveUrr { urr_id: UrrId(2) }]),
        remove_qers: many(vec![RemoveQer { qer_id: QerId(2) }]),
        remove_bar: Some(RemoveBar { bar_id: BarId(3) }),
        create_pdrs: many(vec![dl_ipsec]),
        create_fars: many(vec![create_far(
            5,
            ApplyAction::FORW,
            Some(to_gnb(0x0000_1235)),
        )]),
        create_urrs: many(vec![CreateUrr {
            volume_quota: Some(volume(2_000_000, 1_000_000, 1_000_000)),
            far_id_for_quota_action: Some(FarId(6)),
            ..create_urr(3, MeasurementMethod::VOLUM, ReportingTriggers::VOLQU)
        }]),
        create_qers: many(vec![CreateQer {
            mbr: Some(Mbr {
                uplink_kbps: 1_000,
                downlink_kbps: 2_000,
            }),
            qfi: Some(Qfi(6)),
            ..create_qer(3, gate(Gate::Closed, Gate::Open))
        }]),
        create_bar: Some(CreateBar {
            bar_id: BarId(2),
            downlink_data_notification_delay: None,
            suggested_buffering_packets_count: Some(SuggestedBufferingPacketsCount(20)),
        }),
        update_pdrs: many(vec![UpdatePdr {
            outer_header_removal: Some(OuterHeaderRemoval {
                outer_header_removal_description: OuterHeaderRemoval::GTPU_UDP_IP,
                gtpu_extension_header_deletion: Some(OuterHeaderRemoval::PDU_SESSION_CONTAINER),
            }),
            precedence: Some(Precedence(150)),
            qer_ids: many(vec![QerId(1), QerId(3)]),
            ..update_pdr(1)
        }]),
        update_fars: many(vec![UpdateFar {
            far_id: FarId(2),
            apply_action: Some(ApplyAction::FORW),
            update_forwarding_parameters: Some(UpdateForwardingParameters {
                destination_interface: Some(DestinationInterface::ACCESS),
                network_instance: ni("access"),
                redirect_information: None,
                outer_header_creation: Some(OuterHeaderCreation::gtpu_ipv4(0x0000_1234, GNB)),
                transport_level_marking: None,
                forwarding_policy: None,
                header_enrichment: Multi::new(),
                pfcpsm_req_flags: Some(PfcpSmReqFlags::SNDEM),
                destination_interface_type: None,
            }),
            update_duplicating_parameters: Multi::new(),
            bar_id: None,
            forwarding_parameters: None,
        }]),
        update_urrs: many(vec![UpdateUrr {
            volume_threshold: Some(volume(2_000_000_000, 800_000_000, 1_200_000_000)),
            time_threshold: Some(TimeThreshold(7200)),
            ..update_urr(1)
        }]),
        update_qers: many(vec![UpdateQer {
            gate_status: Some(gate(Gate::Open, Gate::Open)),
            mbr: Some(Mbr {
                uplink_kbps: 150_000,
                downlink_kbps: 300_000,
            }),
            ..update_qer(1)
        }]),
        update_bar: Some(UpdateBarSessionModification {
            bar_id: BarId(1),
            downlink_data_notification_delay: Some(DownlinkDataNotificationDelay(4)),
            suggested_buffering_packets_count: None,
        }),
        pfcpsmreq_flags: Some(PfcpSmReqFlags::DROBU | PfcpSmReqFlags::SNDEM),
        query_urrs: many(vec![QueryUrr { urr_id: UrrId(1) }]),
        fq_csids: Multi::new(),
        user_plane_inactivity_timer: None,
        query_urr_reference: Some(QueryUrrReference(77)),
    };
    pdu(session(UP_SEID, 0x00_0102), m)
}

fn session_modification_response() -> Pdu {
    let m = SessionModificationResponse {
        cause: Cause::REQUEST_ACCEPTED,
        offending_ie: None,
        created_pdrs: Multi::new(),
        load_control_information: None,
        overload_control_information: None,
        usage_reports: many(vec![UsageReport {
            query_urr_reference: Some(QueryUrrReference(77)),
            ..usage_report(1, 3, UsageReportTrigger::IMMER)
        }]),
        failed_rule_id: None,
        updated_pdrs: many(vec![UpdatedPdr {
            pdr_id: PdrId(1),
            local_f_teid: Some(assigned(0x0000_a002, UPF_N3)),
            ue_ip_addresses: Multi::new(),
        }]),
    };
    pdu(session(CP_SEID, 0x00_0102), m)
}

fn session_deletion_request() -> Pdu {
    pdu(session(UP_SEID, 0x00_0103), SessionDeletionRequest {})
}

fn session_deletion_response() -> Pdu {
    let m = SessionDeletionResponse {
        cause: Cause::REQUEST_ACCEPTED,
        offending_ie: None,
        load_control_information: None,
        overload_control_information: None,
        usage_reports: many(vec![
            usage_report(1, 4, UsageReportTrigger::TERMR),
            UsageReport {
                volume_measurement: Some(VolumeMeasurement {
                    total_volume: Some(0),
                    ..VolumeMeasurement::default()
                }),
                usage_information: Some(UsageInformation::AFT),
                ..usage_report(3, 1, UsageReportTrigger::TERMR)
            },
        ]),
    };
    pdu(session(CP_SEID, 0x00_0103), m)
}

/// Sent by the UPF: downlink data arrived for a buffering FAR, and two usage reports.
fn session_report_request() -> Pdu {
    let m = SessionReportRequest {
        report_type: ReportType::DLDR.union(ReportType::USAR),
        downlink_data_report: Some(DownlinkDataReport {
            pdr_ids: many(vec![PdrId(2)]),
            downlink_data_service_information: many(vec![DownlinkDataServiceInformation {
                paging_policy_indication: None,
                qfi: Some(9),
            }]),
        }),
        usage_reports: many(vec![
            usage_report(1, 1, UsageReportTrigger::VOLTH),
            UsageReport {
                ue_ip_address: Some(ue_ip(false)),
                ..usage_report(2, 1, UsageReportTrigger::PERIO)
            },
        ]),
        error_indication_report: None,
        load_control_information: None,
        overload_control_information: None,
        pfcpsrreq_flags: None,
        old_cp_f_seid: None,
    };
    pdu(session(CP_SEID, 0x00_0201), m)
}

/// Header variant: message priority (MP = 1) on an Error Indication report.
fn session_report_request_priority() -> Pdu {
    let m = SessionReportRequest {
        report_type: ReportType::ERIR,
        downlink_data_report: None,
        usage_reports: Multi::new(),
        error_indication_report: Some(ErrorIndicationReport {
            remote_f_teids: many(vec![assigned(0x0000_1234, GNB)]),
        }),
        load_control_information: None,
        overload_control_information: None,
        pfcpsrreq_flags: None,
        old_cp_f_seid: None,
    };
    let header = Header {
        priority: Some(3),
        ..session(CP_SEID, 0x00_0202)
    };
    pdu(header, m)
}

fn session_report_response() -> Pdu {
    let m = SessionReportResponse {
        cause: Cause::REQUEST_ACCEPTED,
        offending_ie: None,
        update_bar: Some(UpdateBarSessionReportResponse {
            bar_id: BarId(1),
            downlink_data_notification_delay: Some(DownlinkDataNotificationDelay(1)),
            dl_buffering_duration: Some(DlBufferingDuration {
                unit: DlBufferingDuration::UNIT_2_SECONDS,
                value: 10,
            }),
            dl_buffering_suggested_packet_count: Some(DlBufferingSuggestedPacketCount(20)),
            suggested_buffering_packets_count: Some(SuggestedBufferingPacketsCount(10)),
        }),
        pfcpsrrsp_flags: Some(PfcpSrRspFlags::DROBU),
        cp_f_seid: None,
        alternative_smf_ip_address: None,
    };
    pdu(session(UP_SEID, 0x00_0201), m)
}

/// Header variant: two messages in one datagram (FO = 1 on the first), a session message
/// followed by a node message.
fn follow_on_pair() -> Vec<Pdu> {
    let mut first = session_report_request();
    first.header.follow_on = true;
    first.header.sequence = 0x00_0203;
    let mut second = heartbeat_request();
    second.header.sequence = 0x00_0204;
    vec![first, second]
}

/// Every corpus entry: file name and the messages of its datagram.
fn corpus() -> Vec<(&'static str, Vec<Pdu>)> {
    let one = |name, p: Pdu| (name, vec![p]);
    vec![
        one("heartbeat_request", heartbeat_request()),
        one("heartbeat_response", heartbeat_response()),
        one("pfd_management_request", pfd_management_request()),
        one("pfd_management_response", pfd_management_response()),
        one("association_setup_request", association_setup_request()),
        one("association_setup_response", association_setup_response()),
        one("association_update_request", association_update_request()),
        one("association_update_response", association_update_response()),
        one("association_release_request", association_release_request()),
        one(
            "association_release_response",
            association_release_response(),
        ),
        one(
            "version_not_supported_response",
            version_not_supported_response(),
        ),
        one("node_report_request", node_report_request()),
        one("node_report_response", node_report_response()),
        one(
            "session_set_deletion_request",
            session_set_deletion_request(),
        ),
        one(
            "session_set_deletion_response",
            session_set_deletion_response(),
        ),
        one(
            "session_establishment_request",
            session_establishment_request(),
        ),
        one(
            "session_establishment_response",
            session_establishment_response(),
        ),
        one(
            "session_establishment_response_rejected",
            session_establishment_response_rejected(),
        ),
        one(
            "session_modification_request",
            session_modification_request(),
        ),
        one(
            "session_modification_response",
            session_modification_response(),
        ),
        one("session_deletion_request", session_deletion_request()),
        one("session_deletion_response", session_deletion_response()),
        one("session_report_request", session_report_request()),
        one(
            "session_report_request_priority",
            session_report_request_priority(),
        ),
        one("session_report_response", session_report_response()),
        ("follow_on_pair", follow_on_pair()),
    ]
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/pfcp/corpus")
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn encode_all(pdus: &[Pdu]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pdus {
        p.encode(&mut out);
    }
    out
}

#[test]
fn corpus_covers_every_message_type() {
    let mut types: Vec<u8> = corpus()
        .iter()
        .flat_map(|(_, pdus)| pdus.iter().map(|p| p.message.message_type()))
        .collect();
    types.sort_unstable();
    types.dedup();
    let all: Vec<u8> = (1..=15).chain(50..=57).collect();
    assert_eq!(types, all);
}

#[test]
fn corpus_files_match_encoding() {
    let dir = corpus_dir();
    let update = std::env::var_os("UPDATE_CORPUS").is_some_and(|v| v == "1");
    if update {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let mut failures = Vec::new();
    for (name, pdus) in corpus() {
        let hex = to_hex(&encode_all(&pdus));
        let path = dir.join(format!("{name}.hex"));
        if update {
            std::fs::write(&path, format!("{hex}\n")).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(s) if s.trim() == hex => {}
            Ok(s) => failures.push(format!("{name}: file {} != encoded {hex}", s.trim())),
            Err(e) => failures.push(format!("{name}: {}: {e}", path.display())),
        }
    }
    // A file the corpus no longer produces would still be fed to scapy and tshark.
    let names: Vec<String> = corpus().iter().map(|(n, _)| format!("{n}.hex")).collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        if file.ends_with(".hex") && !names.contains(&file) {
            failures.push(format!("{file}: not produced by the corpus (remove it)"));
        }
    }
    assert!(
        failures.is_empty(),
        "corpus out of date (UPDATE_CORPUS=1 rewrites it):\n{}",
        failures.join("\n")
    );
}

#[test]
fn corpus_roundtrips() {
    for (name, pdus) in corpus() {
        let bytes = encode_all(&pdus);
        let decoded: Vec<Pdu> = decode_all(&bytes)
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(decoded, pdus, "{name}");
        // Canonical: encoding what was decoded gives the same octets.
        assert_eq!(encode_all(&decoded), bytes, "{name}");
    }
}

#[test]
fn follow_on_datagram_yields_both_messages() {
    let bytes = encode_all(&follow_on_pair());
    let (first, rest) = Pdu::decode(&bytes).unwrap();
    assert!(first.header.follow_on);
    assert_eq!(first.message.message_type(), 56);
    assert!(!rest.is_empty());
    let all: Vec<Pdu> = decode_all(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].header.seid, Some(CP_SEID));
    assert_eq!(all[1].message.message_type(), 1);
    assert_eq!(all[1].header.seid, None);
    assert!(!all[1].header.follow_on);
}

#[test]
fn message_priority_is_on_the_wire() {
    let bytes = session_report_request_priority().to_bytes();
    assert_eq!(bytes[0], 0x23, "version 1, MP = 1, S = 1");
    assert_eq!(
        bytes[15],
        3 << 4,
        "priority in the upper nibble of octet 16"
    );
}
