#!/usr/bin/env python3
"""The last N fresh restores' phases from a debug log (RUST_LOG=outlive::checkpoint=debug).
Its lines 'restore phases' (planned, enabled, written, done) and 'restore document done' (navigated:
when the navigation answered — loaded for A/B, committed for C's handed-over documents —,
written, in-page areas / idb / children / sinceStart), medians. The storage bench's last
restore case is the two-site one, so the last 20 are its.

Results: docs/measurements/realistic-2026-12-02/restore-phases-two-site.txt.
Run: python3 crates/lab/experiments/realistic-2026-12-02/restore_phases.py docs/measurements/realistic-2026-12-02/storage-*-debug.log
"""
import json
import re
import statistics
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ms(v):
    m = re.match(r"([\d.]+)(µs|ms|s)$", v)
    n, unit = float(m.group(1)), m.group(2)
    return n / 1000 if unit == "µs" else n * 1000 if unit == "s" else n


def main(path, n=20):
    phases, docs = [], []
    for line in open(path, encoding="utf-8"):
        line = ANSI.sub("", line)
        if "restore phases" in line:
            f = dict(re.findall(r"(\w+)=([\d.]+(?:µs|ms|s))", line))
            phases.append({k: ms(v) for k, v in f.items()})
        elif "restore document done" in line:
            f = dict(re.findall(r"(\w+)=([\d.]+(?:µs|ms|s))\b", line))
            page = re.search(r"in_page=(\{.*\})", line).group(1)
            p = json.loads(page)
            # `loaded` before the handover at commit, `navigated` (committed) after it.
            nav = f.get("navigated", f.get("loaded"))
            docs.append({"navigated": ms(nav), "written": ms(f["written"]), **p})
    phases, docs = phases[-n:], docs[-n:]
    med = lambda xs: statistics.median(xs)
    print(f"{path}: last {len(phases)} restores")
    for k in ["planned", "enabled", "written", "done"]:
        print(f"  {k:<10} {med([p[k] for p in phases]):8.1f} ms")
    for k in ["navigated", "written", "sinceStart", "areas", "idb", "children"]:
        print(f"  doc {k:<10} {med([d[k] for d in docs]):8.1f} ms")


for path in sys.argv[1:]:
    main(path)
