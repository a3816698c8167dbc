"""The N4 agent (`upf run --n4`) against a PFCP client built with scapy 2.8 (scapy.contrib.pfcp).

The module starts `upf run --n4 127.0.0.1:PORT` itself, waits for it to answer a Heartbeat,
then plays an SMF (Node ID IPv4 127.0.0.2, socket bound to that address) over loopback:
Association Setup, Heartbeat, Session Establishment (uplink PDRs 1 and 3 with F-TEID CHOOSE
and CHOOSE ID 1, downlink PDR 2, UE IPv4 addresses chosen by the UPF), two Session
Modifications (FAR 2 forwards to a gNB; Query URR 1) and one with the QAURR flag, three
negative cases (unknown SEID, PDR pointing at a missing FAR, a peer never associated),
Session Deletion and Association Release, then an establishment after the release (cause 72).
Every response must carry the request's sequence number and the right message type (and SEID
for session messages); a retransmitted establishment must get the same octets back (§6.4);
tshark must dissect every response without complaint.

Checks run in order and share state: a step's `.response` check sends the request; the checks
after it look at the response, and fail with the step's reason when there is none. Every
receive waits at most RECV_TIMEOUT; the module stops sending after MODULE_BUDGET seconds. The
agent is stopped by the last check and, whatever happens, at cleanup.

Where scapy 2.8 lacks something (Rel-16 bits), the comment at that spot says what is done.
"""

import ipaddress
import socket
import time

from common import Agent, Fail, expect, expect_eq, tshark_fields, write_udp_pcap
from scapy.contrib.pfcp import *  # noqa: F403 - the PFCP message and IE classes

RECV_TIMEOUT = 2.0
MODULE_BUDGET = 55.0
SMF_IP, STRANGER_IP, GNB_IP = "127.0.0.2", "127.0.0.5", "127.0.0.3"
UE_POOL = ipaddress.ip_network("10.60.0.0/16")
CP_SEID, CP_SEID_BAD, CP_SEID_OFF = 0x5111, 0x5222, 0x5333
UNKNOWN_UP_SEID = 0xDEADBEEF00C0FFEE
T_SMF = 3913056000  # our Recovery Time Stamp, NTP seconds

# IE types looked up in responses (TS 29.244 Table 8.1.2-1).
CAUSE, CREATED_PDR, FTEID, PDR_ID, FSEID, NODE_ID, UE_IP = 19, 8, 21, 56, 57, 60, 93
UPFF, UR_SMR, UR_SDR, URR_ID, UR_TRIGGER, UR_SEQN, RTS, FAILED_RULE = 43, 78, 79, 81, 63, 104, 96, 114
# Usage Report Trigger (§8.2.41): IMMER is octet 5 bit 8, TERMR octet 6 bit 4.
# UP Function Features (§8.2.25): FTUP is octet 5 bit 5, UEIP octet 7 bit 3.


# ---------------------------------------------------------------- building requests


def node_msg(seq):
    # scapy's header defaults to S=1 even for node messages.
    return PFCP(S=0, seq=seq)


def sess_msg(seid, seq):
    return PFCP(S=1, seid=seid, seq=seq)


def node_id(addr):
    return IE_NodeId(id_type=0, ipv4=addr)


def apply_action(**flags):
    # scapy's Apply Action is the 1-octet Rel-15 form; Rel-16 (§8.2.26) has 2 octets.
    return IE_ApplyAction(extra_data=b"\x00", **flags)


def ue_ip_choose(sd):
    # Raw IE: scapy 2.8's UE IP Address has no CHV4 bit (Rel-16, §8.2.62 octet 5 bit 5).
    # Flags CHV4 (0x10) and S/D (0x04); no address follows.
    return IE_NotImplemented(ietype=UE_IP, data=bytes([0x10 | (0x04 if sd else 0)]))


def uplink_pdr(pdr_id, precedence, qfi, far_id):
    pdi = [IE_SourceInterface(interface=0),  # Access
           IE_FTEID(CH=1, CHID=1, V4=1, choose_id=1),
           IE_NetworkInstance(instance="internet"), ue_ip_choose(sd=False), IE_QFI(QFI=qfi)]
    return IE_CreatePDR(IE_list=[
        IE_PDR_Id(id=pdr_id), IE_Precedence(precedence=precedence), IE_PDI(IE_list=pdi),
        IE_OuterHeaderRemoval(header=0),  # GTP-U/UDP/IPv4, the 1-octet form
        IE_FAR_Id(id=far_id), IE_QER_Id(id=1), IE_URR_Id(id=1)])


def establishment_ies(local_ip, cp_seid, far_of_pdr1=1):
    """The usual PDU session: uplink PDRs 1 and 3 share CHOOSE ID 1; downlink PDR 2 matches
    the UE address the UPF assigns; FAR 2 buffers until the gNB's tunnel is known."""
    downlink = IE_CreatePDR(IE_list=[
        IE_PDR_Id(id=2), IE_Precedence(precedence=200), IE_PDI(IE_list=[
            IE_SourceInterface(interface=1),  # Core
            IE_NetworkInstance(instance="internet"), ue_ip_choose(sd=True),
            IE_SDF_Filter(FD=1, flow_description="permit out ip from any to assigned")]),
        IE_FAR_Id(id=2), IE_QER_Id(id=1), IE_URR_Id(id=1)])
    far_ul = IE_CreateFAR(IE_list=[IE_FAR_Id(id=1), apply_action(FORW=1), IE_ForwardingParameters(IE_list=[
        IE_DestinationInterface(interface=1), IE_NetworkInstance(instance="internet")])])
    far_dl = IE_CreateFAR(IE_list=[IE_FAR_Id(id=2), apply_action(BUFF=1, NOCP=1)])
    qer = IE_CreateQER(IE_list=[IE_QER_Id(id=1), IE_GateStatus(ul=0, dl=0),  # both open
                                IE_MBR(ul=100000, dl=200000)])
    # scapy's Reporting Triggers has octets 5-6 (Rel-15 length); octet 7 is left out.
    urr = IE_CreateURR(IE_list=[IE_URR_Id(id=1), IE_MeasurementMethod(VOLUM=1),
                                IE_ReportingTriggers(periodic_reporting=1, volume_threshold=1),
                                IE_MeasurementPeriod(period=3600),
                                IE_VolumeThreshold(TOVOL=1, total=1 << 30)])
    return [node_id(local_ip), IE_FSEID(v4=1, seid=cp_seid, ipv4=local_ip),
            uplink_pdr(1, 200, 9, far_of_pdr1), downlink, uplink_pdr(3, 100, 5, 1),
            far_ul, far_dl, qer, urr]


# ---------------------------------------------------------------- reading responses


def ies(layer, ietype):
    return [ie for ie in getattr(layer, "IE_list", None) or [] if getattr(ie, "ietype", None) == ietype]


def one_ie(layer, ietype, what):
    found = ies(layer, ietype)
    expect(len(found) == 1, f"{len(found)} {what} IEs, want 1")
    return found[0]


def ie_value(ie):
    """The value octets of an IE, whatever scapy made of them."""
    raw = bytes(ie)
    return raw[4:4 + int.from_bytes(raw[2:4], "big")]


def expect_cause(msg, want):
    got = one_ie(msg, CAUSE, "Cause").cause
    expect_eq(got, want, "cause")


def usage_report_of(msg, report_type, urr_id, trigger):
    reports = ies(msg, report_type)
    for r in reports:
        ids = [u.id for u in ies(r, URR_ID)]
        if ids != [urr_id]:
            continue
        expect(len(ies(r, UR_SEQN)) == 1, "Usage Report without UR-SEQN")
        t = ies(r, UR_TRIGGER)
        expect(len(t) == 1, "Usage Report without Usage Report Trigger")
        expect(getattr(t[0], trigger) == 1, f"Usage Report Trigger {ie_value(t[0]).hex()} lacks {trigger}")
        return
    raise Fail(f"no Usage Report for URR {urr_id} among {len(reports)}")


def created_pdrs(msg):
    """{PDR ID: (Local F-TEID IE or None, UE IP Address IE or None)}."""
    out = {}
    for c in ies(msg, CREATED_PDR):
        pid = one_ie(c, PDR_ID, "PDR ID in Created PDR").id
        fteid, ueip = ies(c, FTEID), ies(c, UE_IP)
        out[pid] = (fteid[0] if fteid else None, ueip[0] if ueip else None)
    return out


def ue_ipv4(pdrs, pid):
    expect(pid in pdrs, f"no Created PDR for PDR {pid} (got {sorted(pdrs)})")
    ue = pdrs[pid][1]
    expect(ue is not None and ue.V4 == 1, f"Created PDR {pid} has no UE IPv4 address")
    expect(ipaddress.ip_address(ue.ipv4) in UE_POOL, f"UE IPv4 {ue.ipv4} not in {UE_POOL}")
    return ue.ipv4


# ---------------------------------------------------------------- the SMF side


class Peer:
    """A UDP socket of the SMF's (or of a stranger's) and its sequence numbers."""

    def __init__(self, scenario, local_ip):
        self.sc = scenario
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((local_ip, 0))
        self.ip = local_ip
        self.seq = 0x200
        self.last = None  # (request, response) octets of the last exchange

    def next_seq(self):
        self.seq += 1
        return self.seq

    def exchange(self, pkt, want_type, want_seid=None):
        """Sends pkt, returns the parsed response with its sequence number; Heartbeat
        Requests of the agent's are answered on the way, its other requests skipped."""
        req = bytes(pkt)
        self.sc.budget_left()
        self.sock.sendto(req, self.sc.agent.addr)
        deadline = time.monotonic() + RECV_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Fail(f"no response within {RECV_TIMEOUT}s to {req.hex()}")
            self.sock.settimeout(left)
            try:
                data, src = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            expect_eq(src, self.sc.agent.addr, "response source")
            rsp = PFCP(data)
            if rsp.message_type == 1:
                hb = node_msg(rsp.seq) / PFCPHeartbeatResponse(IE_list=[IE_RecoveryTimeStamp(timestamp=T_SMF)])
                self.sock.sendto(bytes(hb), src)
                continue
            if rsp.seq != pkt.seq and rsp.message_type in (3, 5, 7, 9, 12, 14, 50, 52, 54, 56):
                continue  # a request of the agent's own (session report...)
            self.sc.datagrams.append(data)
            self.last = (req, data)
            why = f"(request {req.hex()}, response {data.hex()})"
            expect_eq(rsp.seq, pkt.seq, f"sequence number {why}")
            expect_eq(rsp.message_type, want_type, f"message type {why}")
            if want_seid is not None:
                expect_eq((rsp.S, rsp.seid), (1, want_seid), f"S flag and header SEID {why}")
            else:
                expect_eq(rsp.S, 0, f"S flag {why}")
            return rsp.payload

    def close(self):
        self.sock.close()


class Scenario:
    def __init__(self, ctx):
        self.ctx = ctx
        self.agent = Agent(ctx, "n4_scapy")
        self.t0 = time.monotonic()
        self.smf = self.stranger = None
        self.responses = {}  # step -> message layer, or the Fail of its `.response` check
        self.raw = {}  # step -> (request, response) octets
        self.datagrams = []  # every response received, for tshark
        self.up_seid = None
        self.upf_rts = None
        self.ue = None
        ctx.at_cleanup(self.close)

    def budget_left(self):
        expect(time.monotonic() - self.t0 < MODULE_BUDGET, f"module budget of {MODULE_BUDGET}s spent")

    def close(self):
        for p in (self.smf, self.stranger):
            if p:
                p.close()
        self.agent.stop()

    # A step's `.response` check stores the response (or the failure) for the checks after it.
    def step(self, name, fn):
        try:
            expect(self.smf is not None, "the agent is not running (see n4_scapy.agent_start)")
            self.responses[name] = fn()
            self.raw[name] = self.smf.last if name != "not_associated" else self.stranger.last
        except Exception as e:
            self.responses[name] = Fail(f"no usable response (see {name}.response)")
            raise

    def response(self, name):
        r = self.responses.get(name)
        if r is None:
            raise Fail(f"{name}: request never sent")
        if isinstance(r, Fail):
            raise r
        return r


# ---------------------------------------------------------------- the steps


def start(sc, _ctx):
    sc.agent.start()
    sc.smf = Peer(sc, SMF_IP)
    sc.stranger = Peer(sc, STRANGER_IP)


def assoc(sc):
    seq = sc.smf.next_seq()
    req = node_msg(seq) / PFCPAssociationSetupRequest(IE_list=[
        node_id(SMF_IP), IE_RecoveryTimeStamp(timestamp=T_SMF), IE_CPFunctionFeatures()])
    return sc.smf.exchange(req, 6)


def assoc_node_id(sc):
    n = one_ie(sc.response("assoc"), NODE_ID, "Node ID")
    expect_eq((n.id_type, n.ipv4), (0, Agent.HOST), "Node ID (type, IPv4)")


def assoc_rts(sc):
    sc.upf_rts = one_ie(sc.response("assoc"), RTS, "Recovery Time Stamp").timestamp
    expect(sc.upf_rts != 0, "Recovery Time Stamp 0")


def assoc_features(sc):
    f = one_ie(sc.response("assoc"), UPFF, "UP Function Features")
    # UEIP is in octet 7, beyond scapy's Rel-15 IE: read the raw octets.
    v = ie_value(f)
    ftup, ueip = len(v) >= 1 and v[0] & 0x10 != 0, len(v) >= 3 and v[2] & 0x04 != 0
    expect(ftup and ueip, f"UP Function Features {v.hex()}: FTUP {ftup}, UEIP {ueip}")


def heartbeat(sc):
    seq = sc.smf.next_seq()
    return sc.smf.exchange(node_msg(seq) / PFCPHeartbeatRequest(IE_list=[
        IE_RecoveryTimeStamp(timestamp=T_SMF)]), 2)


def heartbeat_rts(sc):
    got = one_ie(sc.response("heartbeat"), RTS, "Recovery Time Stamp").timestamp
    expect_eq(got, sc.upf_rts, "Recovery Time Stamp (as in the Association Setup Response)")


def establish(sc):
    seq = sc.smf.next_seq()
    req = sess_msg(0, seq) / PFCPSessionEstablishmentRequest(IE_list=establishment_ies(SMF_IP, CP_SEID))
    return sc.smf.exchange(req, 51, CP_SEID)


def establish_retransmitted(sc):
    """TS 29.244 §6.4: a retransmitted request (same sequence number) gets the same response,
    not a second session."""
    req, rsp = sc.raw["establish"]
    sc.smf.sock.sendto(req, sc.agent.addr)
    sc.smf.sock.settimeout(RECV_TIMEOUT)
    try:
        again, _ = sc.smf.sock.recvfrom(65535)
    except socket.timeout:
        raise Fail(f"no response within {RECV_TIMEOUT}s to the retransmitted {req.hex()}") from None
    expect_eq(again.hex(), rsp.hex(), "response to the retransmission (the first one's octets)")


def establish_fseid(sc):
    f = one_ie(sc.response("establish"), FSEID, "UP F-SEID")
    expect(f.seid != 0 and f.v4 == 1, f"UP F-SEID {ie_value(f).hex()}: SEID 0 or no IPv4")
    expect_eq(f.ipv4, Agent.HOST, "UP F-SEID IPv4")
    sc.up_seid = f.seid


def establish_pdr1_fteid(sc):
    pdrs = created_pdrs(sc.response("establish"))
    fteid = pdrs.get(1, (None, None))[0]
    expect(fteid is not None, f"no Created PDR with a Local F-TEID for PDR 1 (got {sorted(pdrs)})")
    expect(fteid.CH == 0 and fteid.V4 == 1 and fteid.TEID != 0,
           f"Local F-TEID {ie_value(fteid).hex()}: CH set, no IPv4 or TEID 0")
    expect_eq(fteid.ipv4, Agent.HOST, "Local F-TEID IPv4 (N3 defaults to the N4 address)")


def establish_pdr1_ue(sc):
    sc.ue = ue_ipv4(created_pdrs(sc.response("establish")), 1)


def establish_pdr2_ue(sc):
    expect_eq(ue_ipv4(created_pdrs(sc.response("establish")), 2), sc.ue, "UE IPv4 of PDR 2 (PDR 1's)")


def establish_pdr3(sc):
    pdrs = created_pdrs(sc.response("establish"))
    f1, f3 = pdrs.get(1, (None,))[0], pdrs.get(3, (None,))[0]
    expect(f1 is not None and f3 is not None, "Local F-TEIDs of PDRs 1 and 3")
    expect_eq((f3.TEID, f3.ipv4), (f1.TEID, f1.ipv4), "F-TEID of PDR 3 (CHOOSE ID 1, as PDR 1)")
    expect_eq(ue_ipv4(pdrs, 3), sc.ue, "UE IPv4 of PDR 3 (PDR 1's)")


def modify(sc, ies_):
    expect(sc.up_seid is not None, "no UP SEID from the establishment")
    seq = sc.smf.next_seq()
    return sc.smf.exchange(sess_msg(sc.up_seid, seq) / PFCPSessionModificationRequest(IE_list=ies_), 53, CP_SEID)


def update_far(sc):
    return modify(sc, [IE_UpdateFAR(IE_list=[
        IE_FAR_Id(id=2), apply_action(FORW=1), IE_UpdateForwardingParameters(IE_list=[
            IE_DestinationInterface(interface=0),  # Access
            IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=0x1234, ipv4=GNB_IP)])])])


def query_urr(sc):
    return modify(sc, [IE_QueryURR(IE_list=[IE_URR_Id(id=1)])])


def query_all(sc):
    # scapy spells the QAURR flag (PFCPSMReq-Flags bit 3) "QUARR".
    return modify(sc, [IE_PFCPSMReqFlags(QUARR=1)])


def unknown_seid(sc):
    seq = sc.smf.next_seq()
    req = sess_msg(UNKNOWN_UP_SEID, seq) / PFCPSessionModificationRequest(IE_list=[
        IE_QueryURR(IE_list=[IE_URR_Id(id=1)])])
    return sc.smf.exchange(req, 53, 0)  # §7.2.2.4.2: SEID 0 when the session is unknown


def missing_far(sc):
    seq = sc.smf.next_seq()
    req = sess_msg(0, seq) / PFCPSessionEstablishmentRequest(
        IE_list=establishment_ies(SMF_IP, CP_SEID_BAD, far_of_pdr1=9))
    return sc.smf.exchange(req, 51, CP_SEID_BAD)


def missing_far_rule(sc):
    f = one_ie(sc.response("missing_far"), FAILED_RULE, "Failed Rule ID")
    expect_eq((f.type, f.pdr_id), (0, 1), f"Failed Rule ID {ie_value(f).hex()} (type, PDR ID)")


def not_associated(sc):
    seq = sc.stranger.next_seq()
    req = sess_msg(0, seq) / PFCPSessionEstablishmentRequest(
        IE_list=establishment_ies(STRANGER_IP, CP_SEID_OFF))
    return sc.stranger.exchange(req, 51, CP_SEID_OFF)


def delete(sc):
    expect(sc.up_seid is not None, "no UP SEID from the establishment")
    seq = sc.smf.next_seq()
    return sc.smf.exchange(sess_msg(sc.up_seid, seq) / PFCPSessionDeletionRequest(), 55, CP_SEID)


def release(sc):
    seq = sc.smf.next_seq()
    return sc.smf.exchange(node_msg(seq) / PFCPAssociationReleaseRequest(IE_list=[node_id(SMF_IP)]), 10)


def after_release(sc):
    seq = sc.smf.next_seq()
    req = sess_msg(0, seq) / PFCPSessionEstablishmentRequest(IE_list=establishment_ies(SMF_IP, CP_SEID + 1))
    return sc.smf.exchange(req, 51, CP_SEID + 1)


FLAGGED = "_ws.malformed || _ws.expert.severity >= warning"


def responses_tshark(sc, ctx):
    """Every response of the agent's, dissected by tshark 4.0: nothing malformed or flagged."""
    expect(len(sc.datagrams) >= 12, f"only {len(sc.datagrams)} responses captured")
    pcap = ctx.path("n4_scapy-responses.pcap")
    write_udp_pcap(pcap, sc.datagrams, 8805, src=Agent.HOST, dst=SMF_IP)
    rows = tshark_fields(pcap, ["frame.number", "pfcp.msg_type"])
    expect_eq(len(rows), len(sc.datagrams), "frames tshark read")
    expect_eq([r[1] for r in rows], [[str(d[1])] for d in sc.datagrams], "message types tshark saw")
    flagged = tshark_fields(pcap, ["frame.number"], FLAGGED)
    bad = [sc.datagrams[int(r[0][0]) - 1].hex() for r in flagged]
    expect(not bad, f"tshark flags {len(bad)} responses (malformed or expert warning): {bad[:2]}")


def stop(sc, _ctx):
    proc = sc.agent.proc
    expect(proc is not None, "the agent was not running")
    rc = proc.poll()
    sc.close()
    err = sc.agent.stderr(100_000)
    expect("panicked" not in err, f"the agent panicked: {err[-400:]!r}")
    expect(rc is None, f"the agent exited by itself with {rc}: {err[-400:]!r}")


# ---------------------------------------------------------------- the list run.py runs

# (step, request function, [(check, function of the Scenario)]); `.response` comes first.
STEPS = [
    ("assoc", assoc, [("cause", lambda sc: expect_cause(sc.response("assoc"), 1)),
                      ("node_id", assoc_node_id), ("recovery_time_stamp", assoc_rts),
                      ("up_function_features", assoc_features)]),
    ("heartbeat", heartbeat, [("recovery_time_stamp", heartbeat_rts)]),
    ("establish", establish, [("cause", lambda sc: expect_cause(sc.response("establish"), 1)),
                              ("retransmitted", establish_retransmitted), ("up_f_seid", establish_fseid), ("pdr1_f_teid", establish_pdr1_fteid),
                              ("pdr1_ue_ip", establish_pdr1_ue), ("pdr2_ue_ip", establish_pdr2_ue),
                              ("pdr3_same_chid", establish_pdr3)]),
    ("update_far", update_far, [("cause", lambda sc: expect_cause(sc.response("update_far"), 1))]),
    ("query_urr", query_urr, [("cause", lambda sc: expect_cause(sc.response("query_urr"), 1)),
                              ("usage_report", lambda sc: usage_report_of(sc.response("query_urr"),
                                                                          UR_SMR, 1, "IMMER"))]),
    ("query_all_urrs", query_all, [("cause", lambda sc: expect_cause(sc.response("query_all_urrs"), 1)),
                                   ("usage_report", lambda sc: usage_report_of(
                                       sc.response("query_all_urrs"), UR_SMR, 1, "IMMER"))]),
    ("unknown_seid", unknown_seid, [("cause", lambda sc: expect_cause(sc.response("unknown_seid"), 65))]),
    # TS 29.244 Table 8.2.1-1: 73 is "Rule creation/modification Failure" (69 is "Mandatory IE
    # incorrect"); §7.5.3.1: the Failed Rule ID names the rule.
    ("missing_far", missing_far, [("cause", lambda sc: expect_cause(sc.response("missing_far"), 73)),
                                  ("failed_rule_id", missing_far_rule)]),
    ("not_associated", not_associated,
     [("cause", lambda sc: expect_cause(sc.response("not_associated"), 72))]),
    ("delete", delete, [("cause", lambda sc: expect_cause(sc.response("delete"), 1)),
                        ("usage_report", lambda sc: usage_report_of(sc.response("delete"), UR_SDR, 1, "TERMR"))]),
    ("release", release, [("cause", lambda sc: expect_cause(sc.response("release"), 1))]),
    ("after_release", after_release, [("cause", lambda sc: expect_cause(sc.response("after_release"), 72))]),
]


def checks(ctx):
    sc = Scenario(ctx)
    out = [("n4_scapy.agent_start", lambda c: start(sc, c))]
    for name, request, subs in STEPS:
        out.append((f"n4_scapy.{name}.response", lambda c, n=name, r=request: sc.step(n, lambda: r(sc))))
        out += [(f"n4_scapy.{name}.{sub}", lambda c, f=f: f(sc)) for sub, f in subs]
    out.append(("n4_scapy.responses_tshark", lambda c: responses_tshark(sc, c)))
    out.append(("n4_scapy.agent_stop", lambda c: stop(sc, c)))
    return out
