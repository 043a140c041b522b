"""Where 1000 IndexedDB puts go in a fresh browser (issue 22's restore). Raw CDP, fresh
Chromium + profile per sample. In one evaluate on a small page of a loopback origin:
build the records, open+upgrade (store + index), the put() calls (synchronous time on the
main thread), and the wait until the transaction completes. Variant via $MODE:
  main     : everything on the page's main thread (what restore.js does)
  workers2 : the records split between two dedicated workers (blob: URLs), each its own tx."""
import asyncio, json, os, shutil, subprocess, tempfile, threading, time, statistics, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import websockets
sys.path.insert(0, "/tmp/navprobe")
FLAGS = ["--headless", "--no-sandbox", "--remote-debugging-port=0", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--mute-audio", "--site-per-process"]
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        data = b"<title>p</title>"
        self.send_response(200); self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def log_message(self, *a): pass

PUTS = r"""
const recs = (from, to) => { const a = []; for (let i = from; i < to; i++) a.push({ id: i, tag: 't' + (i % 7), name: 'record number ' + i, at: new Date(1700000000000 + i), tags: ['a', 'b'], n: i * 1.5 }); return a; };
const openDb = (upgrade) => new Promise((res, rej) => { const r = indexedDB.open('bench', 1);
  r.onupgradeneeded = () => { if (upgrade) r.result.createObjectStore('records', { keyPath: 'id' }).createIndex('byTag', 'tag'); };
  r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
const putAll = (db, rs) => new Promise((res, rej) => { const tx = db.transaction('records', 'readwrite', { durability: 'relaxed' });
  const st = tx.objectStore('records'); const t = performance.now(); for (const v of rs) st.put(v); const sync = performance.now() - t;
  tx.oncomplete = () => res(sync); tx.onabort = () => rej(tx.error); });
"""
MAIN = "(async () => {" + PUTS + r"""
const T = {}; let t = performance.now();
const rs = recs(0, 1000); T.build = performance.now() - t; t = performance.now();
const db = await openDb(true); T.open = performance.now() - t; t = performance.now();
T.putSync = await putAll(db, rs); T.puts = performance.now() - t; db.close(); return T; })()"""
W2 = "(async () => {" + PUTS + r"""
const T = {}; let t = performance.now();
const db = await openDb(true); db.close(); T.open = performance.now() - t; t = performance.now();
const src = `""" + PUTS.replace("`", "\\`") + r"""
onmessage = async (e) => { const db = await openDb(false); const rs = recs(e.data[0], e.data[1]); const s = await putAll(db, rs); db.close(); postMessage(s); };`;
const url = URL.createObjectURL(new Blob([src], { type: 'text/javascript' }));
const n = +(globalThis.NW || 2);
const ws = Array.from({ length: n }, () => new Worker(url));
const parts = ws.map((w, i) => new Promise((res) => { w.onmessage = (e) => res(e.data); w.postMessage([Math.floor(i * 1000 / n), Math.floor((i + 1) * 1000 / n)]); }));
const syncs = await Promise.all(parts); T.putSync = Math.max(...syncs); T.puts = performance.now() - t; ws.forEach((w) => w.terminate()); return T; })()"""


UPG = "(async () => {" + PUTS + r"""
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
NOIX = MAIN.replace(".createIndex('byTag', 'tag')", "")

async def sample(mode, a):
    d = tempfile.mkdtemp()
    p = subprocess.Popen(["/usr/bin/chromium", *FLAGS, f"--user-data-dir={d}", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pf = os.path.join(d, "DevToolsActivePort")
    while not (os.path.exists(pf) and len(open(pf).read().split("\n")) >= 2): await asyncio.sleep(0.01)
    port, path = open(pf).read().split("\n")[:2]
    try:
        async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
            n = 0
            async def send(m, params=None, s=None):
                nonlocal n; n += 1; me = n
                msg = {"id": me, "method": m, "params": params or {}}
                if s: msg["sessionId"] = s
                await ws.send(json.dumps(msg))
                while True:
                    r = json.loads(await ws.recv())
                    if r.get("id") == me: return r
            t = await send("Target.getTargets")
            page = next(x for x in t["result"]["targetInfos"] if x["type"] == "page")
            s = (await send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}))["result"]["sessionId"]
            await send("Page.navigate", {"url": a + "/r"}, s)
            while True:
                r = await send("Runtime.evaluate", {"expression": "document.readyState+location.href", "returnByValue": True}, s)
                v = r["result"]["result"].get("value", "")
                if v.startswith("complete") and "/r" in v: break
                await asyncio.sleep(0.01)
            expr = {"main": MAIN, "workers2": W2, "upgrade": UPG, "upgradeixafter": "globalThis.IX_AFTER=1;" + UPG, "noindex": NOIX}[mode]
            if mode.startswith("workers"): expr = f"globalThis.NW={os.environ.get('NW','2')};" + expr
            t0 = time.perf_counter()
            r = await send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True}, s)
            T = r["result"]["result"].get("value") or r
            T["wall"] = (time.perf_counter() - t0) * 1e3
            return T
    finally:
        p.terminate(); p.wait(); shutil.rmtree(d, ignore_errors=True)

async def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    a = f"http://127.0.0.1:{srv.server_address[1]}"
    modes = os.environ.get("MODES", "main,workers2").split(",")
    res = {m: [] for m in modes}
    for i in range(int(os.environ.get("N", "8"))):
        for m in modes:
            res[m].append(await sample(m, a))
    for m, rows in res.items():
        keys = [k for k in rows[0] if isinstance(rows[0][k], (int, float))]
        print(m, {k: round(statistics.median(r[k] for r in rows), 1) for k in keys})
    srv.shutdown()
asyncio.run(main())
