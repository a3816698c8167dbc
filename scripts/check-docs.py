#!/usr/bin/env python3
"""Checks the documentation's links and the results index; exits 1 naming what is wrong.

(a) Every relative Markdown link in README.md, ARCHITECTURE.md and docs/**/*.md points to a
    file or folder that exists (links to web pages and to anchors alone are not checked;
    an anchor after a path is ignored).
(b) Every folder under docs/results/ is linked from docs/results/README.md (the link may name
    the folder or a file in it).

Run from anywhere: paths are taken from the repository root (this file's parent's parent).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
INDEX = RESULTS / "README.md"

# [text](target) and ![alt](target); the target may be <bracketed> and followed by a title.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\)")
# [label]: target
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
# A code span may wrap lines but not cross a blank line.
CODE_SPAN = re.compile(r"(`+)(?:(?!\n\s*\n)[\s\S])*?\1")


def documents():
    for name in ("README.md", "ARCHITECTURE.md"):
        p = ROOT / name
        if p.is_file():
            yield p
    yield from sorted((ROOT / "docs").rglob("*.md"))


def prose(text):
    """The text without fenced code blocks and code spans (links there are not links)."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) <= {fence[0]}:
                fence = None
            out.append("")
        else:
            out.append(line)
    # Blanked, not removed, so that line numbers stay right.
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), "\n".join(out))


def targets(path):
    """(line number, target) of every link in the file."""
    text = prose(path.read_text(encoding="utf-8"))
    for rx in (INLINE, REFERENCE):
        for m in rx.finditer(text):
            t = m.group(1)
            if t.startswith("<") and t.endswith(">"):
                t = t[1:-1]
            yield text.count("\n", 0, m.start()) + 1, t


def resolve(doc, target):
    """The path a relative link names, or None for links this check leaves alone."""
    if not target or target.startswith("#") or SCHEME.match(target):
        return None
    t = target.split("#", 1)[0].split("?", 1)[0]
    if not t:
        return None
    t = re.sub(r"%20", " ", t)
    return (ROOT / t.lstrip("/")) if t.startswith("/") else (doc.parent / t)


def main():
    problems = []
    linked = set()
    for doc in documents():
        rel = doc.relative_to(ROOT)
        for line, target in targets(doc):
            p = resolve(doc, target)
            if p is None:
                continue
            if not p.exists():
                problems.append(f"{rel}:{line}: broken link: {target}")
            elif doc == INDEX:
                linked.add(p.resolve())
    if RESULTS.is_dir():
        if not INDEX.is_file():
            problems.append(f"{INDEX.relative_to(ROOT)}: missing (the index of docs/results)")
        for d in sorted(p for p in RESULTS.iterdir() if p.is_dir()):
            r = d.resolve()
            if not any(x == r or r in x.parents for x in linked):
                problems.append(
                    f"{d.relative_to(ROOT)}/: not linked from {INDEX.relative_to(ROOT)}"
                )
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check-docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check-docs: links resolve, every results folder is indexed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
