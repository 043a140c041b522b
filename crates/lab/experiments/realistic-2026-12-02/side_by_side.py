#!/usr/bin/env python3
"""Side by side: every storage bench case of the runs in run-order.txt (B1 A1 B2 A2), medians."""
import json
import sys

runs = sys.argv[1:] or ["B1", "A1", "B2", "A2"]
data = {r: json.load(open(f"storage-{r}.json")) for r in runs}


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
