"""Helpers shared by the interop check modules (pfcp.py, gtpu.py, n4_*.py): failing a check,
running `upf decode` and tshark, writing captures, reading JSON paths, running `upf run` as a
PFCP peer. Plain stdlib + scapy."""

import json
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time

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
        self._cleanups = []

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

    def at_cleanup(self, fn):
        """fn() runs at cleanup (even after a failed or interrupted run), before the scratch
        directory goes; an agent process a module started is stopped this way."""
        self._cleanups.append(fn)

    def cleanup(self):
        for fn in reversed(self._cleanups):
            try:
                fn()
            except Exception:  # noqa: BLE001 - cleanup goes on
                pass
        self._cleanups.clear()
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


# ---------------------------------------------------------------- `upf run` as a PFCP peer


def free_udp_port(host="127.0.0.1"):
    """A UDP port nothing is bound to right now on host."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def heartbeat_request(seq, recovery_time_stamp):
    """A PFCP Heartbeat Request, built by hand (no PFCP library needed to probe the agent)."""
    rts = (96).to_bytes(2, "big") + (4).to_bytes(2, "big") + recovery_time_stamp.to_bytes(4, "big")
    return bytes([0x20, 1]) + (4 + len(rts)).to_bytes(2, "big") + seq.to_bytes(3, "big") + b"\x00" + rts


class Agent:
    """`upf run --n4 127.0.0.1:PORT` as a subprocess: start() returns once it answers a
    Heartbeat Request (or fails with its exit status and stderr); stop() always ends it, and
    runs at ctx cleanup too. stderr goes to a file in the scratch directory."""

    HOST = "127.0.0.1"

    def __init__(self, ctx, name):
        self.ctx, self.name = ctx, name
        self.proc, self.port = None, None
        self.log = ctx.path(f"{name}-upf.stderr")
        ctx.at_cleanup(self.stop)

    @property
    def addr(self):
        return (self.HOST, self.port)

    def stderr(self, tail=600):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-tail:]
        except OSError:
            return ""

    def start(self, timeout=10.0):
        self.port = free_udp_port(self.HOST)
        # The N4 agent is what is checked here: N3 on any free UDP port, no N6 device, the admin
        # endpoint on any free port, so that nothing collides with another UPF on the host.
        cmd = [os.path.abspath(self.ctx.upf), "run", "--n4", f"{self.HOST}:{self.port}",
               "--n3-port", "0", "--n6", "none", "--admin", f"{self.HOST}:0"]
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=err, cwd=self.ctx.tmp)
        deadline = time.monotonic() + timeout
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((self.HOST, 0))
            seq = 0x7F0000
            while time.monotonic() < deadline:
                rc = self.proc.poll()
                if rc is not None:
                    raise Fail(f"`{' '.join(cmd)}` exited with {rc} before answering: {self.stderr()!r}")
                seq += 1
                probe.sendto(heartbeat_request(seq, 3913056000), self.addr)
                probe.settimeout(0.2)
                try:
                    data, src = probe.recvfrom(65535)
                except OSError:
                    continue
                if src == self.addr and len(data) >= 8 and data[1] == 2 and data[4:7] == seq.to_bytes(3, "big"):
                    return
        listening = "N4 listening" in self.stderr(10_000)
        self.stop()
        raise Fail(f"`{' '.join(cmd)}` answered no Heartbeat Request within {timeout}s "
                   f"(stderr {'says' if listening else 'lacks'} 'N4 listening': {self.stderr()!r})")

    def stop(self):
        """Ends the process (SIGTERM, then SIGKILL after 2 s); its exit status, or None."""
        p, self.proc = self.proc, None
        if p is None:
            return None
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(2)
        return p.returncode
