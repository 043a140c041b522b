"""1 000 puts of the bench's records into a new database, on a warm page: the records in their
own readwrite transaction after the upgrade, or inside the upgrade, the index made before or
after, or no index. Playwright (not raw CDP) against Debian Chromium; 4 pages, 3 rounds each.
It serves /tmp/exp on port 8765: that folder must exist.

Results: docs/measurements/restore-handover-2026-12-02/experiments.txt.
Run: target/clients/venv/bin/python crates/lab/experiments/restore-handover-2026-12-02/idb_exp.py
"""
import os, subprocess, sys, statistics, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab
from playwright.sync_api import sync_playwright
srv = subprocess.Popen([sys.executable, "-m", "http.server", "8765", "--bind", "127.0.0.1", "-d", "/tmp/exp"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.5)
JS = r"""async (variant) => {
  const recs = []; for (let i = 0; i < 1000; i++) recs.push(""" + lab.RECORD_JS + r""");
  const req = (r) => new Promise((res, rej) => { r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
  const name = variant + Math.random();
  const t0 = performance.now();
  const open = indexedDB.open(name, 1);
  open.onupgradeneeded = () => {
    const db = open.result;
    const st = db.createObjectStore('records', { keyPath: 'id' });
    if (variant === 'index-first-upgrade' || variant === 'separate-tx') st.createIndex('byTag', 'tag');
    if (variant !== 'separate-tx') {
      for (const r of recs) st.put(r);
      if (variant === 'index-after-upgrade') st.createIndex('byTag', 'tag');
    }
  };
  const db = await req(open);
  if (variant === 'separate-tx') {
    const tx = db.transaction(['records'], 'readwrite', { durability: 'relaxed' });
    const done = new Promise((res, rej) => { tx.oncomplete = res; tx.onabort = () => rej(tx.error); });
    const st = tx.objectStore('records');
    for (const r of recs) st.put(r);
    await done;
  }
  db.close();
  return performance.now() - t0;
}"""
with sync_playwright() as p:
    b = p.chromium.launch(executable_path=lab.CHROMIUM, args=["--no-sandbox", "--headless"])
    out = {}
    for cold in range(4):
        pg = b.new_context().new_page()
        pg.goto("http://127.0.0.1:8765/")
        for v in ["separate-tx", "index-first-upgrade", "index-after-upgrade", "no-index"] * 3:
            out.setdefault(v, []).append(pg.evaluate(JS, v))
    for v, xs in out.items():
        print(f"{v:22} median {statistics.median(xs):6.1f} ms  all {[round(x) for x in xs]}")
    b.close()
srv.kill()
