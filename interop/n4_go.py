"""The N4 agent (`upf run --n4`) against an SMF written in Go on github.com/wmnsk/go-pfcp v0.0.24
(interop/go-smf/, go.mod and go.sum pin it).

The client is built into target/go-smf (GOFLAGS=-mod=mod: modules come from the module cache
or the proxy). This module starts `upf run --n4 127.0.0.1:PORT`, waits for it to answer a
Heartbeat, runs `go-smf -upf 127.0.0.1:PORT` (Node ID FQDN "smf.example" from 127.0.0.2; the
never-associated peer is 127.0.0.6) and turns each line it prints, `ok NAME` or
`FAIL NAME: why`, into the check n4_go.NAME. The scenario is the one of n4_scapy.py, less the
QAURR query; CHECKS below lists the names go-smf prints, in order. The agent is stopped by the
last check and, whatever happens, at cleanup.
"""

import glob
import os
import shutil
import subprocess

from common import Agent, Fail, expect, expect_eq, run

BUILD_TIMEOUT = 45
RUN_TIMEOUT = 35  # go-smf bounds itself at 30 s (-deadline); every receive at 2 s (-timeout)

CHECKS = [
    "assoc.response", "assoc.cause", "assoc.node_id", "assoc.recovery_time_stamp",
    "assoc.up_function_features",
    "heartbeat.response", "heartbeat.recovery_time_stamp",
    "establish.response", "establish.cause", "establish.up_f_seid", "establish.pdr1_f_teid",
    "establish.pdr1_ue_ip", "establish.pdr2_ue_ip", "establish.pdr3_same_chid",
    "update_far.response", "update_far.cause",
    "query_urr.response", "query_urr.cause", "query_urr.usage_report",
    "periodic_urr.response", "periodic_urr.cause",
    "session_report.request", "session_report.report_type", "session_report.usage_report",
    "session_report.answered",
    "unknown_seid.response", "unknown_seid.cause",
    "missing_far.response", "missing_far.cause", "missing_far.failed_rule_id",
    "not_associated.response", "not_associated.cause",
    "delete.response", "delete.cause", "delete.usage_report",
    "release.response", "release.cause",
]


def go_tool():
    """The `go` command: on PATH, else where the Go tarball or Debian's golang-1.xx put it."""
    for cand in [shutil.which("go"), "/usr/local/go/bin/go", *sorted(glob.glob("/usr/lib/go-1.*/bin/go"))[::-1]]:
        if cand and os.access(cand, os.X_OK):
            return cand
    raise Fail("no `go` on this machine (scripts/setup.sh installs it)")


def build(ctx):
    src = os.path.join(ctx.root, "interop", "go-smf")
    out = os.path.join(ctx.root, "target", "go-smf")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local", CGO_ENABLED="0")
    try:
        p = subprocess.run([go_tool(), "build", "-o", out, "."], cwd=src, env=env,
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Fail(f"go build took over {BUILD_TIMEOUT}s") from None
    expect(p.returncode == 0, f"go build: exit {p.returncode}: {p.stderr[-600:]}")
    return out


class GoRun:
    def __init__(self, ctx):
        self.ctx = ctx
        self.agent = Agent(ctx, "n4_go")

    def start(self):
        self.ctx.once("go-smf build", lambda: build(self.ctx))
        self.agent.start()

    def results(self):
        """{NAME: None (ok) or why}, the order seen, the exit status and the raw output."""
        return self.ctx.once("go-smf run", self._run)

    def _run(self):
        binary = self.ctx.once("go-smf build", lambda: build(self.ctx))
        proc = self.agent.proc
        expect(proc is not None and proc.poll() is None, "the agent is not running (see n4_go.agent_start)")
        host, port = self.agent.addr
        p = run([binary, "-upf", f"{host}:{port}", "-timeout", "2s", "-deadline", "30s"], timeout=RUN_TIMEOUT)
        found, order = {}, []
        for line in p.stdout.splitlines():
            if line.startswith("ok "):
                name, why = line[3:].strip(), None
            elif line.startswith("FAIL "):
                name, _, why = line[5:].partition(": ")
                why = why or "failed"
            else:
                continue
            found[name] = why
            order.append(name)
        return found, order, p.returncode, p.stdout + p.stderr

    def check(self, name):
        found, _, _, out = self.results()
        expect(name in found, f"go-smf printed no line for {name}: {out[-400:]!r}")
        if found[name] is not None:
            raise Fail(found[name])

    def all_reported(self):
        found, order, rc, out = self.results()
        expect_eq(order, CHECKS, "the checks go-smf printed, in order")
        failed = [n for n, why in found.items() if why is not None]
        expect_eq(rc, 1 if failed else 0, f"go-smf exit status ({len(failed)} failed)")

    def stop(self):
        proc = self.agent.proc
        expect(proc is not None, "the agent was not running")
        rc = proc.poll()
        self.agent.stop()
        err = self.agent.stderr(100_000)
        expect("panicked" not in err, f"the agent panicked: {err[-400:]!r}")
        expect(rc is None, f"the agent exited by itself with {rc}: {err[-400:]!r}")


def checks(ctx):
    g = GoRun(ctx)
    out = [("n4_go.build", lambda c: c.once("go-smf build", lambda: build(c))),
           ("n4_go.agent_start", lambda c: g.start())]
    out += [(f"n4_go.{n}", lambda c, n=n: g.check(n)) for n in CHECKS]
    out.append(("n4_go.all_reported", lambda c: g.all_reported()))
    out.append(("n4_go.agent_stop", lambda c: g.stop()))
    return out
