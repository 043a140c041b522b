import asyncio, json, os, subprocess, tempfile, time, base64, sys, shutil, statistics
import websockets
FLAGS = ["--headless", "--no-sandbox", "--remote-debugging-port=0", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-quic", "--disable-extensions", "--disable-default-apps", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--mute-audio", "--disable-crash-reporter",
         "--disable-breakpad", "--password-store=basic", "--use-mock-keychain"]
class Cdp:
    def __init__(self, ws):
        self.ws, self.n, self.waiting, self.events = ws, 0, {}, asyncio.Queue()
        self.reader = asyncio.create_task(self.read())
    async def read(self):
        async for m in self.ws:
            msg = json.loads(m)
            if "id" in msg: self.waiting.pop(msg["id"]).set_result(msg)
            else:
                msg["_t"] = time.time()*1000; await self.events.put(msg)
    async def send(self, method, params=None, session=None):
        self.n += 1; f = asyncio.get_running_loop().create_future(); self.waiting[self.n] = f
        m = {"id": self.n, "method": method, "params": params or {}}
        if session: m["sessionId"] = session
        await self.ws.send(json.dumps(m)); r = await f
        if "error" in r: raise RuntimeError(f"{method}: {r['error']}")
        return r["result"]
    async def event(self, method):
        while True:
            e = await self.events.get()
            if e["method"] == method: return e
def renderers(pid):
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return sorted(int(l.split()[0]) for l in out.splitlines() if "--type=renderer" in l and f"--user-data-dir" not in l and "chromium" in l)
async def sample(variant):
    d = tempfile.mkdtemp()
    extra = []
    if variant == "nosi": extra = ["--disable-site-isolation-trials", "--disable-features=IsolateOrigins,site-per-process"]
    if variant == "spare": extra = ["--enable-features=SpareRendererForSitePerProcess"]
    p = subprocess.Popen(["/usr/bin/chromium", *FLAGS, *extra, f"--user-data-dir={d}", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pf = os.path.join(d, "DevToolsActivePort")
        while not (os.path.exists(pf) and len(open(pf).read().split("\n")) >= 2): await asyncio.sleep(0.01)
        port, path = open(pf).read().split("\n")[:2]
        async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
            c = Cdp(ws)
            tid = (await c.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
            s = (await c.send("Target.attachToTarget", {"targetId": tid, "flatten": True}))["sessionId"]
            await c.send("Page.enable", session=s)
            if variant == "script":
                await c.send("Page.addScriptToEvaluateOnNewDocument", {"source": open("/work/main/crates/outlive/src/js/capture.js").read().replace("OUTLIVE", "X") if False else "(() => { " + "let a = 1;\n" * 1500 + "})()"}, session=s)
            await asyncio.sleep(0.4)
            before = renderers(p.pid)
            body = "<!doctype html><title>r</title><script>window.__s = performance.now()</script>"
            b64 = base64.b64encode(body.encode()).decode()
            t0 = time.time()*1000
            await c.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=s)
            nav = asyncio.create_task(c.send("Page.navigate", {"url": "http://127.0.0.1:9/__outlive_restore/1"}, session=s))
            paused = await c.event("Fetch.requestPaused")
            tp = time.time()*1000
            await c.send("Fetch.fulfillRequest", {"requestId": paused["params"]["requestId"], "responseCode": 200, "responseHeaders": [{"name": "content-type", "value": "text/html"}], "body": b64}, session=s)
            await nav
            tn = time.time()*1000
            r = await c.send("Runtime.evaluate", {"expression": "1"}, session=s)
            t1 = time.time()*1000
            r = await c.send("Runtime.evaluate", {"expression": "const n = performance.getEntriesByType('navigation')[0]; [window.__s, n.responseEnd, n.domInteractive, performance.timeOrigin]", "returnByValue": True}, session=s)
            v = r["result"]["value"]
            after = renderers(p.pid)
            return {"paused": tp - t0, "navigated": tn - t0, "eval1": t1 - t0, "script": v[0] + v[3] - t0, "resp": v[1], "interactive": v[2], "newproc": int(before != after)}
    finally:
        p.kill(); p.wait(); shutil.rmtree(d, ignore_errors=True)
async def main():
    n = int(sys.argv[1]); variants = sys.argv[2:]
    out = {k: [] for k in variants}
    for i in range(n):
        for k in variants: out[k].append(await sample(k))
    for name, rows in out.items():
        print(f"{name:8}", "  ".join(f"{k}={statistics.median(x[k] for x in rows):6.1f}" for k in rows[0]))
if __name__ == "__main__": asyncio.run(main())
