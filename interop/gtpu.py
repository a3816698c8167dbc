"""GTP-U cross-checks against implementations nobody here wrote.

a. scapy → ours: G-PDUs (with PDU Session Containers UL/DL, PPI, RQI, sequence numbers), echo,
   Error Indication, End Marker built with scapy's contrib.gtp, decoded by `upf decode`.
b. ours → tshark: testdata/gtpu/corpus (emitted by upf-wire, see crates/upf-wire/tests/corpus.rs)
   decodes in tshark with no malformed packet or expert warning, with the same type/TEID/QFI.
c. ours → scapy: the same corpus parses in scapy to the same values.
d. malformed: what the UPF must count and drop gives an `error`, exit status 2, no crash."""

import os
from common import Fail, expect, expect_eq, get_path, tshark, tshark_fields, write_udp_pcap

PORT = 2152


def scapy_cases():
    from scapy.all import IP, UDP
    from scapy.contrib.gtp import (GTP_U_Header, GTPPDUSessionContainer, GTPEchoRequest, GTPEchoResponse,
                                   IE_Recovery, GTPErrorIndication, IE_TEIDI, IE_GSNAddress)
    inner = IP(src="10.60.0.1", dst="8.8.8.8") / UDP(sport=4000, dport=53)
    return [
        ("gpdu_ul_psc", GTP_U_Header(teid=0x100, next_ex=0x85) / GTPPDUSessionContainer(type=1, QFI=5) / inner,
         {"header.teid": 0x100, "header.message_type": 255,
          "header.extensions.0.pdu_session_container.pdu_type": "Ul",
          "header.extensions.0.pdu_session_container.qfi": 5,
          "inner.src": "10.60.0.1", "inner.dst": "8.8.8.8", "inner.protocol": 17, "inner.src_port": 4000,
          "inner.dst_port": 53}),
        ("gpdu_dl_psc_ppi_rqi",
         GTP_U_Header(teid=0x01000001, next_ex=0x85) / GTPPDUSessionContainer(type=0, QFI=9, PPP=1, PPI=3, RQI=1)
         / IP(src="8.8.8.8", dst="10.60.0.1") / UDP(sport=53, dport=4000),
         {"header.extensions.0.pdu_session_container.pdu_type": "Dl",
          "header.extensions.0.pdu_session_container.qfi": 9,
          "header.extensions.0.pdu_session_container.ppi": 3,
          "header.extensions.0.pdu_session_container.rqi": True, "inner.dst": "10.60.0.1"}),
        ("gpdu_seq_no_ext", GTP_U_Header(teid=7, S=1, seq=4242) / inner,
         {"header.teid": 7, "header.s": True, "header.sequence": 4242, "inner.src_port": 4000}),
        ("echo_request", GTP_U_Header(teid=0, gtp_type=1, S=1, seq=9) / GTPEchoRequest(),
         {"header.message_type": 1, "header.sequence": 9}),
        ("echo_response", GTP_U_Header(teid=0, gtp_type=2, S=1, seq=9) / GTPEchoResponse(
            IE_list=[IE_Recovery(restart_counter=0)]), {"header.message_type": 2, "ies.recovery": 0}),
        ("error_indication", GTP_U_Header(teid=0, gtp_type=26, S=1) / GTPErrorIndication(
            IE_list=[IE_TEIDI(TEIDI=0xbad), IE_GSNAddress(length=4, ipv4_address="10.200.0.10")]),
         {"header.message_type": 26, "ies.teid_data_i": 0xbad, "ies.gtpu_peer_address": "10.200.0.10"}),
        ("end_marker", GTP_U_Header(teid=0x01000001, gtp_type=254), {"header.message_type": 254,
                                                                     "header.teid": 0x01000001}),
    ]


def check_scapy(ctx, i):
    cases = scapy_cases()

    def decode_all():
        pcap = ctx.path("gtpu-scapy.pcap")
        write_udp_pcap(pcap, [c[1] for c in cases], PORT)
        status, objs, err = ctx.upf_decode(pcap)
        expect_eq(status, 0, f"upf decode exit status ({err[-200:]})")
        expect_eq(len(objs), len(cases), "decoded frames")
        return objs

    obj = ctx.once("gtpu.scapy_capture", decode_all)[i]
    name, _, want = cases[i]
    expect("error" not in obj, f"{name}: error {obj.get('error')}")
    for path, value in want.items():
        expect_eq(get_path(obj, path), value, f"{name}: {path}")


def corpus(ctx):
    d = os.path.join(ctx.root, "testdata/gtpu/corpus")
    return [(f[:-4], bytes.fromhex(open(os.path.join(d, f)).read().strip())) for f in sorted(os.listdir(d))]


def our_view(ctx, data):
    status, objs, _ = ctx.upf_decode("--gtpu", data.hex())
    expect_eq(status, 0, "upf decode exit status")
    return objs[0]


def check_tshark(ctx, i, name, data):
    items = corpus(ctx)

    def capture():
        pcap = ctx.path("gtpu-ours.pcap")
        write_udp_pcap(pcap, [d for _, d in items], PORT)
        bad = tshark("-r", pcap, "-Y", "_ws.malformed || _ws.expert.severity >= warning")
        rows = tshark_fields(pcap, ["gtp.message", "gtp.teid", "gtp.ext_hdr.pdu_ses_con.qos_flow_id"])
        return bad, rows

    bad, rows = ctx.once("gtpu.tshark", capture)
    for line in bad.splitlines():
        expect(line.split()[0] != str(i + 1), f"tshark flags {name}: {line.strip()}")
    ours = our_view(ctx, data)
    msg, teid, qfi = rows[i]
    expect_eq(int(msg[0], 0), ours["header"]["message_type"], f"{name}: message type")
    expect_eq(int(teid[0], 0), ours["header"]["teid"], f"{name}: TEID")
    exts = ours["header"]["extensions"]
    want_qfi = [str(e["pdu_session_container"]["qfi"]) for e in exts if "pdu_session_container" in e]
    expect_eq([str(int(q, 0)) for q in qfi], want_qfi, f"{name}: QFI")


def check_scapy_parses_ours(ctx, name, data):
    from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer
    from scapy.packet import Raw
    pkt = GTP_U_Header(data)
    ours = our_view(ctx, data)
    expect_eq(pkt.teid, ours["header"]["teid"], f"{name}: TEID")
    expect_eq(pkt.gtp_type, ours["header"]["message_type"], f"{name}: type")
    psc = pkt.getlayer(GTPPDUSessionContainer)
    exts = [e["pdu_session_container"] for e in ours["header"]["extensions"] if "pdu_session_container" in e]
    if exts:
        expect(psc is not None, f"{name}: scapy sees no PDU Session Container")
        expect_eq(psc.QFI, exts[0]["qfi"], f"{name}: QFI")
        expect_eq(psc.type, 0 if exts[0]["pdu_type"] == "Dl" else 1, f"{name}: PDU type")
        if exts[0]["ppi"] is not None:
            expect_eq((psc.PPP, psc.PPI, psc.RQI), (1, exts[0]["ppi"], int(exts[0]["rqi"])), f"{name}: PPI/RQI")
    if "inner" in ours:
        from scapy.layers.inet import IP
        ip = pkt.getlayer(IP)
        expect(ip is not None, f"{name}: scapy finds no inner IP")
        expect_eq(ip.src, ours["inner"]["src"], f"{name}: inner source")
    expect(pkt.getlayer(Raw) is None or ours["header"]["message_type"] != 255 or "inner" in ours,
           f"{name}: scapy left unparsed octets")


MALFORMED = [
    ("empty", ""),
    ("short_header", "30ff00"),
    ("version_2", "50ff000400000001"),
    ("length_past_datagram", "30ff00ff00000001450000"),
    ("extension_length_zero", "34ff000800000001000000850000"),
    ("unknown_comprehension_required", "34ff000800000001000000c101000000"),
]


def check_malformed(ctx, hexdata):
    status, objs, _ = ctx.upf_decode("--gtpu", hexdata or "00")
    expect_eq(status, 2, "exit status")
    expect("error" in objs[0], f"no error member: {objs[0]}")


def checks(ctx):
    out = [(f"gtpu.scapy_to_ours.{c[0]}", lambda c, i=i: check_scapy(c, i)) for i, c in enumerate(scapy_cases())]
    items = corpus(ctx)
    expect(len(items) >= 9, "GTP-U corpus missing")
    out += [(f"gtpu.ours_to_tshark.{n}", lambda c, i=i, n=n, d=d: check_tshark(c, i, n, d))
            for i, (n, d) in enumerate(items)]
    out += [(f"gtpu.ours_to_scapy.{n}", lambda c, n=n, d=d: check_scapy_parses_ours(c, n, d)) for n, d in items]
    out += [(f"gtpu.malformed.{n}", lambda c, h=h: check_malformed(c, h)) for n, h in MALFORMED]
    return out
