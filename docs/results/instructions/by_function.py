#!/usr/bin/env python3
"""Instructions a packet under Pipeline::process, by the innermost function of ours that
each instruction was inlined from.

    by_function.py CALLGRIND_OUT PACKETS BINARY

CALLGRIND_OUT: from `valgrind --tool=callgrind --dump-instr=yes
--toggle-collect='*Pipeline::process*'`; PACKETS: the packets the pipeline processed in that
run; BINARY: the profiled binary (its debug info maps addresses to inlined functions).
"""
import collections
import subprocess
import sys


def self_cost(path):
    """Self cost (Ir) per instruction address; call lines' inclusive costs are skipped."""
    cost = collections.Counter()
    addr, skip = 0, False
    for line in open(path):
        if line.startswith('calls='):
            skip = True
            continue
        if not line or not (line[0].isdigit() or line[0] in '+-*'):
            continue
        t = line.split()
        if len(t) < 3:
            continue
        a = t[0]
        try:
            addr = int(a, 16) if a.startswith('0x') else addr if a == '*' else addr + int(a)
        except ValueError:
            continue
        if skip:
            skip = False
            continue
        cost[addr] += int(t[2])
    return cost


def main():
    out, packets, binary = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    cost = {a: c / packets for a, c in self_cost(out).items() if c}
    addrs = sorted(cost)
    lines = subprocess.run(['addr2line', '-f', '-C', '-i', '-a', '-e', binary] + [hex(a) for a in addrs],
                           capture_output=True, text=True, check=True).stdout.split('\n')
    per, cur, frames = collections.Counter(), None, []

    def flush():
        if cur is not None:
            own = next((f for f, loc in frames if '/crates/' in loc), 'library')
            per[own] += cost[cur]

    it = iter(lines)
    for line in it:
        if line.startswith('0x'):
            flush()
            cur, frames = int(line, 16), []
        elif line:
            frames.append((line, next(it, '')))
    flush()
    print(f'{sum(per.values()):.1f} instructions a packet')
    for f, c in per.most_common(40):
        print(f'{c:8.1f}  {f}')


if __name__ == '__main__':
    main()
