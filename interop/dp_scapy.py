"""The data path of the running daemon (`upf run`), driven by scapy and checked by tshark.

In a network namespace of its own (created and removed here; root needed), this module starts
`upf run` with N3 on a UDP socket (127.0.0.1:2152) and N6 on a TUN device (`upf0`, the UE
pool routed into it), then plays an SMF with scapy's PFCP layer (Association Setup, one
Session Establishment with an uplink PDR on a UPF-chosen F-TEID, a downlink PDR on the UE
address, FARs, a QER with QFI 9 and a URR), a gNB with scapy's GTP-U layers (G-PDUs with a
PDU Session Container) and a data network server on 198.51.100.1:

- uplink: a G-PDU from the gNB comes out of N6 as the inner packet (TTL decremented), to the
  DN server's UDP socket;
- downlink: the server's reply to the UE comes back to the gNB as a G-PDU with the FAR's
  TEID and a downlink PDU Session Container with QFI 9;
- GTP-U Echo Request answered; a G-PDU to an unknown TEID answered by an Error Indication;
- Session Deletion reports the URR's volume to the octet (what was sent both ways);
- `upf show counters` agrees;
- tshark, capturing on the namespace's loopback, dissects every PFCP and GTP-U packet of the
  run with no expert warning.

The part that runs inside the namespace is this file run as a script (`--inner`); it prints
one JSON object {check: null or why-it-failed}, which `checks()` turns into checks.
"""

import json
import os
import shutil
import subprocess
import sys
import time

NS = f"upf-dp-{os.getpid()}"
HERE = os.path.dirname(os.path.abspath(__file__))
UPF_N4, SMF_IP, GNB_IP, UPF_N3 = "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.1"
DN_IP, DN_PORT, UE_IP, UE_PORT = "198.51.100.1", 9000, "10.60.0.10", 40000
DL_TEID, CP_SEID, QFI = 0x00ABCDEF, 0x77, 9
CHECKS = ["start", "association", "establishment", "uplink", "uplink_ttl", "downlink",
          "downlink_teid", "downlink_psc_qfi", "echo", "error_indication", "usage_report",
          "show_counters", "tshark_capture", "tshark_no_warnings"]


# ---------------------------------------------------------------- outside: the checks


def checks(ctx):
    state = {}

    def run_inner(_ctx):
        if os.geteuid() != 0:
            raise Exception("needs root (network namespace, TUN device)")
        if not shutil.which("tshark"):
            raise Exception("tshark not installed (scripts/setup.sh installs it)")
        subprocess.run(["ip", "netns", "add", NS], check=True)
        try:
            out = subprocess.run(
                ["ip", "netns", "exec", NS, sys.executable, os.path.abspath(__file__), "--inner",
                 os.path.abspath(ctx.upf), ctx.path("dp")],
                capture_output=True, text=True, timeout=90)
        finally:
            subprocess.run(["ip", "netns", "del", NS], check=False)
        lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
        if not lines:
            raise Exception(f"inner run printed no result (rc {out.returncode}): {out.stderr[-1500:]}")
        state.update(json.loads(lines[-1]))

    def one(name):
        def check(_ctx):
            if name not in state:
                raise Exception("the namespace run did not get this far")
            if state[name] is not None:
                raise Exception(state[name])
        return check

    return [("dp_scapy.run", run_inner)] + [(f"dp_scapy.{n}", one(n)) for n in CHECKS]


# ---------------------------------------------------------------- inside the namespace


def inner(upf, workdir):
    from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer, GTPEchoRequest
    from scapy.contrib.pfcp import (PFCP, IE_ApplyAction, IE_CreateFAR, IE_CreatePDR, IE_CreateQER,
                                    IE_CreateURR, IE_DestinationInterface, IE_FAR_Id, IE_FSEID,
                                    IE_FTEID, IE_ForwardingParameters, IE_GateStatus,
                                    IE_MeasurementMethod, IE_NodeId, IE_OuterHeaderCreation,
                                    IE_OuterHeaderRemoval, IE_PDI, IE_PDR_Id, IE_Precedence, IE_QER_Id,
                                    IE_QFI, IE_RecoveryTimeStamp, IE_ReportingTriggers,
                                    IE_SourceInterface, IE_UE_IP_Address, IE_URR_Id,
                                    PFCPAssociationSetupRequest, PFCPSessionDeletionRequest,
                                    PFCPSessionEstablishmentRequest, PFCPHeartbeatResponse)
    from scapy.layers.inet import IP, UDP
    import socket

    res = {}
    os.makedirs(workdir, exist_ok=True)
    pcap = os.path.join(workdir, "dp.pcap")

    def sh(*a):
        subprocess.run(list(a), check=True, capture_output=True)

    def step(name, fn):
        try:
            r = fn()
            res[name] = None
            return r
        except Exception as e:  # noqa: BLE001 - reported per check
            res[name] = f"{type(e).__name__}: {e}"
            return None

    sh("ip", "link", "set", "lo", "up")
    sh("ip", "addr", "add", f"{DN_IP}/32", "dev", "lo")
    sh("ip", "addr", "add", f"{GNB_IP}/8", "dev", "lo")
    cap = subprocess.Popen(["tshark", "-q", "-i", "lo", "-w", pcap, "-f", "udp port 8805 or udp port 2152"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # tshark says "Capturing on 'Loopback: lo'" once it captures.
    t0 = time.monotonic()
    while not os.path.exists(pcap) and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    time.sleep(0.5)
    log = open(os.path.join(workdir, "upf.log"), "wb")
    proc = subprocess.Popen([upf, "run", "--n4", f"{UPF_N4}:8805", "--n3", UPF_N3, "--n6", "tun",
                             "--admin", "127.0.0.1:9464", "--ue-pool", "10.60.0.0/16"],
                            stdout=subprocess.DEVNULL, stderr=log)
    smf = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    smf.bind((SMF_IP, 0))
    smf.settimeout(2.0)
    gnb = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    gnb.bind((GNB_IP, 2152))
    gnb.settimeout(2.0)
    dn = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dn.bind((DN_IP, DN_PORT))
    dn.settimeout(2.0)
    seq = [0x300]

    def pfcp(msg, seid=None):
        seq[0] += 1
        hdr = PFCP(S=1, seid=seid, seq=seq[0]) if seid is not None else PFCP(S=0, seq=seq[0])
        smf.sendto(bytes(hdr / msg), (UPF_N4, 8805))
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            data, _ = smf.recvfrom(65535)
            r = PFCP(data)
            if r.message_type == 1:  # the UPF's heartbeat
                smf.sendto(bytes(PFCP(S=0, seq=r.seq) / PFCPHeartbeatResponse(
                    IE_list=[IE_RecoveryTimeStamp(timestamp=3913056000)])), (UPF_N4, 8805))
                continue
            if r.seq == seq[0]:
                return r
        raise Exception("no PFCP response")

    def cause(r):
        return [ie.cause for ie in r.payload.IE_list if ie.ietype == 19][0]

    def start():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise Exception(f"upf exited {proc.returncode}")
            try:
                return pfcp(PFCPAssociationSetupRequest(IE_list=[
                    IE_NodeId(id_type=0, ipv4=SMF_IP), IE_RecoveryTimeStamp(timestamp=3913056000)]))
            except (socket.timeout, ConnectionRefusedError):
                continue
        raise Exception("upf did not answer on N4 within 10 s")

    assoc = step("start", start)

    def association():
        if assoc is None or cause(assoc) != 1:
            raise Exception("Association Setup not accepted")

    step("association", association)

    def establish():
        aa = lambda **f: IE_ApplyAction(extra_data=b"\x00", **f)  # noqa: E731 - 2-octet form
        ul = IE_CreatePDR(IE_list=[
            IE_PDR_Id(id=1), IE_Precedence(precedence=100),
            IE_PDI(IE_list=[IE_SourceInterface(interface=0), IE_FTEID(CH=1, V4=1),
                            IE_UE_IP_Address(V4=1, ipv4=UE_IP), IE_QFI(QFI=QFI)]),
            IE_OuterHeaderRemoval(header=0), IE_FAR_Id(id=1), IE_QER_Id(id=1), IE_URR_Id(id=1)])
        dl = IE_CreatePDR(IE_list=[
            IE_PDR_Id(id=2), IE_Precedence(precedence=100),
            IE_PDI(IE_list=[IE_SourceInterface(interface=1), IE_UE_IP_Address(SD=1, V4=1, ipv4=UE_IP)]),
            IE_FAR_Id(id=2), IE_QER_Id(id=1), IE_URR_Id(id=1)])
        far_ul = IE_CreateFAR(IE_list=[IE_FAR_Id(id=1), aa(FORW=1), IE_ForwardingParameters(
            IE_list=[IE_DestinationInterface(interface=1)])])
        far_dl = IE_CreateFAR(IE_list=[IE_FAR_Id(id=2), aa(FORW=1), IE_ForwardingParameters(IE_list=[
            IE_DestinationInterface(interface=0),
            IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=DL_TEID, ipv4=GNB_IP)])])
        qer = IE_CreateQER(IE_list=[IE_QER_Id(id=1), IE_GateStatus(ul=0, dl=0), IE_QFI(QFI=QFI)])
        urr = IE_CreateURR(IE_list=[IE_URR_Id(id=1), IE_MeasurementMethod(VOLUM=1),
                                    IE_ReportingTriggers()])
        r = pfcp(PFCPSessionEstablishmentRequest(IE_list=[
            IE_NodeId(id_type=0, ipv4=SMF_IP), IE_FSEID(v4=1, seid=CP_SEID, ipv4=SMF_IP),
            ul, dl, far_ul, far_dl, qer, urr]), seid=0)
        if cause(r) != 1:
            raise Exception(f"cause {cause(r)}")
        up_seid = [ie.seid for ie in r.payload.IE_list if ie.ietype == 57][0]
        created = [ie for ie in r.payload.IE_list if ie.ietype == 8][0]
        fteid = [ie for ie in created.IE_list if ie.ietype == 21][0]
        return up_seid, fteid.TEID, fteid.ipv4

    est = step("establishment", establish)
    ul_payload, dl_payload = b"uplink through upf " * 3, b"downlink back to the ue " * 2
    ul_inner = IP(src=UE_IP, dst=DN_IP, ttl=64) / UDP(sport=UE_PORT, dport=DN_PORT) / ul_payload
    dl_len = len(IP() / UDP() / dl_payload)

    dn.setsockopt(socket.IPPROTO_IP, 12, 1)  # IP_RECVTTL: the TTL the packet arrived with
    seen = {}

    def uplink():
        _, teid, n3 = est
        g = (GTP_U_Header(teid=teid, next_ex=0x85) /
             GTPPDUSessionContainer(type=1, QFI=QFI) / ul_inner)
        gnb.sendto(bytes(g), (n3, 2152))
        data, anc, _, src = dn.recvmsg(65535, 64)
        seen["ttl"] = [int.from_bytes(d[:4], sys.byteorder) for lvl, t, d in anc if t == 2]
        if data != ul_payload or src != (UE_IP, UE_PORT):
            raise Exception(f"DN got {data!r} from {src}")

    step("uplink", uplink)

    def uplink_ttl():
        # N6 is a router hop: TTL 64 from the UE, 63 out of the TUN, delivered locally as is.
        if seen.get("ttl") != [63]:
            raise Exception(f"TTL at the DN {seen.get('ttl')}, want [63]")

    step("uplink_ttl", uplink_ttl)
    reply = {}

    def downlink():
        dn.sendto(dl_payload, (UE_IP, UE_PORT))
        data, src = gnb.recvfrom(65535)
        reply["pkt"] = GTP_U_Header(data)
        inner = reply["pkt"][IP]
        if bytes(inner[UDP].payload) != dl_payload or inner.dst != UE_IP or inner.src != DN_IP:
            raise Exception(f"gNB got {reply['pkt'].summary()}")

    step("downlink", downlink)

    def downlink_teid():
        if reply["pkt"].teid != DL_TEID:
            raise Exception(f"TEID {reply['pkt'].teid:#x}")

    step("downlink_teid", downlink_teid)

    def downlink_psc():
        psc = reply["pkt"][GTPPDUSessionContainer]
        if psc.type != 0 or psc.QFI != QFI:
            raise Exception(f"PSC type {psc.type} QFI {psc.QFI}")

    step("downlink_psc_qfi", downlink_psc)

    def echo():
        gnb.sendto(bytes(GTP_U_Header(gtp_type=1, S=1, seq=7) / GTPEchoRequest()), (UPF_N3, 2152))
        r = GTP_U_Header(gnb.recvfrom(65535)[0])
        if r.gtp_type != 2 or r.seq != 7:
            raise Exception(f"got {r.summary()}")

    step("echo", echo)

    def error_indication():
        gnb.sendto(bytes(GTP_U_Header(teid=0x0BAD0BAD) / ul_inner), (UPF_N3, 2152))
        r = GTP_U_Header(gnb.recvfrom(65535)[0])
        if r.gtp_type != 26:
            raise Exception(f"got {r.summary()}")

    step("error_indication", error_indication)

    def usage():
        up_seid = est[0]
        r = pfcp(PFCPSessionDeletionRequest(IE_list=[]), seid=up_seid)
        if cause(r) != 1:
            raise Exception(f"cause {cause(r)}")
        rep = [ie for ie in r.payload.IE_list if ie.ietype == 79]
        vol = [ie for u in rep for ie in u.IE_list if ie.ietype == 66]
        if not vol:
            raise Exception("no Volume Measurement in the deletion response")
        v = vol[0]
        want_ul, want_dl = len(ul_inner), dl_len
        if (v.uplink, v.downlink, v.total) != (want_ul, want_dl, want_ul + want_dl):
            raise Exception(f"volume ul {v.uplink} dl {v.downlink} total {v.total}, "
                            f"want {want_ul} {want_dl} {want_ul + want_dl}")

    step("usage_report", usage)

    def show():
        out = subprocess.run([upf, "show", "counters"], capture_output=True, text=True, timeout=5)
        c = json.loads(out.stdout)
        # Uplink G-PDU + echo + unknown TEID on N3; one reply on N6.
        if c["rx_packets"]["n3"] != 3 or c["rx_packets"]["n6"] != 1:
            raise Exception(f"rx {c['rx_packets']}")
        if c["tx_packets"]["n6"] != 1 or c["tx_packets"]["n3"] != 3 or not c["balanced"]:
            raise Exception(f"tx {c['tx_packets']} balanced {c['balanced']}")

    step("show_counters", show)
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
    time.sleep(0.5)
    cap.terminate()
    cap.wait(timeout=10)

    def tshark_count():
        out = subprocess.run(["tshark", "-r", pcap, "-d", "udp.port==2152,gtp", "-Y", "pfcp || gtp"],
                             capture_output=True, text=True, timeout=30)
        n = len(out.stdout.splitlines())
        # Association Setup ×2, Establishment ×2, Deletion ×2, uplink, downlink, echo ×2,
        # unknown TEID + Error Indication, and the Association Update at shutdown.
        if n < 12:
            raise Exception(f"{n} PFCP/GTP packets captured: {out.stdout[-800:]}")

    step("tshark_capture", tshark_count)

    def tshark_clean():
        out = subprocess.run(["tshark", "-r", pcap, "-d", "udp.port==2152,gtp",
                              "-Y", "_ws.malformed || _ws.expert.severity >= warning"],
                             capture_output=True, text=True, timeout=30)
        if out.stdout.strip():
            raise Exception(out.stdout[-800:])

    step("tshark_no_warnings", tshark_clean)
    print(json.dumps(res))


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--inner":
    inner(sys.argv[2], sys.argv[3])
