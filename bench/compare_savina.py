#!/usr/bin/env python3
"""Runs troupe_bench_savina and its CAF peer in one go, prints the table
(workload, troupe time, CAF time, ratio) and draws it as a PNG bar chart
with gnuplot.

    bench/compare_savina.py --build build-release [--threads 2] [--repetitions 3] [--out docs]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

WORKLOADS = ["pingpong", "counting", "threadring", "forkjoin", "spawn", "big", "chameneos"]


def run(binary, threads, repetitions, out):
    subprocess.run([binary, f"--threads={threads}", "--benchmark_format=console",
                    f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true",
                    f"--benchmark_out={out}", "--benchmark_out_format=json"],
                   check=True, stdout=sys.stderr)
    with open(out) as f:
        rows = json.load(f)["benchmarks"]
    result = {}
    for row in rows:
        if row.get("run_type") == "aggregate" and row.get("aggregate_name") != "median":
            continue
        name = row["name"].split("/")[0]
        result[name] = row
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="docs")
    ap.add_argument("--repetitions", type=int, default=3, help="runs per workload; the median is reported")
    args = ap.parse_args()

    bench = os.path.join(args.build, "bench")
    with tempfile.TemporaryDirectory() as tmp:
        troupe = run(os.path.join(bench, "troupe_bench_savina"), args.threads, args.repetitions,
                     os.path.join(tmp, "troupe.json"))
        caf = run(os.path.join(bench, "troupe_bench_savina_caf"), args.threads, args.repetitions,
                  os.path.join(tmp, "caf.json"))

    lines = ["| workload | troupe (ms) | CAF (ms) | troupe msgs/s | CAF msgs/s | ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    data = []
    for w in WORKLOADS:
        t, c = troupe[w], caf[w]
        ratio = c["real_time"] / t["real_time"]
        lines.append(f"| {w} | {t['real_time']:.0f} | {c['real_time']:.0f} | "
                     f"{t['items_per_second'] / 1e6:.2f} M | {c['items_per_second'] / 1e6:.2f} M | {ratio:.1f}x |")
        data.append((w, ratio))
    mem_t = troupe["spawn"].get("bytes_per_actor", 0)
    mem_c = caf["spawn"].get("bytes_per_actor", 0)
    lines.append("")
    lines.append(f"Memory per idle actor: troupe {mem_t:.0f} bytes, CAF {mem_c:.0f} bytes "
                 f"({args.threads} worker threads; medians of {args.repetitions} runs; "
                 f"ratio = CAF time / troupe time).")
    table = "\n".join(lines)
    print(table)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "savina.md"), "w") as f:
        f.write(table + "\n")
    dat = os.path.join(args.out, "savina.dat")
    with open(dat, "w") as f:
        for w, r in data:
            f.write(f"{w} {r:.3f}\n")
    png = os.path.join(args.out, "savina.png")
    script = f"""
set terminal pngcairo size 900,450 noenhanced font 'sans,11'
set output '{png}'
set title 'troupe vs CAF 0.17: speed-up (CAF time / troupe time), {args.threads} threads'
set style fill solid 0.8
set boxwidth 0.6
set yrange [0:*]
set ylabel 'times faster than CAF'
set grid ytics
set key off
plot '{dat}' using 0:2:xtic(1) with boxes lc rgb '#3b6ea8', \\
     3 with lines dt 2 lc rgb '#c03030' title 'target 3x', \\
     '{dat}' using 0:2:(sprintf('%.1fx', $2)) with labels offset 0,1
"""
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
        print(f"\nchart: {png}")
    except FileNotFoundError:
        print("\ngnuplot not found (scripts/setup-debian.sh --peer installs it); no chart drawn")
    os.remove(dat)


if __name__ == "__main__":
    main()
