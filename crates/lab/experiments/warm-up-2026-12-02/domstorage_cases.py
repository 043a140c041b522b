import asyncio, json, os, shutil, subprocess, tempfile, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import websockets
FLAGS = ["--headless", "--no-sandbox", "--remote-debugging-port=0", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--site-per-process"]
PORTS = {}
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/frame"):
            src = self.path.split("src=")[1]
            data = f"<title>f</title><iframe src='{src}'></iframe>".encode()
        else:
            data = b"<title>p</title><p>page</p>"
        self.send_response(200); self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def log_message(self, *a): pass
log = []
class Cdp:
    def __init__(self, ws):
        self.ws, self.n, self.waiting = ws, 0, {}
        self.reader = asyncio.create_task(self.read())
    async def read(self):
        async for m in self.ws:
            msg = json.loads(m)
            if "id" in msg:
                log.append(("reply", msg["id"]))
                self.waiting.pop(msg["id"]).set_result(msg)
            else:
                p = msg.get("params", {})
                if msg["method"].startswith("DOMStorage"):
                    log.append(("event", msg["method"], msg.get("sessionId", "")[:6], json.dumps(p.get("storageId")), p.get("key")))
                elif msg["method"] == "Target.attachedToTarget":
                    log.append(("attached", p["targetInfo"]["type"], p["targetInfo"]["url"], p["sessionId"][:6]))
                    self.attached = p["sessionId"]
    async def send(self, method, params=None, session=None):
        self.n += 1
        f = asyncio.get_running_loop().create_future(); self.waiting[self.n] = f
        m = {"id": self.n, "method": method, "params": params or {}}
        if session: m["sessionId"] = session
        log.append(("send", self.n, method, (params or {}).get("expression", "")[:60]))
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
        try:
            v = await c.value("document.readyState + ' ' + location.href", s)
            if v and v.startswith("complete") and v.endswith(url): return
        except RuntimeError: pass
        await asyncio.sleep(0.05)
    raise RuntimeError("no load")
def mark(t): log.append(("----", t)); print("----", t)
async def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    a, b, sub = f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"http://127.0.0.1:{port}"
    d = tempfile.mkdtemp()
    p = subprocess.Popen(["/usr/bin/chromium", *FLAGS, f"--user-data-dir={d}", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pf = os.path.join(d, "DevToolsActivePort")
    while not (os.path.exists(pf) and len(open(pf).read().split("\n")) >= 2): await asyncio.sleep(0.01)
    dport, path = open(pf).read().split("\n")[:2]
    try:
        async with websockets.connect(f"ws://127.0.0.1:{dport}{path}", max_size=None) as ws:
            c = Cdp(ws)
            t = await c.send("Target.getTargets")
            page = next(x for x in t["targetInfos"] if x["type"] == "page")
            s = (await c.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}))["sessionId"]
            await c.send("Page.enable", session=s); await c.send("Runtime.enable", session=s)
            await navigate(c, s, f"{a}/one")
            await c.send("DOMStorage.enable", session=s)
            mark("A setItem same doc")
            await c.value("localStorage.setItem('a', '1'); sessionStorage.setItem('s','1'); localStorage.b = '2'; 1", s)
            mark("B new doc same origin")
            await navigate(c, s, f"{a}/two")
            await c.value("localStorage.setItem('a', '2'); 1", s)
            mark("C cross-site and back")
            await navigate(c, s, f"{b}/three")
            await c.value("localStorage.setItem('x', '2'); 1", s)
            await navigate(c, s, f"{a}/four")
            await c.value("localStorage.setItem('a', '3'); 1", s)
            mark("D another tab same origin")
            t2 = (await c.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
            s2 = (await c.send("Target.attachToTarget", {"targetId": t2, "flatten": True}))["sessionId"]
            await c.send("Runtime.enable", session=s2)
            await navigate(c, s2, f"{a}/tab")
            await c.value("localStorage.setItem('fromtab', '1'); 1", s2)
            await asyncio.sleep(0.3)
            await c.value("1", s)
            mark("E cross-site iframe (OOPIF) write, page session only")
            await c.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True}, s)
            await navigate(c, s, f"{a}/frame?src={b}/inner")
            await asyncio.sleep(0.5)
            fs = c.attached
            await c.send("Runtime.enable", session=fs)
            await c.value("localStorage.setItem('inframe', '1'); 1", fs)
            await asyncio.sleep(0.3); await c.value("1", s)
            mark("E2 same with DOMStorage.enable on frame session")
            await c.send("DOMStorage.enable", session=fs)
            await c.value("localStorage.setItem('inframe', '2'); 1", fs)
            await asyncio.sleep(0.3); await c.value("1", s)
            mark("F same-site other-origin iframe (same process)")
            # 127.0.0.1 other port: same site
            srv2 = ThreadingHTTPServer(("127.0.0.1", 0), H)
            threading.Thread(target=srv2.serve_forever, daemon=True).start()
            o2 = f"http://127.0.0.1:{srv2.server_address[1]}"
            await navigate(c, s, f"{a}/frame?src={o2}/inner")
            await asyncio.sleep(0.5)
            # write through a Runtime context of the child: use frames[0].localStorage is cross-origin; use isolated world
            tree = await c.send("Page.getFrameTree", session=s)
            child = tree["frameTree"]["childFrames"][0]["frame"]["id"]
            ctx = (await c.send("Page.createIsolatedWorld", {"frameId": child, "worldName": "w"}, s))["executionContextId"]
            await c.send("Runtime.evaluate", {"expression": "localStorage.setItem('sameproc', '1'); 1", "contextId": ctx}, s)
            await asyncio.sleep(0.3); await c.value("1", s)
            mark("G disable then write")
            await c.send("DOMStorage.disable", session=s)
            await navigate(c, s, f"{a}/five")
            await c.value("localStorage.setItem('a', '4'); 1", s)
            await asyncio.sleep(0.3); await c.value("1", s)
            mark("end")
    finally:
        p.terminate(); p.wait(); shutil.rmtree(d, ignore_errors=True); srv.shutdown()
    for l in log:
        if l[0] in ("event", "----", "attached") or (l[0] == "send" and l[2] == "Runtime.evaluate" and "setItem" in l[3]) or l[0]=="reply": print(*l)
asyncio.run(main())
