"""Run: target/clients/venv/bin/python probe.py [instrumented capture.js, e.g. probe-cur.js]
(probe-cur.js / probe-first.js: js/capture.js of the morning, instrumented with performance.now()
marks; the first with databases() asked first.)

Where a checkpoint on a new document spends its time (issue 22), raw CDP.
Seeds 1 MiB localStorage (16 x 64 Ki one-byte chars) + 1000 IndexedDB records like the bench,
then for each variant: N new documents of the origin, each settled 0.5 s, then the capture
expression as outlive sends it (known hashes offered, idbSame offered), timed from here and
inside the page (marks in an instrumented copy of capture.js)."""
import asyncio, json, os, re, shutil, subprocess, sys, tempfile, threading, time, statistics
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import websockets

JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../crates/outlive/src/js/")
CODEC = open(JS + "codec.js").read()
CAPTURE = open(sys.argv[1] if len(sys.argv) > 1 else JS + "capture.js").read()
WASM = open(JS + "hash.wasm.b64").read().strip()
N = int(os.environ.get("N", "20"))
FLAGS = ["--headless", "--no-sandbox", "--remote-debugging-port=0", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--mute-audio", "--site-per-process"]

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        data = b"<title>p</title><p>page</p>"
        self.send_response(200); self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def log_message(self, *a): pass

SEED = """(async () => { for (let i = 0; i < 16; i++) localStorage.setItem('blob' + i, String(i % 10).repeat(65536));
await new Promise((resolve, reject) => {
  const r = indexedDB.open('bench', 1);
  r.onupgradeneeded = () => r.result.createObjectStore('records', { keyPath: 'id' }).createIndex('byTag', 'tag');
  r.onerror = () => reject(r.error);
  r.onsuccess = () => { const tx = r.result.transaction('records', 'readwrite'); const st = tx.objectStore('records');
    for (let i = 0; i < 1000; i++) st.put({ id: i, tag: 't' + (i % 7), name: 'record number ' + i, at: new Date(1700000000000 + i), tags: ['a', 'b'], n: i * 1.5 });
    tx.oncomplete = () => { r.result.close(); resolve(true); }; }; }); return 1; })()"""

def install_body():
    return f"(() => {{\n{CODEC}\nconst OUTLIVE_HASH_WASM = '{WASM}';\nreturn ({CAPTURE});\n}})()"

def expression(known, opts, preinstalled):
    k, o = json.dumps(known), json.dumps(opts)
    if preinstalled:
        return f"globalThis[Symbol.for('outlive.capture')]({k}, {o})"
    return f"(globalThis[Symbol.for('outlive.capture')] ??= {install_body()})({k}, {o})"

class Cdp:
    def __init__(self, ws):
        self.ws, self.n, self.waiting, self.events = ws, 0, {}, []
        self.reader = asyncio.create_task(self.read())
    async def read(self):
        async for m in self.ws:
            msg = json.loads(m)
            if "id" in msg:
                self.waiting.pop(msg["id"]).set_result(msg)
            else:
                self.events.append(msg.get("method"))
    async def send(self, method, params=None, session=None):
        self.n += 1
        f = asyncio.get_running_loop().create_future(); self.waiting[self.n] = f
        m = {"id": self.n, "method": method, "params": params or {}}
        if session: m["sessionId"] = session
        await self.ws.send(json.dumps(m))
        msg = await f
        if "error" in msg: raise RuntimeError(f"{method}: {msg['error']}")
        return msg["result"]
    async def value(self, expr, s):
        r = await self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True}, s)
        if "exceptionDetails" in r: raise RuntimeError(json.dumps(r["exceptionDetails"])[:500])
        return r["result"].get("value")

async def navigate(c, s, url):
    await c.send("Page.navigate", {"url": url}, s)
    for _ in range(500):
        v = await c.value("document.readyState + ' ' + location.href", s)
        if v and v.startswith("complete") and v.endswith(url): return
        await asyncio.sleep(0.01)
    raise RuntimeError("no load")

async def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    a = f"http://127.0.0.1:{srv.server_address[1]}"
    d = tempfile.mkdtemp()
    p = subprocess.Popen(["/usr/bin/chromium", *FLAGS, f"--user-data-dir={d}", "about:blank"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pf = os.path.join(d, "DevToolsActivePort")
    while not (os.path.exists(pf) and len(open(pf).read().split("\n")) >= 2): await asyncio.sleep(0.01)
    port, path = open(pf).read().split("\n")[:2]
    try:
        async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
            c = Cdp(ws)
            t = await c.send("Target.getTargets")
            page = next(x for x in t["targetInfos"] if x["type"] == "page")
            s = (await c.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}))["sessionId"]
            await c.send("Page.enable", session=s); await c.send("Runtime.enable", session=s)
            await navigate(c, s, f"{a}/seed")
            await c.value(SEED, s)
            first = await c.value(expression([], {"idb": True, "idbMax": 1 << 20, "idbSame": None}, False), s)
            known = [first["local"]["hash"], first["session"]["hash"], first["idb"]["hash"]]
            same = {"origin": a, "hash": first["idb"]["hash"], "list": first["idb"]["list"]}
            opts = {"idb": True, "idbMax": 1 << 20, "idbSame": same}
            await c.send("Storage.trackIndexedDBForStorageKey", {"storageKey": a + "/"}, s)
            variants = os.environ.get("VARIANTS", "inline,preinstalled").split(",")
            script_id = None
            res = {}
            for rnd in range(N):
                for v in variants:
                    if v == "preinstalled" and script_id is None:
                        script_id = (await c.send("Page.addScriptToEvaluateOnNewDocument",
                            {"source": f"globalThis[Symbol.for('outlive.capture')] = {install_body()};" + os.environ.get("EXTRA", "")}, s))["identifier"]
                    if v != "preinstalled" and script_id is not None:
                        await c.send("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script_id}, s); script_id = None
                    await navigate(c, s, f"{a}/p?{v}{rnd}")
                    if os.environ.get("WARM"): await c.value("0", s)
                    await asyncio.sleep(0.5)
                    t0 = time.perf_counter()
                    one = await c.value("1", s) if os.environ.get("FIRST1") else None
                    t1 = time.perf_counter()
                    r = await c.value(expression(known, opts, v == "preinstalled"), s)
                    t2 = time.perf_counter()
                    assert "data" not in r["local"] and "data" not in r["idb"], r
                    marks = await c.value("JSON.stringify(globalThis.__t || null)", s)
                    t3 = time.perf_counter()
                    again = await c.value(expression(known, opts, v == "preinstalled"), s)
                    t4 = time.perf_counter()
                    marks2 = json.loads(await c.value("JSON.stringify(globalThis.__t || null)", s))
                    if rnd == 0: print(v, "again in page", marks2)
                    res.setdefault(v, []).append({"capture": (t2 - t1) * 1e3, "evaluate1": (t1 - t0) * 1e3, "again": (t4 - t3) * 1e3, "marks": json.loads(marks) if marks else None})
            for v, rows in res.items():
                cap = [r["capture"] for r in rows]; again = [r["again"] for r in rows]
                print(f"{v:14s} capture median {statistics.median(cap):6.2f} ms  (min {min(cap):.2f} max {max(cap):.2f})  same doc again {statistics.median(again):.2f} ms")
                if rows[0]["marks"]:
                    keys = rows[0]["marks"].keys()
                    print("   in page medians:", {k: round(statistics.median(r["marks"][k] for r in rows), 2) for k in keys})
            json.dump(res, open(os.environ.get("OUT", "/tmp/navprobe/out.json"), "w"))
    finally:
        p.terminate(); p.wait(); shutil.rmtree(d, ignore_errors=True); srv.shutdown()

asyncio.run(main())
