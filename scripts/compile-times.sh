#!/usr/bin/env bash
# Compile times of a user's source files against troupe's headers, next to a
# reference file that includes only the third-party headers such a file
# needs (Asio, Boost.JSON, RocksDB, each used trivially): the table reads as
# "× the dependencies' own cost" on any machine.
#
#   scripts/compile-times.sh [--runs N] [--modes "-O0 -g|-O1|-O2|-fsyntax-only"] [--separate] [--out FILE]
#
# --separate compiles troupe's files with TROUPE_SEPARATE_COMPILATION (the
# reference stays as it is): what a file of a program that links
# troupe::compiled costs; the compiled code itself is built once
# (src/*.cpp) and is not in the table.
#
# Each file is compiled N times (default 3) in each mode, one compile at a
# time; the median wall time and the largest peak memory (GNU time's %M)
# are printed. Run it on a quiet machine: other compiles skew it. The
# headers each file pulls in are listed with -H into $work/<name>.includes
# (the counts are in the table).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

runs=3
modes="-O0 -g|-O1|-O2|-fsyntax-only"
out=""
separate=0
while [[ $# -gt 0 ]]; do
  case "$1" in
  --runs) runs=$2; shift 2 ;;
  --modes) modes=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --separate) separate=1; shift ;;
  *) echo "usage: $0 [--runs N] [--modes 'A|B|...'] [--separate] [--out FILE]" >&2; exit 2 ;;
  esac
done

cxx=${CXX:-g++}
work=$(mktemp -d /tmp/troupe-compile-times.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The README's first C++ snippet, as a user copies it.
awk '/^```cpp$/ {found=1; next} found && /^```/ {exit} found {print}' README.md >"$work/readme_snippet.cpp"

# The reference: the third-party headers a persistent service needs, each
# used trivially, with nothing of troupe.
cat >"$work/dependencies_only.cpp" <<'EOF'
#include <asio.hpp>
#include <boost/json.hpp>
#include <rocksdb/db.h>
#include <cstdio>
int main() {
  asio::io_context io;
  asio::steady_timer t(io, std::chrono::milliseconds(1));
  t.async_wait([](std::error_code) { std::puts("timer"); });
  io.run();
  boost::json::value v = boost::json::parse("{\"a\":1}");
  rocksdb::Options o;
  o.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  (void)rocksdb::DB::Open(o, "/nonexistent/dir", &db);
  delete db;
  return static_cast<int>(v.at("a").as_int64()) - 1;
}
EOF

files=("$work/dependencies_only.cpp" "$work/readme_snippet.cpp"
       examples/persistent_counter.cpp examples/reliable_delivery.cpp examples/payment_outbox.cpp
       examples/order_workflow/troupe_orders.cpp)
flags=(-std=c++20 -pthread -I"$root/include" -DASIO_NO_DEPRECATED -DBOOST_JSON_NO_LIB -DBOOST_CONTAINER_NO_LIB -c)

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

{
  mode_name="header-only"
  ((separate)) && mode_name="TROUPE_SEPARATE_COMPILATION"
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $($cxx --version | head -1); $runs runs each, median s (peak MB); troupe $mode_name"
  echo
  IFS='|' read -ra mode_list <<<"$modes"
  header="| file | headers |"
  rule="|---|---|"
  for m in "${mode_list[@]}"; do
    header+=" $m | × deps |"
    rule+="---|---|"
  done
  echo "$header"
  echo "$rule"
  declare -A base
  for f in "${files[@]}"; do
    name=$(basename "$f" .cpp)
    own=()
    ((separate)) && [[ "$name" != dependencies_only ]] && own=(-DTROUPE_SEPARATE_COMPILATION)
    "$cxx" "${flags[@]}" "${own[@]}" -fsyntax-only -H "$f" 2>"$work/$name.includes" >/dev/null || true
    headers=$(grep -c '^\.' "$work/$name.includes" || true)
    row="| $name | $headers |"
    for m in "${mode_list[@]}"; do
      read -ra mflags <<<"$m"
      : >"$work/times"
      peak=0
      for ((i = 0; i < runs; i++)); do
        /usr/bin/time -f "%e %M" -o "$work/one" "$cxx" "${flags[@]}" "${own[@]}" "${mflags[@]}" "$f" -o "$work/out.o"
        read -r secs kb <"$work/one"
        echo "$secs" >>"$work/times"
        ((kb > peak)) && peak=$kb
      done
      med=$(median <"$work/times")
      [[ "$name" == dependencies_only ]] && base[$m]=$med
      ratio=$(awk -v a="$med" -v b="${base[$m]}" 'BEGIN {printf "%.1f", a / b}')
      row+=" $med ($((peak / 1024))) | $ratio |"
    done
    echo "$row"
  done
} | tee ${out:+"$out"}
