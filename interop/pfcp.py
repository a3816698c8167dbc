"""PFCP (TS 29.244) cross-checks of `upf decode` and the upf-pfcp encoder against scapy 2.8
(scapy.contrib.pfcp) and tshark 4.0.

a. scapy_to_ours: messages built with scapy (every message type, the key IEs and the lenient
   variants peers send) in one capture, decoded once by `upf decode`; per message, JSON paths
   must hold the values set in scapy.
b. ours_to_scapy: every testdata/pfcp/corpus/*.hex (written by crates/upf-pfcp/tests/corpus.rs)
   parsed by scapy: nothing left unparsed where scapy knows the IE, same octets when rebuilt,
   same header and key IE values as `upf decode` gives.
c. ours_to_tshark: the corpus in one capture: tshark flags nothing (malformed, warning or
   error), and its message types, sequence numbers, SEIDs and key IE values match ours.
d. malformed: broken datagrams give an `error` with the right Cause and exit status 2.

Where scapy or tshark disagree with the specification, the allow-lists below say so, narrowly.
"""

import glob
import os
from types import SimpleNamespace

from common import expect, expect_eq, get_path, tshark, tshark_fields, write_udp_pcap
from scapy.contrib.pfcp import *  # noqa: F403 - the PFCP message and IE classes
from scapy.packet import NoPayload, Padding, Raw

PORT = 8805
SMF, UPF, UPF_N3, GNB, UE = "192.0.2.10", "198.51.100.1", "198.51.100.10", "192.0.2.100", "10.60.0.1"
SMF_V6 = "2001:db8::10"
SMF_FQDN = "smf1.smf.5gc.mnc001.mcc001.3gppnetwork.org"
CP_SEID, UP_SEID = 0x1000000000000001, 0x2000000000000001
T_SMF, T_UPF = 3913056000, 3913057000  # Recovery Time Stamps, NTP seconds
ALL_TYPES = list(range(1, 16)) + list(range(50, 58))  # TS 29.244 Table 7.3-1


# ---------------------------------------------------------------- scapy message building


def node(seq):
    # scapy's header defaults to S=1 even for node messages.
    return PFCP(S=0, seq=seq)


def sess(seid, seq, **kw):
    return PFCP(S=1, seid=seid, seq=seq, **kw)


def tbcd(digits):
    """TBCD digits (TS 29.274 §8.3) as scapy's User ID wants them: it has no TBCD field."""
    d = [int(c) for c in digits] + ([0xF] if len(digits) % 2 else [])
    return bytes(d[i] | d[i + 1] << 4 for i in range(0, len(d), 2))


def node_id_v4(addr):
    return IE_NodeId(id_type=0, ipv4=addr)


def fseid(seid, addr):
    return IE_FSEID(v4=1, seid=seid, ipv4=addr)


def pdr(pdr_id, precedence, pdi_ies, *rest):
    ids = [IE_PDR_Id(id=pdr_id), IE_Precedence(precedence=precedence)]
    return IE_CreatePDR(IE_list=ids + [IE_PDI(IE_list=pdi_ies)] + list(rest))


def ohr(description, octet6=None):
    """Outer Header Removal; scapy writes octet 6 only when told the length."""
    if octet6 is None:
        return IE_OuterHeaderRemoval(header=description)
    return IE_OuterHeaderRemoval(header=description, length=2, spare=0, pdu_session_container=octet6)


def pdr_with_ohr(pdr_id, ohr_ie):
    pdi = [IE_SourceInterface(interface=0), IE_FTEID(V4=1, TEID=0x100 + pdr_id, ipv4=UPF_N3)]
    return pdr(pdr_id, 100, pdi, ohr_ie, IE_FAR_Id(id=1))


def minimal_establishment(pdi_ies=(), *extra):
    """Node ID, CP F-SEID, one PDR (source Core + `pdi_ies`) and its FAR, then `extra` IEs."""
    p = pdr(1, 255, [IE_SourceInterface(interface=1), *pdi_ies], IE_FAR_Id(id=1))
    far = IE_CreateFAR(IE_list=[IE_FAR_Id(id=1), IE_ApplyAction(DROP=1)])
    return [node_id_v4(SMF), fseid(CP_SEID, SMF), p, far, *extra]


def usage_report(cls, urr, seqn, trigger_ie, *rest):
    return cls(IE_list=[IE_URR_Id(id=urr), IE_UR_SEQN(number=seqn), trigger_ie, *rest])


class Case:
    """Datagram of scapy messages; `want` is (message type, {JSON path: value}) per message,
    paths relative to the message body (`ies.<MessageName>`)."""

    def __init__(self, name, pkts, want):
        self.name, self.pkts, self.want = name, pkts, want

    def datagram(self):
        return b"".join(bytes(p) for p in self.pkts)


def one(name, mtype, pkt, fields):
    return Case(name, [pkt], [(mtype, fields)])


def node_cases():
    ip_res = IE_UserPlaneIPResourceInformation(
        V4=1, TEIDRI=2, teid_range=1, ipv4=UPF_N3, ASSONI=1, network_instance="access",
        ASSOSI=1, interface=0)
    pfd = IE_PFDContents(FD=1, flow="permit out 6 from 203.0.113.0/24 443 to any",
                         URL=1, url="https://video.example.com/", DN=1, domain="video.example.com")
    app = IE_ApplicationID_PFDs(IE_list=[IE_ApplicationId(id="app-video"), IE_PFDContext(IE_list=[pfd])])
    peer = IE_RemoteGTP_U_Peer(V4=1, ipv4=GNB)
    pfd0 = "application_ids_pfds.0.pfd_contexts.0.pfd_contents.0."
    return [
        one("heartbeat_request", 1,
            node(1) / PFCPHeartbeatRequest(IE_list=[IE_RecoveryTimeStamp(timestamp=T_SMF)]),
            {"recovery_time_stamp": T_SMF}),
        one("heartbeat_response", 2,
            node(1) / PFCPHeartbeatResponse(IE_list=[IE_RecoveryTimeStamp(timestamp=T_UPF)]),
            {"recovery_time_stamp": T_UPF}),
        one("pfd_management_request", 3, node(2) / PFCPPFDManagementRequest(IE_list=[app, node_id_v4(SMF)]),
            {"application_ids_pfds.0.application_id": "app-video",
             pfd0 + "flow_description": "permit out 6 from 203.0.113.0/24 443 to any",
             pfd0 + "url": "https://video.example.com/", pfd0 + "domain_name": "video.example.com",
             "node_id.Ipv4": SMF}),
        one("pfd_management_response", 4,
            node(2) / PFCPPFDManagementResponse(IE_list=[IE_Cause(cause=1), node_id_v4(UPF)]),
            {"cause": 1, "node_id.Ipv4": UPF}),
        one("association_setup_request_fqdn", 5, node(3) / PFCPAssociationSetupRequest(IE_list=[
            IE_NodeId(id_type=2, id=SMF_FQDN), IE_RecoveryTimeStamp(timestamp=T_SMF),
            IE_CPFunctionFeatures(LOAD=1, OVRL=1)]),
            {"node_id.Fqdn": SMF_FQDN, "recovery_time_stamp": T_SMF,
             "cp_function_features": ["LOAD", "OVRL"]}),
        one("association_setup_response", 6, node(3) / PFCPAssociationSetupResponse(IE_list=[
            node_id_v4(UPF), IE_Cause(cause=1), IE_RecoveryTimeStamp(timestamp=T_UPF),
            IE_UPFunctionFeatures(BUCP=1, FTUP=1, EMPU=1, PDIU=1), ip_res]),
            {"cause": 1, "up_function_features": ["BUCP", "FTUP", "EMPU", "PDIU"],
             "user_plane_ip_resource_information.0": {
                 "teid_range_indication": 2, "teid_range": 1, "ipv4": UPF_N3,
                 "network_instance": "access", "source_interface": 0}}),
        one("association_update_request", 7, node(4) / PFCPAssociationUpdateRequest(IE_list=[
            node_id_v4(UPF), IE_PFCPAssociationReleaseRequest(SARR=1),
            IE_GracefulReleasePeriod(release_timer_unit=1, release_timer_value=5)]),
            {"pfcp_association_release_request": {"sarr": True, "urss": False},
             "graceful_release_period": {"unit": 1, "value": 5}}),
        one("association_update_response", 8,
            node(4) / PFCPAssociationUpdateResponse(IE_list=[node_id_v4(SMF), IE_Cause(cause=1)]),
            {"node_id.Ipv4": SMF, "cause": 1}),
        one("association_release_request_ipv6", 9,
            node(5) / PFCPAssociationReleaseRequest(IE_list=[IE_NodeId(id_type=1, ipv6=SMF_V6)]),
            {"node_id.Ipv6": SMF_V6}),
        one("association_release_response", 10,
            node(5) / PFCPAssociationReleaseResponse(IE_list=[node_id_v4(UPF), IE_Cause(cause=1)]),
            {"node_id.Ipv4": UPF, "cause": 1}),
        one("version_not_supported_response", 11, node(6) / PFCPVersionNotSupportedResponse(), {}),
        one("node_report_request", 12, node(7) / PFCPNodeReportRequest(IE_list=[
            node_id_v4(UPF), IE_NodeReportType(UPFR=1),
            IE_UserPlanePathFailureReport(IE_list=[peer])]),
            {"node_report_type": ["UPFR"], "user_plane_path_failure_report.remote_gtpu_peers.0.ipv4": GNB}),
        one("node_report_response", 13, node(7) / PFCPNodeReportResponse(IE_list=[
            node_id_v4(SMF), IE_Cause(cause=69), IE_OffendingIE(type=102)]),
            {"cause": 69, "offending_ie": 102}),
        one("session_set_deletion_request", 14, node(8) / PFCPSessionSetDeletionRequest(IE_list=[
            node_id_v4(SMF), IE_FqCSID(node_id_type=0, ipv4=SMF, csids=[1, 2])]),
            {"fq_csids.0.node_address.Ipv4": SMF, "fq_csids.0.csids": [1, 2]}),
        one("session_set_deletion_response", 15,
            node(8) / PFCPSessionSetDeletionResponse(IE_list=[node_id_v4(UPF), IE_Cause(cause=1)]),
            {"cause": 1}),
    ]


def smf_establishment_ies():
    """As an SMF sends it: UL PDR with F-TEID CHOOSE + CHOOSE ID, DL PDR with UE IP and SDF
    filter, forward and buffer FARs, AMBR and flow QERs, a URR, BAR, PDN type, user, DNN, slice."""
    ul = pdr(1, 255, [IE_SourceInterface(interface=0), IE_FTEID(CH=1, CHID=1, V4=1, choose_id=1),
                      IE_NetworkInstance(instance="access"), IE_QFI(QFI=9)],
             ohr(0, 1), IE_FAR_Id(id=1), IE_URR_Id(id=1), IE_QER_Id(id=1), IE_QER_Id(id=2))
    dl = pdr(2, 255, [IE_SourceInterface(interface=1), IE_NetworkInstance(instance="internet"),
                      IE_UE_IP_Address(V4=1, SD=1, ipv4=UE),
                      IE_SDF_Filter(FD=1, flow_description="permit out ip from any to assigned")],
             IE_FAR_Id(id=2), IE_QER_Id(id=1))
    far_ul = IE_CreateFAR(IE_list=[IE_FAR_Id(id=1), IE_ApplyAction(FORW=1), IE_ForwardingParameters(IE_list=[
        IE_DestinationInterface(interface=1), IE_NetworkInstance(instance="internet")])])
    # No Forwarding Parameters: buffer and notify the CP function.
    far_dl = IE_CreateFAR(IE_list=[IE_FAR_Id(id=2), IE_ApplyAction(BUFF=1, NOCP=1), IE_BAR_Id(id=1)])
    ambr = IE_CreateQER(IE_list=[IE_QER_Id(id=1), IE_GateStatus(), IE_MBR(ul=100000, dl=200000)])
    flow = IE_CreateQER(IE_list=[IE_QER_Id(id=2), IE_GateStatus(ul=0, dl=1), IE_MBR(ul=10000, dl=20000),
                                 IE_GBR(ul=5000, dl=10000), IE_QFI(QFI=9)])
    urr = IE_CreateURR(IE_list=[IE_URR_Id(id=1), IE_MeasurementMethod(VOLUM=1, DURAT=1),
                                IE_ReportingTriggers(volume_threshold=1, time_threshold=1),
                                IE_VolumeThreshold(TOVOL=1, total=1000000000),
                                IE_TimeThreshold(threshold=3600)])
    bar = IE_Create_BAR(IE_list=[IE_BAR_Id(id=1), IE_DownlinkDataNotificationDelay(delay=2),
                                 IE_SuggestedBufferingPacketsCount(count=10)])
    # scapy's PDN type names are off by one: 1 is IPv4 in TS 29.244 §8.2.79.
    # S-NSSAI (257) is newer than scapy's table: sent as a raw IE.
    return [node_id_v4(SMF), fseid(CP_SEID, SMF), ul, dl, far_ul, far_dl, ambr, flow, urr, bar,
            IE_PDNType(pdn_type=1), IE_UserId(IMSIF=1, imsi=tbcd("001010123456789")),
            IE_APN_DNN(apn_dnn="internet"), IE_NotImplemented(ietype=257, data=b"\x01\x01\x02\x03")]


def establishment_cases():
    p0, p1, f1, q1 = "create_pdrs.0.", "create_pdrs.1.", "create_fars.1.", "create_qers.1."
    sdfs = [IE_SDF_Filter(), IE_SDF_Filter(TTC=1, tos_traffic_class=0x2E, tos_traffic_mask=0xFF),
            IE_SDF_Filter(SPI=1, security_parameter_index=0x1001), IE_SDF_Filter(FL=1, flow_label=0xABCDE),
            IE_SDF_Filter(FD=1, BID=1, flow_description="permit out 17 from any to assigned",
                          sdf_filter_id=7)]
    ohrs = [pdr_with_ohr(1, ohr(0)), pdr_with_ohr(2, ohr(6, 1)), pdr_with_ohr(3, ohr(1, 0))]
    far_p = "create_fars.1.forwarding_parameters."
    far_fwd = IE_CreateFAR(IE_list=[IE_FAR_Id(id=2), IE_ApplyAction(FORW=1, extra_data=b"\x00"),
                                    IE_ForwardingParameters(IE_list=[
                                        IE_DestinationInterface(interface=0),
                                        IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=0x1234, ipv4=GNB),
                                        # scapy calls octet 6 "traffic_class"; it is the mask.
                                        IE_TransportLevelMarking(tos=0xB8, traffic_class=0xFC),
                                        IE_ForwardingPolicy(policy_identifier="fp1")])])
    return [
        one("session_establishment_request", 50, sess(0, 0x101) / PFCPSessionEstablishmentRequest(
            IE_list=smf_establishment_ies()),
            {"node_id.Ipv4": SMF, "cp_f_seid": {"seid": CP_SEID, "ipv4": SMF},
             p0 + "pdr_id": 1, p0 + "precedence": 255, p0 + "pdi.source_interface": 0,
             p0 + "pdi.local_f_teid.Choose": {"ipv4": True, "ipv6": False, "choose_id": 1},
             p0 + "pdi.network_instance": "access", p0 + "pdi.qfis": [9],
             p0 + "outer_header_removal": {"outer_header_removal_description": 0,
                                           "gtpu_extension_header_deletion": 1},
             p0 + "far_id": 1, p0 + "urr_ids": [1], p0 + "qer_ids": [1, 2],
             p1 + "pdi.ue_ip_addresses.0.ipv4": UE, p1 + "pdi.ue_ip_addresses.0.is_destination": True,
             p1 + "pdi.sdf_filters.0": {"flow_description": "permit out ip from any to assigned"},
             "create_fars.0.apply_action": ["FORW"],
             "create_fars.0.forwarding_parameters.destination_interface": 1,
             f1 + "apply_action": ["BUFF", "NOCP"], f1 + "bar_id": 1,
             "create_qers.0.mbr": {"uplink_kbps": 100000, "downlink_kbps": 200000},
             q1 + "gate_status": {"uplink": "Open", "downlink": "Closed"},
             q1 + "gbr": {"uplink_kbps": 5000, "downlink_kbps": 10000}, q1 + "qfi": 9,
             "create_urrs.0.measurement_method": ["DURAT", "VOLUM"],
             "create_urrs.0.reporting_triggers": ["VOLTH", "TIMTH"],
             "create_urrs.0.volume_threshold": {"total": 1000000000},
             "create_urrs.0.time_threshold": 3600,
             "create_bar": {"bar_id": 1, "downlink_data_notification_delay": 2,
                            "suggested_buffering_packets_count": 10},
             "pdn_type": 1, "user_id.imsi": "001010123456789", "apn_dnn": "internet",
             "s_nssai": {"sst": 1, "sd": 0x010203}}),
        one("session_establishment_request_sdf_filters", 50, sess(0, 0x102) / PFCPSessionEstablishmentRequest(
            IE_list=minimal_establishment(sdfs)),
            {p0 + "pdi.sdf_filters": [{}, {"tos_traffic_class": 0x2EFF}, {"security_parameter_index": 0x1001},
                                      {"flow_label": 0xABCDE},
                                      {"flow_description": "permit out 17 from any to assigned",
                                       "sdf_filter_id": 7}]}),
        one("session_establishment_request_ohr", 50, sess(0, 0x103) / PFCPSessionEstablishmentRequest(
            IE_list=[IE_NodeId(id_type=2, id=SMF_FQDN), fseid(CP_SEID, SMF), *ohrs,
                     IE_CreateFAR(IE_list=[IE_FAR_Id(id=1), IE_ApplyAction(DROP=1)])]),
            {"node_id.Fqdn": SMF_FQDN,
             p0 + "outer_header_removal": {"outer_header_removal_description": 0},
             p1 + "outer_header_removal": {"outer_header_removal_description": 6,
                                           "gtpu_extension_header_deletion": 1},
             "create_pdrs.2.outer_header_removal": {"outer_header_removal_description": 1,
                                                    "gtpu_extension_header_deletion": 0},
             p1 + "pdi.local_f_teid.Assigned.teid": 0x102, "create_fars.0.apply_action": ["DROP"]}),
        one("session_establishment_request_priority_far", 50,
            sess(0, 0x104, MP=1, priority=5) / PFCPSessionEstablishmentRequest(
                IE_list=minimal_establishment((), far_fwd)),
            {f1 + "apply_action": ["FORW"], far_p + "destination_interface": 0,
             far_p + "outer_header_creation": {"description": 256, "teid": 0x1234, "ipv4": GNB},
             far_p + "transport_level_marking": {"tos_traffic_class": 0xB8, "mask": 0xFC},
             far_p + "forwarding_policy.identifier": "fp1"}),
        one("session_establishment_response", 51,
            sess(CP_SEID, 0x101) / PFCPSessionEstablishmentResponse(IE_list=[
            node_id_v4(UPF), IE_Cause(cause=1), fseid(UP_SEID, UPF),
            IE_CreatedPDR(IE_list=[IE_PDR_Id(id=1), IE_FTEID(V4=1, TEID=0xA001, ipv4=UPF_N3)])]),
            {"cause": 1, "up_f_seid": {"seid": UP_SEID, "ipv4": UPF}, "created_pdrs.0.pdr_id": 1,
             "created_pdrs.0.local_f_teid.Assigned": {"teid": 0xA001, "ipv4": UPF_N3, "ipv6": None}}),
        one("session_establishment_response_rejected", 51,
            sess(CP_SEID, 0x111) / PFCPSessionEstablishmentResponse(IE_list=[
                node_id_v4(UPF), IE_Cause(cause=73), IE_OffendingIE(type=1),
                IE_FailedRuleId(type=0, pdr_id=3)]),
            {"cause": 73, "offending_ie": 1, "failed_rule_id": {"Pdr": 3}}),
    ]


def modification_ies():
    gnb = IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=0x1234, ipv4=GNB)
    return [
        IE_RemovePDR(IE_list=[IE_PDR_Id(id=4)]), IE_RemoveFAR(IE_list=[IE_FAR_Id(id=4)]),
        IE_RemoveURR(IE_list=[IE_URR_Id(id=2)]), IE_RemoveQER(IE_list=[IE_QER_Id(id=2)]),
        IE_Remove_BAR(IE_list=[IE_BAR_Id(id=3)]),
        IE_CreateQER(IE_list=[IE_QER_Id(id=3), IE_GateStatus(ul=1, dl=0), IE_QFI(QFI=6)]),
        IE_UpdatePDR(IE_list=[IE_PDR_Id(id=1), ohr(6, 1), IE_Precedence(precedence=150),
                              IE_QER_Id(id=1), IE_QER_Id(id=3)]),
        IE_UpdateFAR(IE_list=[IE_FAR_Id(id=2), IE_ApplyAction(FORW=1), IE_UpdateForwardingParameters(IE_list=[
            IE_DestinationInterface(interface=0), gnb, IE_PFCPSMReqFlags(SNDEM=1)])]),
        IE_UpdateQER(IE_list=[IE_QER_Id(id=1), IE_MBR(ul=150000, dl=300000)]),
        IE_UpdateURR(IE_list=[IE_URR_Id(id=1), IE_TimeThreshold(threshold=7200)]),
        IE_Update_BAR_SMR(IE_list=[IE_BAR_Id(id=1), IE_DownlinkDataNotificationDelay(delay=4)]),
        IE_PFCPSMReqFlags(DROBU=1, SNDEM=1), IE_QueryURR(IE_list=[IE_URR_Id(id=1)]),
        IE_QueryURRReference(reference=77),
    ]


def volume_measurement():
    return IE_VolumeMeasurement(TOVOL=1, ULVOL=1, DLVOL=1, total=1500000, uplink=500000, downlink=1000000)


def session_cases():
    up, uf = "update_pdrs.0.", "update_fars.0.update_forwarding_parameters."
    vm = {"total_volume": 1500000, "uplink_volume": 500000, "downlink_volume": 1000000}
    return [
        one("session_modification_request", 52, sess(UP_SEID, 0x102) / PFCPSessionModificationRequest(
            IE_list=modification_ies()),
            {"remove_pdrs.0.pdr_id": 4, "remove_fars.0.far_id": 4, "remove_urrs.0.urr_id": 2,
             "remove_qers.0.qer_id": 2, "remove_bar.bar_id": 3,
             "create_qers.0.gate_status": {"uplink": "Closed", "downlink": "Open"}, "create_qers.0.qfi": 6,
             up + "outer_header_removal": {"outer_header_removal_description": 6,
                                           "gtpu_extension_header_deletion": 1},
             up + "precedence": 150, up + "qer_ids": [1, 3], "update_fars.0.apply_action": ["FORW"],
             uf + "outer_header_creation.teid": 0x1234, uf + "pfcpsm_req_flags": ["SNDEM"],
             "update_qers.0.mbr.downlink_kbps": 300000, "update_urrs.0.time_threshold": 7200,
             "update_bar.downlink_data_notification_delay": 4,
             "pfcpsmreq_flags": ["DROBU", "SNDEM"], "query_urrs.0.urr_id": 1, "query_urr_reference": 77}),
        one("session_modification_response", 53,
            sess(CP_SEID, 0x102) / PFCPSessionModificationResponse(IE_list=[
            IE_Cause(cause=1), usage_report(IE_UsageReport_SMR, 1, 3, IE_UsageReportTrigger(IMMER=1),
                                            volume_measurement(), IE_DurationMeasurement(duration=600),
                                            IE_QueryURRReference(reference=77))]),
            {"cause": 1, "usage_reports.0.urr_id": 1, "usage_reports.0.ur_seqn": 3,
             "usage_reports.0.usage_report_trigger": ["IMMER"], "usage_reports.0.volume_measurement": vm,
             "usage_reports.0.duration_measurement": 600, "usage_reports.0.query_urr_reference": 77}),
        one("session_deletion_request", 54, sess(UP_SEID, 0x103) / PFCPSessionDeletionRequest(), {}),
        one("session_deletion_response", 55, sess(CP_SEID, 0x103) / PFCPSessionDeletionResponse(IE_list=[
            IE_Cause(cause=1), usage_report(IE_UsageReport_SDR, 1, 4, IE_UsageReportTrigger(TERMR=1),
                                            volume_measurement())]),
            {"cause": 1, "usage_reports.0.usage_report_trigger": ["TERMR"],
             "usage_reports.0.volume_measurement.total_volume": 1500000}),
        one("session_report_request_dldr", 56, sess(CP_SEID, 0x201) / PFCPSessionReportRequest(IE_list=[
            IE_ReportType(DLDR=1), IE_DownlinkDataReport(IE_list=[
                IE_PDR_Id(id=2), IE_DownlinkDataServiceInformation(QFII=1, qfi_val=9)])]),
            {"report_type": ["DLDR"], "downlink_data_report.pdr_ids": [2],
             "downlink_data_report.downlink_data_service_information.0": {"qfi": 9}}),
        one("session_report_request_usar", 56, sess(CP_SEID, 0x202) / PFCPSessionReportRequest(IE_list=[
            IE_ReportType(USAR=1),
            usage_report(IE_UsageReport_SRR, 2, 1, IE_UsageReportTrigger(VOLTH=1, PERIO=1),
                                                volume_measurement(), IE_StartTime(timestamp=T_UPF + 100),
                                                IE_EndTime(timestamp=T_UPF + 700))]),
            {"report_type": ["USAR"], "usage_reports.0.urr_id": 2,
             "usage_reports.0.usage_report_trigger": ["PERIO", "VOLTH"],
             "usage_reports.0.start_time": T_UPF + 100, "usage_reports.0.end_time": T_UPF + 700,
             "usage_reports.0.volume_measurement": vm}),
        one("session_report_request_erir", 56, sess(CP_SEID, 0x203) / PFCPSessionReportRequest(IE_list=[
            IE_ReportType(ERIR=1),
            IE_ErrorIndicationReport(IE_list=[IE_FTEID(V4=1, TEID=0x1234, ipv4=GNB)])]),
            {"report_type": ["ERIR"],
             "error_indication_report.remote_f_teids.0.Assigned":
                 {"teid": 0x1234, "ipv4": GNB, "ipv6": None}}),
        one("session_report_response", 57, sess(UP_SEID, 0x201) / PFCPSessionReportResponse(IE_list=[
            IE_Cause(cause=1), IE_UpdateBAR_SRR(IE_list=[
                IE_BAR_Id(id=1), IE_DownlinkDataNotificationDelay(delay=1),
                IE_DLBufferingDuration(timer_unit=0, timer_value=10),
                IE_DLBufferingSuggestedPacketCount(count=20)]),
            IE_PFCPSRRspFlags(DROBU=1)]),
            {"cause": 1, "update_bar": {"bar_id": 1, "downlink_data_notification_delay": 1,
                                        "dl_buffering_duration": {"unit": 0, "value": 10},
                                        "dl_buffering_suggested_packet_count": 20},
             "pfcpsrrsp_flags": ["DROBU"]}),
    ]


def follow_on_case():
    # scapy has no FO flag: it is the third spare bit of the first octet.
    first = sess(CP_SEID, 0x204, spare_b4=1) / PFCPSessionReportRequest(IE_list=[IE_ReportType(DLDR=1)])
    second = node(0x205) / PFCPHeartbeatRequest(IE_list=[IE_RecoveryTimeStamp(timestamp=T_UPF)])
    return Case("follow_on_pair", [first, second],
                [(56, {"report_type": ["DLDR"]}), (1, {"recovery_time_stamp": T_UPF})])


def scapy_cases():
    return node_cases() + establishment_cases() + session_cases() + [follow_on_case()]


# ---------------------------------------------------------------- JSON of `upf decode`


def message_body(m):
    """The IEs of one decoded message (`ies` holds {MessageName: body})."""
    ies = m.get("ies")
    expect(isinstance(ies, dict) and len(ies) == 1, f"ies of {m.get('message_name')}: {ies!r}")
    return next(iter(ies.values()))


def header_of(m):
    h = m["header"]
    return (m["message_type"], h["sequence"], h["seid"], h["follow_on"], h["priority"])


def scapy_header(pkt, mtype=None):
    mtype = pkt.message_type if mtype is None else mtype
    return (mtype, pkt.seq, pkt.seid if pkt.S else None, bool(pkt.spare_b4),
            pkt.priority if pkt.MP else None)


def decoded_messages(obj, count, what):
    expect("error" not in obj, f"{what}: upf decode error: {obj.get('error')}")
    msgs = obj.get("messages") or []
    expect_eq(len(msgs), count, f"{what}: number of messages")
    return msgs


# ---------------------------------------------------------------- a. scapy -> ours


def decode_scapy_capture(ctx, cases):
    pcap = ctx.path("scapy.pcap")
    write_udp_pcap(pcap, [c.datagram() for c in cases], PORT)
    rc, objs, err = ctx.upf_decode(pcap)
    expect_eq(len(objs), len(cases), f"JSON objects from upf decode (stderr {err[-200:]!r})")
    return rc, objs


def check_scapy_capture(ctx, cases):
    rc, objs = ctx.once("upf decode scapy.pcap", lambda: decode_scapy_capture(ctx, cases))
    expect_eq(rc, 2 if any("error" in o for o in objs) else 0, "exit status")
    expect(len(cases) >= 25, f"only {len(cases)} scapy messages")
    kinds = {t for c in cases for t, _ in c.want}
    expect_eq(sorted(kinds), ALL_TYPES, "message types built with scapy")


def check_scapy_case(ctx, cases, i):
    case = cases[i]
    _, objs = ctx.once("upf decode scapy.pcap", lambda: decode_scapy_capture(ctx, cases))
    msgs = decoded_messages(objs[i], len(case.want), case.name)
    for pkt, (mtype, fields), m in zip(case.pkts, case.want, msgs):
        expect_eq(header_of(m), scapy_header(pkt, mtype), "header (type, seq, SEID, FO, priority)")
        body = message_body(m)
        for path, want in fields.items():
            expect_eq(get_path(body, path), want, path)


# ---------------------------------------------------------------- corpus (b, c)


def corpus(ctx):
    """(name, datagram) of every corpus file, sorted by name."""
    files = sorted(glob.glob(os.path.join(ctx.root, "testdata", "pfcp", "corpus", "*.hex")))
    out = []
    for f in files:
        with open(f) as fh:
            out.append((os.path.basename(f)[:-4], bytes.fromhex(fh.read().strip())))
    return out


def decode_corpus(ctx):
    items = corpus(ctx)
    pcap = ctx.path("corpus.pcap")
    write_udp_pcap(pcap, [d for _, d in items], PORT)
    rc, objs, err = ctx.upf_decode(pcap)
    expect_eq(len(objs), len(items), f"JSON objects from upf decode (stderr {err[-200:]!r})")
    expect_eq(rc, 0, "upf decode exit status on the corpus")
    return pcap, dict(zip((n for n, _ in items), objs))


def corpus_decoded(ctx, name):
    _, objs = ctx.once("upf decode corpus.pcap", lambda: decode_corpus(ctx))
    return objs[name]


def split_messages(datagram):
    """The messages of a datagram, cut by their header's length (FO datagrams hold several)."""
    out, rest = [], datagram
    while rest:
        expect(len(rest) >= 4, f"{len(rest)} trailing octets")
        n = 4 + int.from_bytes(rest[2:4], "big")
        out.append(rest[:n])
        rest = rest[n:]
    return out


def check_corpus_coverage(ctx):
    items = corpus(ctx)
    expect(len(items) >= 23, f"only {len(items)} corpus files")
    types = {m["message_type"] for n, _ in items for m in corpus_decoded(ctx, n).get("messages", [])}
    expect_eq(sorted(types), ALL_TYPES, "message types in the corpus")


# Key values compared between implementations: (our JSON key → value kind).
OUR_KEYS = {
    "node_id": "node_id", "cause": "cause", "pdr_id": "pdr_id", "pdr_ids": "pdr_id",
    "far_id": "far_id", "far_id_for_quota_action": "far_id",
    "local_f_teid": "f_teid", "remote_f_teids": "f_teid",
    "cp_f_seid": "f_seid", "up_f_seid": "f_seid", "old_cp_f_seid": "f_seid",
}
KINDS = sorted(set(OUR_KEYS.values()))


def our_value(kind, v):
    if kind == "node_id":
        (t, a), = v.items()
        return (t.lower(), a)
    if kind == "f_teid":
        (t, f), = v.items()
        return ("choose", f["choose_id"]) if t == "Choose" else (f["teid"], f["ipv4"])
    if kind == "f_seid":
        return (v["seid"], v.get("ipv4"))
    return v


def our_values(body, skip=()):
    """{kind: sorted values} of every key IE in a decoded message body."""
    vals = {k: [] for k in KINDS}

    def walk(o):
        if isinstance(o, list):
            for x in o:
                walk(x)
        elif isinstance(o, dict):
            for k, v in o.items():
                if k in skip:
                    continue
                if k in OUR_KEYS:
                    for x in v if isinstance(v, list) else [v]:
                        vals[OUR_KEYS[k]].append(our_value(OUR_KEYS[k], x))
                else:
                    walk(v)

    walk(body)
    return {k: sorted(v, key=repr) for k, v in vals.items()}


# ---------------------------------------------------------------- b. ours -> scapy

# IEs newer than scapy 2.8's table (TS 29.244 V15.6, types up to 160): scapy gives
# IE_NotImplemented. Any other IE_NotImplemented is a failure (a wrong type number of ours).
SCAPY_UNKNOWN_IES = {
    162: "PFCPAUReq-Flags", 178: "Alternative SMF IP Address", 180: "SMF Set ID",
    192: "Source IP Address", 256: "Updated PDR", 257: "S-NSSAI",
}
# Our JSON keys of grouped IEs scapy does not parse (their children are invisible to it).
SCAPY_UNKNOWN_GROUPS = {"updated_pdrs"}
# Octets scapy leaves in `extra_data` because its IE is shorter than the specification's;
# anything else left over is a failure. Values: how many octets may be left.
SCAPY_SHORT_IES = {
    37: ("Reporting Triggers: scapy has octets 5-6, TS 29.244 §8.2.19 has octet 7", lambda n: n == 1),
    43: ("UP Function Features: scapy has octets 5-6 only (Rel-15)", lambda n: n % 2 == 0),
    44: ("Apply Action: scapy has 1 octet, §8.2.26 has 2 since Rel-16", lambda n: n == 1),
    63: ("Usage Report Trigger: scapy lacks octet 7 (§8.2.41)", lambda n: n == 1),
    66: ("Volume Measurement: scapy lacks the packet counts (§8.2.44 TONOP/ULNOP/DLNOP)",
         lambda n: n % 8 == 0),
    103: ("Remote GTP-U Peer: scapy reads the DI length as 1 octet, §8.2.70 says 2", lambda n: n > 0),
}


def scapy_ies(layer):
    """Every IE under a message or grouped IE, depth first."""
    for ie in getattr(layer, "IE_list", None) or []:
        yield ie
        if not isinstance(ie, IE_NotImplemented):
            yield from scapy_ies(ie)


def check_scapy_parsed_all(pkt):
    expect(not pkt.haslayer(Raw) and not pkt.haslayer(Padding), f"scapy left raw octets: {pkt.summary()}")
    for ie in scapy_ies(pkt.payload):
        t = ie.ietype
        expect(isinstance(ie.payload, NoPayload), f"IE {t}: octets after it: {bytes(ie.payload).hex()}")
        if isinstance(ie, IE_NotImplemented):
            expect(t in SCAPY_UNKNOWN_IES, f"IE {t} unknown to scapy and not allow-listed")
            continue
        extra = ie.fields.get("extra_data", b"")
        if extra:
            why, allowed = SCAPY_SHORT_IES.get(t, ("", lambda n: False))
            expect(allowed(len(extra)), f"IE {t} ({ie.name}): scapy left {extra.hex()} unparsed {why}")


def scapy_node_id(ie):
    if ie.id_type == 0:
        return ("ipv4", ie.ipv4)
    if ie.id_type == 1:
        return ("ipv6", ie.ipv6)
    return ("fqdn", ie.id.decode())


def scapy_value(ie):
    """(kind, value) of a key IE, or None."""
    t = ie.ietype
    if t == 60:
        return "node_id", scapy_node_id(ie)
    if t == 19:
        return "cause", ie.cause
    if t in (56, 108):
        return ("pdr_id" if t == 56 else "far_id"), ie.id
    if t == 21:
        return "f_teid", (("choose", ie.choose_id if ie.CHID else None) if ie.CH
                          else (ie.TEID, ie.ipv4 if ie.V4 else None))
    if t == 57:
        return "f_seid", (ie.seid, ie.ipv4 if ie.v4 else None)
    return None


def scapy_values(pkt):
    vals = {k: [] for k in KINDS}
    for ie in scapy_ies(pkt.payload):
        kv = None if isinstance(ie, IE_NotImplemented) else scapy_value(ie)
        if kv:
            vals[kv[0]].append(kv[1])
    return {k: sorted(v, key=repr) for k, v in vals.items()}


def check_ours_to_scapy(ctx, name, datagram):
    chunks = split_messages(datagram)
    msgs = decoded_messages(corpus_decoded(ctx, name), len(chunks), name)
    for chunk, m in zip(chunks, msgs):
        pkt = PFCP(chunk)
        check_scapy_parsed_all(pkt)
        expect(bytes(pkt) == chunk, f"scapy rebuilds {bytes(pkt).hex()}, original {chunk.hex()}")
        expect_eq(scapy_header(pkt), header_of(m), "header (type, seq, SEID, FO, priority)")
        expect_eq(scapy_values(pkt), our_values(message_body(m), SCAPY_UNKNOWN_GROUPS), "key IE values")


# ---------------------------------------------------------------- c. ours -> tshark

# tshark 4.0 limitations, each a predicate on a top-level IE (type, value). A corpus datagram
# tshark flags passes only if it has such an IE and tshark flags nothing once they are removed.
TSHARK_LIMITS = {
    # TS 29.244 §8.2.138: with MPL = 1 a one-octet mask/prefix length follows the address(es);
    # tshark 4.0.17 throws "Malformed Packet" on any Source IP Address with MPL set (it does so
    # even with octets to spare; rs-pfcp encodes the IE as we do).
    192: lambda v: len(v) > 0 and v[0] & 0x04 != 0,
}
FLAGGED = "_ws.malformed || _ws.expert.severity >= warning"
TSHARK_FIELDS = ["pfcp.msg_type", "pfcp.seqno", "pfcp.seid", "pfcp.cause", "pfcp.pdr_id",
                 "pfcp.far_id", "pfcp.f_teid.teid", "pfcp.node_id_ipv4"]


def top_level_ies(msg):
    """(type, value, octets) of the top-level IEs of one message."""
    at = 16 if msg[0] & 0x01 else 8
    while at + 4 <= len(msg):
        t, n = int.from_bytes(msg[at:at + 2], "big"), int.from_bytes(msg[at + 2:at + 4], "big")
        yield t, msg[at + 4:at + 4 + n], msg[at:at + 4 + n]
        at += 4 + n


def without_tshark_limits(datagram):
    out = b""
    for msg in split_messages(datagram):
        hdr = 16 if msg[0] & 0x01 else 8
        body = b"".join(raw for t, v, raw in top_level_ies(msg)
                        if not TSHARK_LIMITS.get(t, lambda _: False)(v))
        out += msg[:2] + (hdr - 4 + len(body)).to_bytes(2, "big") + msg[4:hdr] + body
    return out


def flagged_frames(pcap):
    return {int(row[0][0]) for row in tshark_fields(pcap, ["frame.number"], FLAGGED)}


def run_tshark(ctx):
    pcap, _ = ctx.once("upf decode corpus.pcap", lambda: decode_corpus(ctx))
    items = corpus(ctx)
    verbose = tshark("-r", pcap, "-V")
    total = sum(len(split_messages(d)) for _, d in items)
    expect_eq(verbose.count("\nPacket Forwarding Control Protocol"), total, "PFCP messages tshark dissected")
    stripped = ctx.path("corpus-stripped.pcap")
    write_udp_pcap(stripped, [without_tshark_limits(d) for _, d in items], PORT)
    return SimpleNamespace(flagged=flagged_frames(pcap), flagged_stripped=flagged_frames(stripped),
                           fields=tshark_fields(stripped, TSHARK_FIELDS))


def find_key(o, key):
    """Every value of `key` anywhere in a JSON value."""
    if isinstance(o, list):
        return [v for x in o for v in find_key(x, key)]
    if isinstance(o, dict):
        return [v for k, x in o.items() for v in ([x] if k == key else find_key(x, key))]
    return []


def our_tshark_view(msgs):
    """What tshark's fields should say, from our decoding of a datagram's messages. tshark
    shows the F-SEID's SEID as pfcp.seid, a Remote GTP-U Peer's IPv4 address as
    pfcp.node_id_ipv4 and a Failed Rule ID's PDR ID as pfcp.pdr_id, so they count too."""
    vals = {f: [] for f in TSHARK_FIELDS}
    for m in msgs:
        h, body = m["header"], message_body(m)
        ours = our_values(body)
        vals["pfcp.msg_type"].append(m["message_type"])
        vals["pfcp.seqno"].append(h["sequence"])
        vals["pfcp.seid"] += ([h["seid"]] if h["seid"] is not None else []) + [v[0] for v in ours["f_seid"]]
        vals["pfcp.cause"] += ours["cause"]
        failed = [r["Pdr"] for r in find_key(body, "failed_rule_id") if "Pdr" in r]
        vals["pfcp.pdr_id"] += ours["pdr_id"] + failed
        vals["pfcp.far_id"] += ours["far_id"]
        vals["pfcp.f_teid.teid"] += [v[0] for v in ours["f_teid"] if v[0] != "choose"]
        peers = [p["ipv4"] for ps in find_key(body, "remote_gtpu_peers") for p in ps if p.get("ipv4")]
        vals["pfcp.node_id_ipv4"] += [v[1] for v in ours["node_id"] if v[0] == "ipv4"] + peers
    return vals


def tshark_view(row):
    vals = {}
    for f, col in zip(TSHARK_FIELDS, row):
        vals[f] = col if f == "pfcp.node_id_ipv4" else [int(x, 0) for x in col]
    return vals


def check_ours_to_tshark(ctx, i, name, datagram):
    r = ctx.once("tshark corpus.pcap", lambda: run_tshark(ctx))
    frame = i + 1
    if frame in r.flagged:
        expect(without_tshark_limits(datagram) != datagram,
               "tshark flags it (malformed or expert warning/error)")
    expect(frame not in r.flagged_stripped, "tshark flags it even without the allow-listed IEs")
    msgs = decoded_messages(corpus_decoded(ctx, name), len(split_messages(datagram)), name)
    want, got = our_tshark_view(msgs), tshark_view(r.fields[i])
    for f in TSHARK_FIELDS:
        if f in ("pfcp.msg_type", "pfcp.seqno"):
            expect_eq(got[f], want[f], f)
        else:
            expect_eq(sorted(got[f]), sorted(want[f]), f)


# ---------------------------------------------------------------- d. malformed datagrams


def ie(t, value):
    return t.to_bytes(2, "big") + len(value).to_bytes(2, "big") + value


def message(mtype, body, seid=None, seq=1):
    hdr = (seid.to_bytes(8, "big") if seid is not None else b"") + seq.to_bytes(3, "big") + b"\x00"
    flags = 0x21 if seid is not None else 0x20
    return bytes([flags, mtype]) + (len(hdr) + len(body)).to_bytes(2, "big") + hdr + body


RTS = ie(96, (T_SMF).to_bytes(4, "big"))
NODE = ie(60, b"\x00" + bytes([192, 0, 2, 10]))
FSEID = ie(57, b"\x02" + CP_SEID.to_bytes(8, "big") + bytes([192, 0, 2, 10]))


def with_pdr_fteid(fteid_value):
    pdi = ie(2, ie(20, b"\x00") + ie(21, fteid_value))
    return message(50, NODE + FSEID + ie(1, ie(56, b"\x00\x01") + ie(29, b"\x00\x00\x00\x01") + pdi), seid=0)


# (name, datagram, expected Cause, expected Offending IE or None)
MALFORMED = [
    ("truncated_header", bytes.fromhex("2001"), 68, None),
    ("length_past_datagram", message(1, RTS)[:-2], 68, None),
    ("ie_length_past_message", message(1, ie(96, b"\x00" * 4)[:3] + b"\x08" + b"\x00" * 4), 68, None),
    ("short_recovery_time_stamp", message(1, ie(96, b"\xe9\x3c")), 68, 96),
    ("garbage_body", message(1, b"\xff\xff\xff"), 68, None),
    ("trailing_octets", message(1, RTS) + b"\x00\x00", 68, None),
    ("missing_recovery_time_stamp", message(1, b""), 66, 96),
    ("missing_node_id", message(50, FSEID, seid=0), 66, 60),
    ("node_id_type_unknown", message(5, ie(60, b"\x05\x01\x02\x03\x04") + RTS), 69, 60),
    ("f_teid_chid_without_ch", with_pdr_fteid(b"\x09\x00\x00\x00\x01\x0a\x00\x00\x01"), 69, 21),
    ("f_teid_truncated", with_pdr_fteid(b"\x01\x00\x00\x00\x01\x0a"), 68, 21),
]


def check_malformed(ctx, datagram, cause, offending):
    rc, objs, err = ctx.upf_decode("--pfcp", datagram.hex())
    expect("panicked" not in err, f"upf crashed: {err[-300:]}")
    expect_eq(len(objs), 1, "JSON objects")
    e = objs[0].get("error")
    expect(isinstance(e, dict), f"no error member: {objs[0]}")
    expect_eq(e.get("cause"), cause, f"cause ({e.get('message')})")
    if offending is not None:
        expect_eq(e.get("offending_ie"), offending, "offending IE")
    expect_eq(rc, 2, "exit status")


# ---------------------------------------------------------------- the list run.py runs


def checks(ctx):
    cases = scapy_cases()
    out = [("pfcp.scapy_to_ours.capture", lambda c: check_scapy_capture(c, cases))]
    out += [(f"pfcp.scapy_to_ours.{case.name}", lambda c, i=i: check_scapy_case(c, cases, i))
            for i, case in enumerate(cases)]
    items = corpus(ctx)
    out.append(("pfcp.corpus.coverage", check_corpus_coverage))
    out += [(f"pfcp.ours_to_scapy.{n}", lambda c, n=n, d=d: check_ours_to_scapy(c, n, d)) for n, d in items]
    out += [(f"pfcp.ours_to_tshark.{n}", lambda c, i=i, n=n, d=d: check_ours_to_tshark(c, i, n, d))
            for i, (n, d) in enumerate(items)]
    out += [(f"pfcp.malformed.{n}", lambda c, d=d, k=k, o=o: check_malformed(c, d, k, o))
            for n, d, k, o in MALFORMED]
    return out
