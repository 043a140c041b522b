"""Where 1 000 IndexedDB puts go in a fresh browser (issue 22's restore). Raw CDP, a fresh
Chromium and profile per sample. In one evaluate on a small page of a loopback origin: build
the records, open and upgrade (store and index), the put() calls (synchronous time on the main
thread), and the wait until the transaction completes. Variants ($MODES, $N samples):
  main     : everything on the page's main thread (what restore.js does)
  workers2 : the records split between $NW (2) dedicated workers (blob: URLs), each its own tx.
warm-up-2026-12-02/idb_puts_variants.py has more variants.

Results: docs/measurements/README.md ("The capture script installed as each document starts").
Run: target/clients/venv/bin/python crates/lab/experiments/navigated-capture-2026-12-02/idb_puts.py
"""
import asyncio, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

if __name__ == "__main__":
    asyncio.run(lab.time_puts({"main": lab.PUTS_MAIN_JS, "workers2": lab.PUTS_WORKERS_JS}))
