#!/usr/bin/env python3
"""Compile times of troupe's own sources against their dependencies' cost.

Compiles each subject (the README's first snippet, the examples, the order
workflow) and a reference file that includes only the third-party headers
such a file needs, each used trivially, at -O0 -g, -O1, -O2 and
-fsyntax-only, interleaved, several runs each; prints the median wall time,
its spread, the peak compiler memory and the time as a multiple of the
reference's in the same mode, so that the table reads the same on any
machine. With --headers, also how many headers each subject pulls in, by
origin (g++ -H).

  scripts/compile_times.py [--runs 3] [--modes O0 O1 O2 syntax] [--only NAME ...] [--headers]

Run it on a quiet machine: other builds running beside it change the times.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX = os.environ.get("CXX", "g++")
DEFINES = ["-DASIO_NO_DEPRECATED", "-DBOOST_JSON_NO_LIB", "-DBOOST_CONTAINER_NO_LIB"]
MODES = {
    "O0": ["-O0", "-g"],
    "O1": ["-O1"],
    "O2": ["-O2"],
    "syntax": ["-fsyntax-only"],
}

REFERENCE_CORE = """\
// The core's dependency alone, used trivially.
#include <asio.hpp>
int main() {
  asio::thread_pool pool(1);
  asio::post(pool, [] {});
  pool.join();
}
"""

REFERENCE_ALL = """\
// The persistent layers' dependencies, each used trivially.
#include <asio.hpp>
#include <boost/json.hpp>
#include <rocksdb/db.h>
int main() {
  asio::thread_pool pool(1);
  asio::post(pool, [] {});
  pool.join();
  boost::json::value v = boost::json::parse("{\\"a\\":1}");
  rocksdb::Options o;
  rocksdb::DB* db = nullptr;
  auto s = rocksdb::DB::Open(o, "/nonexistent/troupe-compile-times", &db);
  delete db;
  return v.is_object() && !s.ok() ? 0 : 1;
}
"""


def readme_snippet():
    text = open(os.path.join(ROOT, "README.md")).read()
    m = re.search(r"```cpp\n(.*?)```", text, re.S)
    if not m:
        sys.exit("README.md has no C++ snippet")
    return m.group(1)


def subjects(tmp):
    def written(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    ex = os.path.join(ROOT, "examples")
    # name, source, reference it is measured against
    return [
        ("reference: asio", written("reference_core.cpp", REFERENCE_CORE), None),
        ("reference: asio+json+rocksdb", written("reference_all.cpp", REFERENCE_ALL), None),
        ("README snippet", written("readme_snippet.cpp", readme_snippet()), "reference: asio"),
        ("persistent_counter.cpp", os.path.join(ex, "persistent_counter.cpp"), "reference: asio+json+rocksdb"),
        ("reliable_delivery.cpp", os.path.join(ex, "reliable_delivery.cpp"), "reference: asio+json+rocksdb"),
        ("payment_outbox.cpp", os.path.join(ex, "payment_outbox.cpp"), "reference: asio+json+rocksdb"),
        ("troupe_orders.cpp", os.path.join(ex, "order_workflow", "troupe_orders.cpp"), "reference: asio+json+rocksdb"),
    ]


def command(source, mode, out):
    cmd = [CXX, "-std=gnu++20", "-I", os.path.join(ROOT, "include")] + DEFINES + MODES[mode] + ["-c", source]
    return cmd + (["-o", out] if mode != "syntax" else [])


def timed(cmd):
    """Wall seconds and peak resident MiB of one compile (GNU time)."""
    fmt = "%e %M"
    with tempfile.NamedTemporaryFile("r") as t:
        start = time.monotonic()
        r = subprocess.run(["/usr/bin/time", "-f", fmt, "-o", t.name] + cmd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        wall = time.monotonic() - start
        if r.returncode != 0:
            sys.exit("compile failed: " + " ".join(cmd) + "\n" + r.stderr[-2000:])
        fields = t.read().split()
        return wall, int(fields[-1]) / 1024.0


def headers(source):
    """How many headers a compile opens, by origin."""
    r = subprocess.run([CXX, "-std=gnu++20", "-I", os.path.join(ROOT, "include")] + DEFINES +
                       ["-fsyntax-only", "-H", source], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    counts = {"troupe": 0, "asio": 0, "boost": 0, "rocksdb": 0, "std/other": 0}
    for line in r.stderr.splitlines():
        m = re.match(r"^\.+ (\S+)$", line)
        if not m:
            continue
        path = m.group(1)
        if "/troupe/" in path:
            counts["troupe"] += 1
        elif "/asio" in path:
            counts["asio"] += 1
        elif "/boost/" in path:
            counts["boost"] += 1
        elif "/rocksdb/" in path:
            counts["rocksdb"] += 1
        else:
            counts["std/other"] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--only", nargs="+", help="subjects whose name contains one of these (references always run)")
    ap.add_argument("--headers", action="store_true", help="also count the headers each subject opens")
    args = ap.parse_args()

    model = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = next((l.split(":", 1)[1].strip() for l in model.splitlines() if l.startswith("Model name")), "?")
    version = subprocess.run([CXX, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"CPU: {cpu}, {os.cpu_count()} CPUs; compiler: {version}; {args.runs} runs, interleaved")

    with tempfile.TemporaryDirectory() as tmp:
        subs = subjects(tmp)
        if args.only:
            subs = [s for s in subs if s[2] is None or any(o in s[0] for o in args.only)]
        results = {}  # (name, mode) -> [(wall, mib)]
        out = os.path.join(tmp, "out.o")
        for run in range(args.runs):
            for mode in args.modes:
                for name, src, _ in subs:
                    results.setdefault((name, mode), []).append(timed(command(src, mode, out)))
        print()
        print("| file | mode | median s (min–max) | peak MiB | × its reference |")
        print("|---|---|---|---|---|")
        for name, src, ref in subs:
            for mode in args.modes:
                walls = [w for w, _ in results[(name, mode)]]
                mib = max(m for _, m in results[(name, mode)])
                med = statistics.median(walls)
                ratio = ""
                if ref:
                    ratio = f"{med / statistics.median([w for w, _ in results[(ref, mode)]]):.1f}×"
                print(f"| {name} | {mode} | {med:.2f} ({min(walls):.2f}–{max(walls):.2f}) | {mib:.0f} | {ratio} |")
        if args.headers:
            print()
            print("| file | headers opened | troupe | asio | boost | rocksdb | std/other |")
            print("|---|---|---|---|---|---|---|")
            for name, src, _ in subs:
                c = headers(src)
                print(f"| {name} | {sum(c.values())} | {c['troupe']} | {c['asio']} | {c['boost']} | {c['rocksdb']} | "
                      f"{c['std/other']} |")


if __name__ == "__main__":
    main()
