"""Side by side: the storage bench's per-key cases of every run under the folders named.

Each folder holds bench output folders named <build>-1 and <build>-2 (storage.json inside).
A cell: the unchanged checkpoint's median [measured RTT / target], ms; then the fresh restore.
Results: docs/measurements/per-key-idb-2026-12-02/side-by-side.txt (and late-idb-reports-2026-12-03's).
Run: python3 crates/lab/experiments/per-key-idb-2026-12-02/side_by_side.py /tmp/ab2 /tmp/ab3
"""
import json, sys, glob
for d in sys.argv[1:]:
    for f in sorted(glob.glob(d + "/*-[12]/storage.json")):
        r = json.load(open(f))
        name = f.split("/")[-2] + " (" + d.split("/")[-1] + ")"
        cells = {}
        for c in r["captures"]:
            if c.get("navigated") != "settled": continue
            cells[(c["seed"], round(c["addedRttMs"]))] = (c["measuredRttMs"], c["unchangedMedianMs"], c["targetMs"])
        def cell(seed, rtt):
            v = cells.get((seed, rtt))
            return f"{v[1]:6.2f} [{v[0]:5.2f}/{v[2]:5.2f}]" if v else "-"
        print(f"{name:18} appW0 {cell('two-site-framed-idb-app-writes',0)}  appW20 {cell('two-site-framed-idb-app-writes',20)}  framed0 {cell('two-site-framed-idb',0)}  framed20 {cell('two-site-framed-idb',20)}  1MiB+idb0 {cell('local1-mi-b-idb1000',0)}  twosite0 {cell('two-site',0)}  fresh {r['restore']['restoreMedianMs']:.1f} standby {r['restore_standby']['restoreMedianMs'] if 'restore_standby' in r else r.get('restoreStandby',{}).get('restoreMedianMs',0):.1f}")
