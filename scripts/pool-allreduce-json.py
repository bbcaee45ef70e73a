#!/usr/bin/env python3
"""Pools the rounds of several `acx-allreduce-bench --compare -r R --json` runs, and sets them beside
the comparison's noise floor: runs of a mode against itself (`--mode nccl --baseline nccl`).

On a noisy path (loopback sockets between simulated nodes) one run decides nothing: each run's
communicators settle on their own connections and threads, so its rounds share a shift that the
next run does not. Pool the rounds of many short runs, interleaved with as many runs of raw NCCL
against itself, and ask whether acx against raw NCCL differs from raw NCCL against itself.

    scripts/pool-allreduce-json.py --ab 'res/*-AB/mb-sim2-large.json' --aa 'res/*-AA/mb-sim2-large.json'

Per size and placement it prints, for each group, the number of runs and rounds, the median round
ratio (mode busbw / baseline busbw: > 1, the first mode is faster), its quartiles and range, and
for sizes up to --us-below bytes the median time difference per operation (first mode minus
baseline, microseconds, estimated per round from the round's ratio and the run's baseline time);
then a two-sided Mann-Whitney p-value (normal approximation, ties averaged) for "the AB rounds and
the AA rounds come from one distribution". Needs the per-round ratios (`ratio_rounds`) that the
benchmark writes since session 20; older files with two rounds are read from ratio_min/ratio_max.
"""
import argparse
import glob
import json
import math
import statistics
import sys

PLACES = ("out_of_place", "in_place")


def rounds_of(row, place):
    rr = row.get("ratio_rounds", {}).get(place)
    if rr:
        return list(rr)
    lo, hi = row.get("ratio_min", {}).get(place), row.get("ratio_max", {}).get(place)
    if lo is None or hi is None:
        return [row["ratio"][place]]
    return [lo, hi] if lo != hi else [lo]


def load(patterns):
    """{(size, place): {"runs": [median per run], "q": [round ratios], "dt": [us per round]}}"""
    out, files = {}, []
    for pat in patterns:
        hits = sorted(glob.glob(pat))
        if not hits:
            sys.exit(f"pool-allreduce-json: no file matches '{pat}'")
        files += hits
    for path in files:
        with open(path) as f:
            d = json.load(f)
        base = d.get("baseline")
        if not base:
            sys.exit(f"pool-allreduce-json: {path} is not a --compare run (no baseline)")
        for row in d["results"]:
            for p in PLACES:
                q = rounds_of(row, p)
                tb = row[base][p]["time_us"]
                e = out.setdefault((row["size"], p), {"runs": [], "q": [], "dt": []})
                e["runs"].append(statistics.median(q))
                e["q"] += q
                e["dt"] += [tb * (1.0 / x - 1.0) for x in q if x > 0]
    return out, len(files)


def quartiles(v):
    s = sorted(v)
    return s[len(s) // 4], s[(3 * len(s)) // 4]


def mann_whitney_p(a, b):
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return float("nan")
    allv = sorted([(x, 0) for x in a] + [(x, 1) for x in b])
    rank_sum, i = 0.0, 0
    while i < len(allv):
        j = i
        while j < len(allv) and allv[j][0] == allv[i][0]:
            j += 1
        avg = (i + j + 1) / 2.0  # ranks i+1 .. j
        rank_sum += avg * sum(1 for k in range(i, j) if allv[k][1] == 0)
        i = j
    u = rank_sum - n1 * (n1 + 1) / 2.0
    sd = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12.0)
    if sd == 0:
        return 1.0
    z = (u - n1 * n2 / 2.0) / sd
    return math.erfc(abs(z) / math.sqrt(2.0))


def size_name(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def describe(e, small):
    lo, hi = quartiles(e["q"])
    s = (f"{len(e['runs']):>2} runs {len(e['q']):>3} rounds  {statistics.median(e['q']):.3f} "
         f"[{lo:.3f}-{hi:.3f}] ({min(e['q']):.3f}-{max(e['q']):.3f})")
    if small:
        s += f"  {statistics.median(e['dt']):+6.1f} us"
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ab", action="append", required=True, help="glob of the runs to judge (repeatable)")
    ap.add_argument("--aa", action="append", default=[], help="glob of the noise-floor runs (repeatable)")
    ap.add_argument("--us-below", type=int, default=65536,
                    help="print time differences up to this size in bytes (default 65536)")
    a = ap.parse_args()
    ab, nab = load(a.ab)
    aa, naa = load(a.aa) if a.aa else ({}, 0)
    print(f"# {nab} AB file(s), {naa} AA file(s); per group: runs, rounds, median round ratio [quartiles] "
          f"(range){', median time difference' if any(k[0] <= a.us_below for k in ab) else ''}")
    over = {"ab": 0, "aa": 0}
    for key in sorted(ab):
        small = key[0] <= a.us_below
        line = f"{size_name(key[0]):>8} {key[1][:3]}  AB {describe(ab[key], small)}"
        if key in aa:
            line += f"  |  AA {describe(aa[key], small)}  p={mann_whitney_p(ab[key]['q'], aa[key]['q']):.2f}"
            if small:
                over["aa"] += statistics.median(aa[key]["dt"]) > 2.0
        if small:
            over["ab"] += statistics.median(ab[key]["dt"]) > 2.0
        print(line)
    if any(k[0] <= a.us_below for k in ab):
        n = sum(1 for k in ab if k[0] <= a.us_below)
        print(f"# sizes x placements up to {size_name(a.us_below)} whose median time difference is over +2 us: "
              f"AB {over['ab']} of {n}" + (f", AA {over['aa']} of {n}" if aa else ""))


if __name__ == "__main__":
    main()
