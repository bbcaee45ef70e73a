#!/usr/bin/env python3
"""Pools the rounds of several `acx-allreduce-bench --compare -r R --json` runs, and sets them beside
the comparison's noise floor: runs of a mode against itself (`--mode nccl --baseline nccl`).

On a noisy path (loopback sockets between simulated nodes) one run decides nothing: each run's
communicators settle on their own connections and threads, so its rounds share a shift that the
next run does not. Pool the rounds of many short runs, interleaved with as many runs of raw NCCL
against itself, and ask whether acx against raw NCCL differs from raw NCCL against itself.

    scripts/pool-allreduce-json.py --ab 'res/*-AB/mb-sim2-large.json' --aa 'res/*-AA/mb-sim2-large.json'

--ba takes runs made with the two sides swapped (`--mode nccl --baseline actor`: raw NCCL's
communicator made first): their ratios are inverted and their time differences negated, so that
they read as the AB runs do; AB against BA shows whether the order of set-up matters.

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


def load(patterns, swapped=False):
    """{(size, place): {"runs": [median per run], "q": [round ratios], "dt": [us per round]}};
    swapped: the files compare the sides the other way round (ratios inverted, differences negated)"""
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
                # A round's ratio is t_base / t_mode; t_base is known (the run's median), so the
                # round's difference t_mode - t_base is t_base (1/q - 1).
                q = [x for x in rounds_of(row, p) if x > 0]
                tb = row[base][p]["time_us"]
                dt = [tb * (1.0 / x - 1.0) for x in q]
                if swapped:  # read as the other way round: 1/q, and t_base - t_mode
                    q = [1.0 / x for x in q]
                    dt = [-x for x in dt]
                e = out.setdefault((row["size"], p), {"runs": [], "q": [], "dt": []})
                e["runs"].append(statistics.median(q))
                e["q"] += q
                e["dt"] += dt
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
    ap.add_argument("--ba", action="append", default=[],
                    help="glob of runs with the sides swapped, read inverted (repeatable)")
    ap.add_argument("--aa", action="append", default=[], help="glob of the noise-floor runs (repeatable)")
    ap.add_argument("--us-below", type=int, default=65536,
                    help="print time differences up to this size in bytes (default 65536)")
    a = ap.parse_args()
    ab, nab = load(a.ab)
    ba, nba = load(a.ba, swapped=True) if a.ba else ({}, 0)
    aa, naa = load(a.aa) if a.aa else ({}, 0)
    any_small = any(k[0] <= a.us_below for k in ab)
    print(f"# {nab} AB, {nba} BA (read inverted), {naa} AA file(s); per group: runs, rounds, median round ratio "
          f"[quartiles] (range){', median time difference' if any_small else ''}; p: Mann-Whitney against AB")
    groups = [("AB", ab), ("BA", ba), ("AA", aa)]
    over = {name: 0 for name, _ in groups}
    for key in sorted(ab):
        small = key[0] <= a.us_below
        parts = []
        for name, g in groups:
            if key not in g:
                continue
            part = f"{name} {describe(g[key], small)}"
            if name != "AB":
                part += f"  p={mann_whitney_p(ab[key]['q'], g[key]['q']):.2f}"
            parts.append(part)
            if small:
                over[name] += statistics.median(g[key]["dt"]) > 2.0
        print(f"{size_name(key[0]):>8} {key[1][:3]}  " + "  |  ".join(parts))
    if any_small:
        n = sum(1 for k in ab if k[0] <= a.us_below)
        print(f"# sizes x placements up to {size_name(a.us_below)} whose median time difference is over +2 us: "
              + ", ".join(f"{name} {over[name]} of {n}" for name, g in groups if g))

if __name__ == "__main__":
    main()
