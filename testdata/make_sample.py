#!/usr/bin/env python3
"""Writes sample-n4-n3.pcap: one PDU session's life as a UPF sees it, built with scapy 2.8 —
PFCP association, heartbeat, session establishment (4 PDRs / 4 FARs / 2 QERs / 2 URRs),
uplink and downlink G-PDUs with the PDU Session Container, GTP-U echo, an End Marker, an Error
Indication, a session report, modification and deletion. `upf decode` on it is README's main
command until the daemon lands."""
from pathlib import Path
from scapy.all import IP, UDP, ICMP, TCP, Raw, wrpcap
from scapy.contrib.pfcp import *
from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer, GTPEchoRequest, GTPEchoResponse, IE_Recovery, GTPErrorIndication, IE_TEIDI, IE_GSNAddress

here = Path(__file__).parent
SMF, UPF, GNB, UE, DN = "10.100.0.1", "10.100.0.2", "10.200.0.10", "10.60.0.1", "8.8.8.8"

def n4(src, dst, msg):
    return IP(src=src, dst=dst) / UDP(sport=8805, dport=8805) / msg

def n3(src, dst, gtp):
    return IP(src=src, dst=dst) / UDP(sport=2152, dport=2152) / gtp

node = lambda ip: IE_NodeId(id_type=0, ipv4=ip)
accepted = IE_Cause(cause=1)
est = bytes.fromhex((here / "pfcp/bench-establishment.hex").read_text().strip())
pkts = [
    n4(SMF, UPF, PFCP(S=0, seq=1) / PFCPAssociationSetupRequest(IE_list=[node(SMF), IE_RecoveryTimeStamp(timestamp=3_950_000_000)])),
    n4(UPF, SMF, PFCP(S=0, seq=1) / PFCPAssociationSetupResponse(IE_list=[
        node(UPF), accepted, IE_RecoveryTimeStamp(timestamp=3_950_000_100), IE_UPFunctionFeatures(FTUP=1)])),
    n4(SMF, UPF, PFCP(S=0, seq=2) / PFCPHeartbeatRequest(IE_list=[IE_RecoveryTimeStamp(timestamp=3_950_000_000)])),
    n4(UPF, SMF, PFCP(S=0, seq=2) / PFCPHeartbeatResponse(IE_list=[IE_RecoveryTimeStamp(timestamp=3_950_000_100)])),
    IP(src=SMF, dst=UPF) / UDP(sport=8805, dport=8805) / Raw(est),
    n4(UPF, SMF, PFCP(S=1, seid=0x1122334455667788, seq=77) / PFCPSessionEstablishmentResponse(IE_list=[
        node(UPF), accepted, IE_FSEID(v4=1, seid=1, ipv4=UPF),
        IE_CreatedPDR(IE_list=[IE_PDR_Id(id=1), IE_FTEID(V4=1, TEID=0x100, ipv4=UPF)]),
        IE_CreatedPDR(IE_list=[IE_PDR_Id(id=3), IE_FTEID(V4=1, TEID=0x100, ipv4=UPF)])])),
    n3(GNB, UPF, GTP_U_Header(teid=0x100, next_ex=0x85) / GTPPDUSessionContainer(type=1, QFI=9) / IP(src=UE, dst=DN) / ICMP(id=1, seq=1)),
    n3(UPF, GNB, GTP_U_Header(teid=0x01000001, next_ex=0x85) / GTPPDUSessionContainer(type=0, QFI=9) / IP(src=DN, dst=UE) / ICMP(type=0, id=1, seq=1)),
    n3(GNB, UPF, GTP_U_Header(teid=0x100, next_ex=0x85) / GTPPDUSessionContainer(type=1, QFI=9) / IP(src=UE, dst=DN) / TCP(sport=40000, dport=443, flags="S")),
    n3(UPF, GNB, GTP_U_Header(teid=0, gtp_type=1, S=1, seq=10) / GTPEchoRequest()),
    n3(GNB, UPF, GTP_U_Header(teid=0, gtp_type=2, S=1, seq=10) / GTPEchoResponse(IE_list=[IE_Recovery(restart_counter=0)])),
    n3(GNB, UPF, GTP_U_Header(teid=0, gtp_type=26, S=1, seq=0) / GTPErrorIndication(IE_list=[IE_TEIDI(TEIDI=0x0bad), IE_GSNAddress(length=4, ipv4_address=GNB)])),
    n4(UPF, SMF, PFCP(S=1, seid=0x1122334455667788, seq=1000) / PFCPSessionReportRequest(IE_list=[
        IE_ReportType(USAR=1),
        IE_UsageReport_SRR(IE_list=[IE_URR_Id(id=1), IE_UR_SEQN(number=0), IE_UsageReportTrigger(VOLTH=1),
                                    IE_VolumeMeasurement(TOVOL=1, ULVOL=1, DLVOL=1, total=10_000_120, uplink=4_000_000, downlink=6_000_120)])])),
    n4(SMF, UPF, PFCP(S=1, seid=1, seq=1000) / PFCPSessionReportResponse(IE_list=[accepted])),
    n4(SMF, UPF, PFCP(S=1, seid=1, seq=78) / PFCPSessionModificationRequest(IE_list=[
        IE_UpdateFAR(IE_list=[IE_FAR_Id(id=2), IE_ApplyAction(FORW=1, extra_data=b"\x00"),
                              IE_UpdateForwardingParameters(IE_list=[IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=0x02000002, ipv4="10.200.0.11"),
                                                                     IE_PFCPSMReqFlags(SNDEM=1)])])])),
    n3(UPF, GNB, GTP_U_Header(teid=0x01000001, gtp_type=254)),
    n4(UPF, SMF, PFCP(S=1, seid=0x1122334455667788, seq=78) / PFCPSessionModificationResponse(IE_list=[accepted])),
    n4(SMF, UPF, PFCP(S=1, seid=1, seq=79) / PFCPSessionDeletionRequest()),
    n4(UPF, SMF, PFCP(S=1, seid=0x1122334455667788, seq=79) / PFCPSessionDeletionResponse(IE_list=[accepted,
        IE_UsageReport_SDR(IE_list=[IE_URR_Id(id=1), IE_UR_SEQN(number=1), IE_UsageReportTrigger(TERMR=1),
                                    IE_VolumeMeasurement(TOVOL=1, total=120)])])),
]
for i, p in enumerate(pkts):
    p.time = 1_795_000_000 + i * 0.01
wrpcap(str(here / "sample-n4-n3.pcap"), pkts)
print(f"wrote {len(pkts)} packets")
