#!/usr/bin/env python3
"""Draws the plot of `acx-allreduce-bench --plot` from its `--json` output, for a run made where
gnuplot is missing (the GPU test host has none): the same two panels, busbw and time per
operation against size, one line per mode and placement.

    scripts/plot-allreduce-json.py f32.json docs/img/allreduce-f32-h200x2.png
"""
import json
import subprocess
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot-allreduce-json.py RESULTS.json OUT.png")
    src, png = sys.argv[1], sys.argv[2]
    with open(src) as f:
        d = json.load(f)
    modes = [m for m in (d.get("mode"), d.get("baseline")) if m]
    places = ("out_of_place", "in_place")
    rows = []
    for r in d["results"]:
        vals = []
        for m in modes:
            for p in places:
                x = r.get(m, {}).get(p)
                vals += [x["busbw"], x["time_us"]] if x else ["NaN", "NaN"]
        rows.append(" ".join(str(v) for v in [r["size"]] + vals))
    g = ["$D << EOD"] + rows + ["EOD"]
    g.append("if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 1400,520 noenhanced } "
             "else { set terminal png size 1400,520 noenhanced }")
    g.append("set output '%s'" % png)
    g.append("set multiplot layout 1,2 title 'acx-allreduce-bench: all-reduce %s %s, %d ranks on %d node(s)'"
             % (d["dtype"], d["op"], d["nranks"], d["nodes"]))
    g += ["set logscale x 2", "set format x '%.0b%B'", "set xlabel 'message size (bytes)'", "set grid",
          "set key left top"]
    for panel in (0, 1):
        g.append("set ylabel 'bus bandwidth (GB/s)'\nunset logscale y" if panel == 0
                 else "set ylabel 'time (us)'\nset logscale y 10")
        plots = []
        for k, m in enumerate(modes):
            for p, name in enumerate(("out-of-place", "in-place")):
                col = 2 + (k * 2 + p) * 2 + panel
                plots.append("$D using 1:%d with linespoints title '%s %s'" % (col, m, name))
        g.append("plot " + ", ".join(plots))
    g += ["unset multiplot", "set output"]
    r = subprocess.run(["gnuplot"], input="\n".join(g) + "\n", text=True)
    if r.returncode != 0:
        sys.exit("plot-allreduce-json.py: gnuplot failed (status %d)" % r.returncode)


if __name__ == "__main__":
    main()
