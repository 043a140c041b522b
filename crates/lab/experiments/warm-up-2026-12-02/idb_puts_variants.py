"""Where 1 000 IndexedDB puts go in a fresh browser (issue 22's restore). Raw CDP, a fresh
Chromium and profile per sample. In one evaluate on a small page of a loopback origin: build
the records, open and upgrade (store and index), the put() calls (synchronous time on the main
thread), and the wait until the transaction completes. Variants ($MODES, $N samples):
  main           : everything on the page's main thread (what restore.js does)
  workers2       : the records split between $NW (2) dedicated workers, each its own tx
  upgrade        : the puts inside the versionchange transaction, the index made first
  upgradeixafter : the same, the index built after the puts
  noindex        : main without the index.
$EXTRA: more Chromium flags, space-separated (e.g. --enable-features=IdbSqliteBackingStore).
$LIST: print the profile's IndexedDB files once Chromium has stopped.

Results: docs/measurements/warm-up-2026-12-02/results.txt; with $EXTRA and $LIST,
docs/measurements/per-key-idb-2026-12-02/restore-experiments.txt.
Run: MODES=main,upgrade target/clients/venv/bin/python crates/lab/experiments/warm-up-2026-12-02/idb_puts_variants.py
"""
import asyncio, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

UPG = "(async () => {" + lab.PUTS_JS + r"""
const T = {}; let t = performance.now();
const rs = recs(0, 1000); T.build = performance.now() - t; t = performance.now();
let sync = 0;
const db = await new Promise((res, rej) => { const r = indexedDB.open('bench', 1);
  r.onupgradeneeded = () => { const st = r.result.createObjectStore('records', { keyPath: 'id' });
    if (!globalThis.IX_AFTER) st.createIndex('byTag', 'tag');
    const a = performance.now(); for (const v of rs) st.put(v);
    if (globalThis.IX_AFTER) st.createIndex('byTag', 'tag'); sync = performance.now() - a; };
  r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
T.putSync = sync; T.puts = performance.now() - t; db.close(); return T; })()"""
NOIX = lab.PUTS_MAIN_JS.replace(".createIndex('byTag', 'tag')", "")
EXPRESSIONS = {"main": lab.PUTS_MAIN_JS, "workers2": lab.PUTS_WORKERS_JS, "upgrade": UPG,
               "upgradeixafter": "globalThis.IX_AFTER=1;" + UPG, "noindex": NOIX}
FLAGS = [*os.environ.get("EXTRA", "").split(), *lab.FLAGS, *lab.SITE_PER_PROCESS]


def list_idb(profile):
    print([os.path.join(r, f)[len(profile):] for r, _, fs in os.walk(profile) for f in fs if "IndexedDB" in r][:8])


if __name__ == "__main__":
    asyncio.run(lab.time_puts(EXPRESSIONS, FLAGS, list_idb if os.environ.get("LIST") else None))
