#!/usr/bin/env python3
"""Runs two builds of troupe_bench_savina alternately (before, after,
before, ...) and prints each workload's median items/s, its range, and the
ratio after/before: a change's effect measured in one run on one machine.

    bench/compare_builds.py BEFORE_BINARY AFTER_BINARY [--repetitions 5] [--threads 2]
        [--before-args "--metrics=off"] [--after-args ...] [--filter REGEX]

The same binary twice with other arguments compares settings (metrics on
and off, say).
"""
import argparse
import json
import shlex
import statistics
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--before-args", default="")
    ap.add_argument("--after-args", default="")
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    extra = {"before": shlex.split(args.before_args), "after": shlex.split(args.after_args)}
    if args.filter:
        for k in extra:
            extra[k].append(f"--benchmark_filter={args.filter}")
    binaries = {"before": args.before, "after": args.after}
    results = {k: {} for k in binaries}
    for _ in range(args.repetitions):
        for name, binary in binaries.items():
            out = subprocess.run([binary, f"--threads={args.threads}", "--benchmark_format=json", *extra[name]],
                                 capture_output=True, text=True, check=True).stdout
            for row in json.loads(out)["benchmarks"]:
                results[name].setdefault(row["name"].split("/")[0], []).append(row["items_per_second"])
    print(f"threads={args.threads}, {args.repetitions} runs each, alternated; M items/s: median [min-max]")
    for workload, before in results["before"].items():
        after = results["after"][workload]
        mb, ma = statistics.median(before), statistics.median(after)
        print(f"{workload:11s} before {mb / 1e6:7.2f} [{min(before) / 1e6:.2f}-{max(before) / 1e6:.2f}]"
              f"  after {ma / 1e6:7.2f} [{min(after) / 1e6:.2f}-{max(after) / 1e6:.2f}]  after/before {ma / mb:.2f}")


if __name__ == "__main__":
    main()
