#!/usr/bin/env python3
"""Writes bench-establishment.hex: a Session Establishment Request as a 5GC SMF sends it for one
PDU session (4 PDRs, 4 FARs, 2 QERs, 2 URRs, BAR), built with scapy 2.8 (an encoder nobody here
wrote). Used by the PFCP criterion bench and the allocation test."""
from pathlib import Path
from scapy.contrib.pfcp import *

def pdr(pid, prec, src, far, qers, urr, fteid=None, ueip=None, sdf=None, ohr=None):
    pdi = [IE_SourceInterface(interface=src), IE_NetworkInstance(instance="internet")]
    if fteid: pdi.append(fteid)
    if ueip: pdi.append(ueip)
    if sdf: pdi.append(IE_SDF_Filter(FD=1, flow_description=sdf))
    pdi.append(IE_QFI(QFI=9))
    ies = [IE_PDR_Id(id=pid), IE_Precedence(precedence=prec), IE_PDI(IE_list=pdi)]
    if ohr is not None: ies.append(IE_OuterHeaderRemoval(header=ohr))
    ies.append(IE_FAR_Id(id=far))
    ies += [IE_QER_Id(id=q) for q in qers]
    ies.append(IE_URR_Id(id=urr))
    return IE_CreatePDR(IE_list=ies)

def far(fid, action, dst=None, ohc=None):
    ies = [IE_FAR_Id(id=fid), IE_ApplyAction(**action, extra_data=b"\x00")]
    if dst is not None:
        fp = [IE_DestinationInterface(interface=dst), IE_NetworkInstance(instance="internet")]
        if ohc: fp.append(ohc)
        ies.append(IE_ForwardingParameters(IE_list=fp))
    else:
        ies.append(IE_BAR_Id(id=1))
    return IE_CreateFAR(IE_list=ies)

ul_teid = IE_FTEID(CH=1, CHID=1, V4=1, choose_id=1)
ue = IE_UE_IP_Address(V4=1, SD=1, ipv4="10.60.0.1")
msg = PFCP(version=1, S=1, seid=0, seq=77) / PFCPSessionEstablishmentRequest(IE_list=[
    IE_NodeId(id_type=0, ipv4="10.0.0.1"),
    IE_FSEID(v4=1, seid=0x1122334455667788, ipv4="10.0.0.1"),
    pdr(1, 255, 0, 1, [1, 2], 1, fteid=ul_teid, sdf="permit out ip from any to assigned", ohr=0),
    pdr(2, 255, 1, 2, [1, 2], 1, ueip=ue, sdf="permit out ip from any to assigned"),
    pdr(3, 100, 0, 3, [1], 2, fteid=ul_teid, sdf="permit out udp from 10.1.0.0/16 1000-2000 to assigned", ohr=0),
    pdr(4, 100, 1, 4, [1], 2, ueip=ue, sdf="permit out udp from 10.1.0.0/16 1000-2000 to assigned"),
    far(1, dict(FORW=1), dst=1),
    far(2, dict(FORW=1), dst=0, ohc=IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=0x01000001, ipv4="10.0.1.1")),
    far(3, dict(FORW=1), dst=1),
    far(4, dict(BUFF=1, NOCP=1)),
    IE_CreateURR(IE_list=[IE_URR_Id(id=1), IE_MeasurementMethod(VOLUM=1, DURAT=1),
                          IE_ReportingTriggers(volume_threshold=1, time_threshold=1),
                          IE_VolumeThreshold(TOVOL=1, total=10_000_000), IE_TimeThreshold(threshold=600)]),
    IE_CreateURR(IE_list=[IE_URR_Id(id=2), IE_MeasurementMethod(VOLUM=1),
                          IE_ReportingTriggers(periodic_reporting=1), IE_MeasurementPeriod(period=60)]),
    IE_CreateQER(IE_list=[IE_QER_Id(id=1), IE_GateStatus(ul=0, dl=0), IE_MBR(ul=200000, dl=400000)]),
    IE_CreateQER(IE_list=[IE_QER_Id(id=2), IE_GateStatus(ul=0, dl=0), IE_MBR(ul=50000, dl=100000),
                          IE_GBR(ul=10000, dl=20000), IE_QFI(QFI=9)]),
    IE_Create_BAR(IE_list=[IE_BAR_Id(id=1), IE_DownlinkDataNotificationDelay(delay=2)]),
    IE_PDNType(pdn_type=1),
])
Path(__file__).with_name("bench-establishment.hex").write_text(bytes(msg).hex() + "\n")
