"""Helpers shared by the interop check modules (pfcp.py, gtpu.py): failing a check, running
`upf decode` and tshark, writing captures, reading JSON paths. Plain stdlib + scapy."""

import json
import logging
import os
import shutil
import subprocess
import tempfile

logging.getLogger("scapy").setLevel(logging.ERROR)


class Fail(Exception):
    """A failed check; the message says why."""


def expect(cond, why):
    if not cond:
        raise Fail(why)


def expect_eq(got, want, what):
    if got != want:
        raise Fail(f"{what}: got {got!r}, want {want!r}")


def run(cmd, timeout=60):
    """Runs a command, returns the CompletedProcess (text); a missing tool or hang is a Fail."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Fail(f"{cmd[0]}: {e}") from None


class Context:
    """What every check gets: the `upf` binary, a scratch directory, and a cache for steps
    several checks share (one `upf decode` of a capture, one tshark run...)."""

    def __init__(self, upf, root):
        self.upf = upf
        self.root = root
        self.tmp = tempfile.mkdtemp(prefix="upf-interop-")
        self._cache = {}

    def path(self, name):
        return os.path.join(self.tmp, name)

    def once(self, key, fn):
        """fn() computed once; if it failed, every check that needs it fails with its reason."""
        if key not in self._cache:
            try:
                self._cache[key] = (True, fn())
            except Exception as e:  # noqa: BLE001 - reported by each dependent check
                self._cache[key] = (False, f"{key}: {type(e).__name__}: {e}")
        ok, value = self._cache[key]
        if not ok:
            raise Fail(value)
        return value

    def upf_decode(self, *args):
        """`upf decode ARGS`: (exit status, list of JSON objects, stderr)."""
        p = run([self.upf, "decode", *args])
        try:
            objs = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
        except ValueError as e:
            raise Fail(f"upf decode printed invalid JSON ({e}): {p.stdout[:200]!r}") from None
        return p.returncode, objs, p.stderr

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def write_udp_pcap(path, payloads, port, src="192.0.2.10", dst="198.51.100.1"):
    """One IPv4/UDP packet per payload (bytes or a scapy layer), both ports `port`."""
    from scapy.all import IP, UDP, Raw, wrpcap

    pkts = []
    for p in payloads:
        body = Raw(p) if isinstance(p, (bytes, bytearray)) else p
        pkts.append(IP(src=src, dst=dst) / UDP(sport=port, dport=port) / body)
    wrpcap(path, pkts)


def get_path(obj, path):
    """obj at a dotted path ("create_pdrs.0.pdi.source_interface"); a missing step is a Fail."""
    cur = obj
    for step in path.split("."):
        if isinstance(cur, list) and step.isdigit() and int(step) < len(cur):
            cur = cur[int(step)]
        elif isinstance(cur, dict) and step in cur:
            cur = cur[step]
        else:
            raise Fail(f"{path}: no {step!r} in {json.dumps(cur)[:160]}")
    return cur


def tshark(*args):
    """tshark's stdout; a non-zero exit is a Fail."""
    p = run(["tshark", *args])
    expect(p.returncode == 0, f"tshark {' '.join(args)}: exit {p.returncode}: {p.stderr[-300:]}")
    return p.stdout


def tshark_fields(pcap, fields, display_filter=None):
    """tshark -T fields: one list of field values per frame (multiple values split on ',')."""
    args = ["-r", pcap, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    if display_filter:
        args += ["-Y", display_filter]
    for f in fields:
        args += ["-e", f]
    rows = []
    for line in tshark(*args).splitlines():
        cols = line.split("\t")
        rows.append([c.split(",") if c else [] for c in cols])
    return rows
