#!/usr/bin/env python3
"""Side by side: every storage bench case of the runs named (B1 A1 B2 A2 by default), medians.

Reads storage-<run>.json from docs/measurements/realistic-2026-12-02, where ab.sh and ab2.sh
put them, and prints the table of side-by-side.txt there.
Run: python3 crates/lab/experiments/realistic-2026-12-02/side_by_side.py B1 A1 B2 A2
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

RESULTS = lab.MEASUREMENTS / "realistic-2026-12-02"
runs = sys.argv[1:] or ["B1", "A1", "B2", "A2"]
data = {r: json.load(open(RESULTS / f"storage-{r}.json")) for r in runs}


def name(c):
    nav = {None: "", "immediately": ", navigated (right after goto)", "settled": ", navigated (settled)"}
    return f"{c['seed']}{nav[c['navigated']]} @{c['addedRttMs']:.0f} ms"


print("checkpoint, unchanged: median ms (measured RTT ms; target = 1.5 x RTT + 5 ms)")
print(f"{'case':<58}" + "".join(f"{r:>24}" for r in runs))
for i, c in enumerate(data[runs[0]]["captures"]):
    row = f"{name(c):<58}"
    for r in runs:
        d = data[r]["captures"][i]
        ok = "ok" if d["unchangedMedianMs"] <= d["targetMs"] else "MISS"
        row += f"{d['unchangedMedianMs']:>8.2f} ({d['measuredRttMs']:.2f}; {d['targetMs']:.2f}) {ok:>4}"
    print(row)
print()
print("restores after a death (local Chromium), median ms: restore / navigate / launch / death to re-entry")
for key in ["restore", "restoreStandby", "restoreTwoSite"]:
    c = data[runs[0]][key]
    label = f"{c['seed']}{' into the standby' if c['standby'] else ' fresh'}"
    row = f"{label:<40}"
    for r in runs:
        d = data[r][key]
        launch = d["launchMedianMs"]
        row += f"  {r}: {d['restoreMedianMs']:.1f} / {d['navigateMedianMs']:.1f} / {'-' if launch is None else f'{launch:.1f}'} / {d['replacedMedianMs']:.1f}"
    print(row)
