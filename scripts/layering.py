#!/usr/bin/env python3
"""The layering check: every dependency between the workspace's crates must be allowed by the
table in ARCHITECTURE.md ("Layering rule"). Reads `cargo metadata`; exits 1 naming each edge
the table does not allow, each crate the table does not list, and each *(optional)* entry that
is not an optional dependency.

  scripts/layering.py              check the workspace
  scripts/layering.py --self-test  show that the check catches wrong edges
"""
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- layering:"


def read_table(text):
    """{crate: (normal, also_in_tests, optional)} from the table after the marker."""
    lines = text[text.index(MARKER):].splitlines()[1:]
    rows = {}
    for line in lines:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("crate", "") or set(cells[0]) <= set("-"):
            continue
        name = lambda c: re.findall(r"`([^`]+)`", c)
        optional = set(re.findall(r"`([^`]+)`\s*\*\(optional\)\*", cells[1]))
        (crate,) = name(cells[0])
        rows[crate] = (set(name(cells[1])), set(name(cells[2])), optional)
    return rows


def edges(metadata):
    """(crate, dependency, kind, optional) for every dependency on a workspace crate."""
    ours = {p["name"] for p in metadata["packages"]}
    for p in metadata["packages"]:
        for d in p["dependencies"]:
            if d["name"] in ours:
                yield p["name"], d["name"], d["kind"] or "normal", d.get("optional", False)


def violations(table, metadata):
    found = []
    for p in metadata["packages"]:
        if p["name"] not in table:
            found.append(f"{p['name']}: not in ARCHITECTURE.md's layering table")
    for crate, dep, kind, optional in edges(metadata):
        if crate not in table:
            continue
        normal, tests, must_be_optional = table[crate]
        allowed = normal | tests if kind == "dev" else normal
        if dep not in allowed:
            where = "tests and benches" if kind == "dev" else f"{kind} dependencies"
            found.append(f"{crate} -> {dep}: not allowed in {where} by the layering table")
        elif kind != "dev" and dep in must_be_optional and not optional:
            found.append(f"{crate} -> {dep}: must be an optional dependency (behind a feature)")
    return found


def metadata():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def self_test(table, meta):
    """The check passes on the workspace as it is and fails on each deliberately wrong edge."""
    assert not violations(table, meta), "the workspace itself must pass first"
    wire = next(p for p in meta["packages"] if p["name"] == "upf-wire")
    io = next(p for p in meta["packages"] if p["name"] == "upf-io")
    cases = [
        ("a codec depending on the agent", wire, {"name": "upf-n4", "kind": None}),
        ("I/O depending on the pipeline", io, {"name": "upf-dataplane", "kind": None}),
        ("I/O's tests using the runtime above it", io, {"name": "upf-runtime", "kind": "dev"}),
    ]
    for what, package, dep in cases:
        package["dependencies"].append(dep)
        found = violations(table, meta)
        package["dependencies"].pop()
        assert found, f"the check missed {what}"
        print(f"caught {what}: {found[0]}")
    optional = {c: o for c, (_, _, o) in table.items() if o}
    for crate, deps in optional.items():
        p = next(p for p in meta["packages"] if p["name"] == crate)
        for d in p["dependencies"]:
            if d["name"] in deps and d["kind"] is None:
                d["optional"] = False
                found = violations(table, meta)
                d["optional"] = True
                assert found, f"the check missed a required {crate} -> {d['name']}"
                print(f"caught a required optional edge: {found[0]}")
    meta["packages"].append({"name": "upf-new", "dependencies": []})
    found = violations(table, meta)
    meta["packages"].pop()
    assert found, "the check missed a crate missing from the table"
    print(f"caught a crate the table does not list: {found[0]}")


def main():
    table = read_table((ROOT / "ARCHITECTURE.md").read_text())
    meta = metadata()
    if sys.argv[1:] == ["--self-test"]:
        self_test(table, meta)
        return 0
    found = violations(table, meta)
    for f in found:
        print(f"layering: {f}", file=sys.stderr)
    if not found:
        print(f"layering: {sum(1 for _ in edges(meta))} dependencies between "
              f"{len(meta['packages'])} crates, all allowed")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
