"""Handing 1.16 MB of restore data to a fresh restore document: pieces evaluated as string
literals (what outlive does) against the document fetching it as a sub-resource answered
through Fetch interception. Raw CDP, fresh Chromium + profile per sample; page clock
(performance.now(), from the navigation's start) when the data is parsed and in hand."""
import asyncio, base64, json, os, shutil, subprocess, tempfile, time, statistics, sys
import websockets
FLAGS = ["--headless", "--no-sandbox", "--remote-debugging-port=0", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--mute-audio", "--site-per-process"]
ORIGIN = "http://127.0.0.1:9"
rec = lambda i: json.dumps({"id": i, "tag": "t%d" % (i % 7), "name": "record number %d" % i, "tags": ["a", "b"], "n": i * 1.5})
DATA = json.dumps({"local": [["blob%d" % i, str(i % 10) * 65536] for i in range(16)], "session": None,
        "idb": [{"name": "bench", "version": 1, "stores": [{"name": "records", "keyPath": "id", "autoIncrement": False, "indexes": [],
                 "records": [[str(i), rec(i)] for i in range(1000)]}]}], "children": 0, "childTimeoutMs": 5000})
PIECE = 256 * 1024

class Cdp:
    def __init__(self, ws):
        self.ws, self.n, self.waiting, self.handlers = ws, 0, {}, []
        self.reader = asyncio.ensure_future(self.read())
    async def read(self):
        async for m in self.ws:
            r = json.loads(m)
            if "id" in r:
                f = self.waiting.pop(r["id"], None)
                if f: f.set_result(r)
            else:
                for h in self.handlers: h(r)
    async def send(self, method, params=None, session=None):
        self.n += 1; me = self.n
        f = asyncio.get_event_loop().create_future(); self.waiting[me] = f
        msg = {"id": me, "method": method, "params": params or {}}
        if session: msg["sessionId"] = session
        await self.ws.send(json.dumps(msg))
        r = await f
        if "error" in r: raise RuntimeError(r["error"])
        return r["result"]

DOC_PIECES = "<!doctype html><meta charset=utf-8><script>window.RUN = (d) => { if (d.local) for (const [k, v] of d.local) localStorage.setItem(k, v); return d; };</script><body></body>"
DOC_FETCH = ("<!doctype html><meta charset=utf-8><script>window.D = fetch('/__r/data').then((r) => r.json())"
             ".then((d) => { window.T = performance.now(); return d; });</script><body></body>")

async def sample(mode):
    d = tempfile.mkdtemp()
    p = subprocess.Popen(["/usr/bin/chromium", *FLAGS, f"--user-data-dir={d}", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pf = os.path.join(d, "DevToolsActivePort")
        while not (os.path.exists(pf) and len(open(pf).read().split("\n")) >= 2): await asyncio.sleep(0.01)
        port, path = open(pf).read().split("\n")[:2]
        async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
            c = Cdp(ws)
            t = await c.send("Target.getTargets")
            page = next(x for x in t["targetInfos"] if x["type"] == "page")
            s = (await c.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}))["sessionId"]
            doc = DOC_FETCH if mode == "fetch" else DOC_PIECES
            bodies = {ORIGIN + "/__r/": base64.b64encode(doc.encode()).decode(),
                      ORIGIN + "/__r/data": base64.b64encode(DATA.encode()).decode()}
            def on(ev):
                if ev.get("method") == "Fetch.requestPaused":
                    u = ev["params"]["request"]["url"]
                    ct = "application/json" if u.endswith("/data") else "text/html; charset=utf-8"
                    asyncio.ensure_future(c.send("Fetch.fulfillRequest", {"requestId": ev["params"]["requestId"], "responseCode": 200,
                        "responseHeaders": [{"name": "Content-Type", "value": ct}, {"name": "Cache-Control", "value": "no-store"}],
                        "body": bodies.get(u, "")}, session=s))
            c.handlers.append(on)
            await c.send("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]}, session=s)
            t0 = time.perf_counter()
            await c.send("Page.navigate", {"url": ORIGIN + "/__r/"}, session=s)
            nav = (time.perf_counter() - t0) * 1e3
            if mode.startswith("pieces"):
                PIECE = int(mode[6:] or 256) * 1024
                pieces = [DATA[i:i + PIECE] for i in range(0, len(DATA), PIECE)]
                n = len(pieces)
                await asyncio.gather(*[c.send("Runtime.evaluate", {"expression": f"((globalThis.H ??= Array({n}))[{i}] = {json.dumps(pc)}, true)"}, session=s) for i, pc in enumerate(pieces)])
                expr = ("(async () => { if (document.readyState === 'loading') await new Promise((r) => addEventListener('DOMContentLoaded', r, { once: true }));"
                        " const d = RUN(JSON.parse(H.join(''))); H = undefined; return [performance.now(), d.local.length]; })()")
            elif mode == "dom":
                data = json.loads(DATA); local = data["local"]; data["local"] = None
                rest = json.dumps(data)
                sends = [c.send("DOMStorage.setDOMStorageItem", {"storageId": {"securityOrigin": ORIGIN, "isLocalStorage": True}, "key": k, "value": v}, session=s) for k, v in local]
                sends.append(c.send("Runtime.evaluate", {"expression": f"(globalThis.H = [{json.dumps(rest)}], true)"}, session=s))
                await asyncio.gather(*sends)
                expr = ("(async () => { if (document.readyState === 'loading') await new Promise((r) => addEventListener('DOMContentLoaded', r, { once: true }));"
                        " const d = RUN(JSON.parse(H.join(''))); H = undefined; return [performance.now(), localStorage.length]; })()")
            elif mode == "none":
                expr = ("(async () => { if (document.readyState === 'loading') await new Promise((r) => addEventListener('DOMContentLoaded', r, { once: true }));"
                        " return [performance.now(), 16]; })()")
            elif mode == "obj":
                g = (await c.send("Runtime.evaluate", {"expression": "globalThis"}, session=s))["result"]["objectId"]
                await c.send("Runtime.callFunctionOn", {"functionDeclaration": "function (d) { globalThis.H = d; }", "objectId": g, "arguments": [{"value": json.loads(DATA)}]}, session=s)
                expr = ("(async () => { if (document.readyState === 'loading') await new Promise((r) => addEventListener('DOMContentLoaded', r, { once: true }));"
                        " const d = RUN(H); H = undefined; return [performance.now(), d.local.length]; })()")
            else:
                expr = "window.D.then((d) => [window.T, d.local.length])"
            r = await c.send("Runtime.evaluate", {"expression": expr, "awaitPromise": True, "returnByValue": True}, session=s)
            if "value" not in r["result"]: print(mode, json.dumps(r)[:600]); raise SystemExit(1)
            at, n = r["result"]["value"]
            assert n == 16, r
            return {"nav": nav, "inHand": at, "wall": (time.perf_counter() - t0) * 1e3}
    finally:
        p.kill(); p.wait(); shutil.rmtree(d, ignore_errors=True)

async def main():
    modes = os.environ.get("MODES", "pieces,fetch").split(",")
    res = {m: [] for m in modes}
    for i in range(int(os.environ.get("N", "10"))):
        for m in modes:
            res[m].append(await sample(m))
    print(len(DATA), "bytes")
    for m, rows in res.items():
        print(m, {k: round(statistics.median(r[k] for r in rows), 1) for k in rows[0]}, [round(r["inHand"], 1) for r in rows])
asyncio.run(main())
