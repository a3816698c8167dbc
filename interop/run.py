#!/usr/bin/env python3
"""Runs every interop cross-check of `upf` against independent implementations.

    python3 interop/run.py --upf target/debug/upf

Check modules: interop/pfcp.py, interop/n4_scapy.py and interop/n4_go.py (the N4 agent,
`upf run --n4`, against a scapy client and a go-pfcp client) and, when present,
interop/gtpu.py. Each has a function
`checks(ctx)` returning a list of (name, function) pairs; a function takes the Context (see
common.py) and raises common.Fail (or anything else) to fail. Prints `ok NAME` or
`FAIL NAME: why` per check, then `interop: N passed, M failed`; writes N to
target/interop-passed; exits 1 if any check failed.
"""

import argparse
import importlib
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODULES = ["pfcp", "gtpu", "n4_scapy", "n4_go", "dp_scapy"]
REQUIRED = {"pfcp", "n4_scapy", "n4_go", "dp_scapy"}


def load_checks(ctx):
    """(name, function) of every check; a module that fails to load is itself a failed check."""
    sys.path.insert(0, HERE)
    checks = []
    for name in MODULES:
        if name not in REQUIRED and not os.path.exists(os.path.join(HERE, f"{name}.py")):
            continue
        try:
            checks += importlib.import_module(name).checks(ctx)
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            checks.append((f"{name}.load", _raiser(e)))
    return checks


def _raiser(e):
    def fail(_ctx):
        raise e

    return fail


def run_one(ctx, name, fn):
    """True if the check passed; prints its line either way."""
    try:
        fn(ctx)
    except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
        why = str(e) or type(e).__name__
        if not isinstance(e, AssertionError) and type(e).__name__ != "Fail":
            why = f"{type(e).__name__}: {why} ({traceback.extract_tb(e.__traceback__)[-1].lineno})"
        print(f"FAIL {name}: {why}", flush=True)
        return False
    print(f"ok {name}", flush=True)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upf", required=True, help="path to the upf binary")
    ap.add_argument("--only", action="append", help="run only this module (repeatable)")
    args = ap.parse_args()
    if args.only:
        MODULES[:] = [m for m in MODULES if m in args.only]
    sys.path.insert(0, HERE)
    from common import Context

    ctx = Context(os.path.abspath(args.upf), ROOT)
    start = time.monotonic()
    try:
        results = [run_one(ctx, name, fn) for name, fn in load_checks(ctx)]
    finally:
        ctx.cleanup()
    passed, failed = results.count(True), results.count(False)
    if passed + failed == 0:
        failed = 1
        print("FAIL interop: no checks found", flush=True)
    print(f"took {time.monotonic() - start:.1f}s")
    print(f"interop: {passed} passed, {failed} failed")
    os.makedirs(os.path.join(ROOT, "target"), exist_ok=True)
    with open(os.path.join(ROOT, "target", "interop-passed"), "w") as f:
        f.write(f"{passed}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
