#!/usr/bin/env python3
"""Plots the per-slice lines of `troupe_orders bench` (orders/s and RSS per
slice of orders ended) into a PNG with gnuplot.

    troupe_orders bench --orders 100000 --dir D > run.jsonl
    bench/plot_scale.py run.jsonl docs/scale.png
"""
import json
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    rows, summary = [], None
    with open(src) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            if "slice" in j:
                rows.append(j)
            elif "last_to_first" in j:
                summary = j
    if not rows:
        sys.exit(f"{src}: no slice lines")
    with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as d:
        for r in rows:
            d.write(f"{r['orders']} {r['orders_per_second']:.1f} {r['rss_mib']:.1f}\n")
    title = f"troupe_orders bench: {rows[-1]['orders']} orders in slices of {rows[0]['orders']}"
    if summary:
        title += f" ({summary['in_flight']} in flight; last/first slice {summary['last_to_first']:.2f})"
    script = f"""
set terminal pngcairo size 800,420 font ",10"
set output '{out}'
set title "{title}" noenhanced
set xlabel "orders ended"
set ylabel "orders/s in the slice"
set y2label "RSS (MiB)"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set key bottom right
plot '{d.name}' using 1:2 with linespoints title 'orders/s' axis x1y1, \\
     '{d.name}' using 1:3 with linespoints title 'RSS (MiB)' axis x1y2
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


if __name__ == "__main__":
    main()
