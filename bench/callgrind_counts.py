#!/usr/bin/env python3
"""Instructions per operation on troupe's hot paths, counted by valgrind's
callgrind (repeatable on a noisy machine): runs troupe_bench_hotpath with
COUNT and 2*COUNT operations and reports the difference per operation, so
start-up and shutdown cancel out. With --check FILE (a JSON object
{"tell": n, ...} from an earlier run) fails when a count grew by more than
--tolerance.

    bench/callgrind_counts.py --build build-release [--count 20000] [--save FILE] [--check FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

OPS = ["tell", "ask", "spawn_stop"]


def instructions(binary, op, count, tmp):
    out = os.path.join(tmp, f"cg.{op}.{count}")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, op, str(count)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        for line in f:
            m = re.match(r"summary:\s+(\d+)", line) or re.match(r"totals:\s+(\d+)", line)
            if m:
                return int(m.group(1))
    raise RuntimeError(f"no instruction total in {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--save")
    ap.add_argument("--check")
    ap.add_argument("--tolerance", type=float, default=0.05)
    args = ap.parse_args()
    binary = os.path.join(args.build, "bench", "troupe_bench_hotpath")
    counts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for op in OPS:
            one = instructions(binary, op, args.count, tmp)
            two = instructions(binary, op, 2 * args.count, tmp)
            counts[op] = round((two - one) / args.count)
            print(f"{op}: {counts[op]} instructions per operation")
    if args.save:
        with open(args.save, "w") as f:
            json.dump(counts, f, indent=1)
    if args.check:
        with open(args.check) as f:
            before = json.load(f)
        worse = [op for op in OPS if op in before and counts[op] > before[op] * (1 + args.tolerance)]
        for op in worse:
            print(f"REGRESSION {op}: {before[op]} -> {counts[op]}", file=sys.stderr)
        return 1 if worse else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
