"""Can DevTools DOMStorage events tell a checkpoint that localStorage is unchanged?

Raw CDP against Debian Chromium (issue 22's idea: skip reading 1 MiB of unchanged
localStorage after a navigation). A capture could trust "no event since my last read" only
if every write that ran in the page before the capture's own Runtime.evaluate has its event
delivered on the connection before that evaluate's reply. Measured here:

  timer     the page writes localStorage every 1 ms (setInterval) and keeps the last value it
            wrote in a global; we evaluate that global and check the newest event seen
            before the reply is at least that value (a miss = a write the capture would not
            know of yet).
  burst     a single task writes 200 keys, then the evaluate: all 200 events before the reply?
  navigate  a new document writes a key in its inline script; after its load event, was the
            event seen before the reply of an evaluate reading the key?
  othertab  a second tab of the same origin writes; does the first tab's session hear it?
  oopif     a cross-site iframe (localhost vs 127.0.0.1) writes: on which session, if any?

Run: target/clients/venv/bin/python docs/measurements/domstorage-events-2026-12-02/order_exp.py
"""
import asyncio, json, os, shutil, subprocess, sys, tempfile, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import websockets

FLAGS = ["--headless", "--no-sandbox", "--remote-debugging-port=0", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--mute-audio", "--site-per-process"]

PAGES = {
    "/idle": "<title>idle</title>",
    "/timer": "<script>window.lastN=0;setInterval(()=>{const n=++window.lastN;"
              "localStorage.setItem('c',String(n))},1)</script>",
    "/onload": "<script>localStorage.setItem('navk',String(Math.random()))</script>",
    "/frame": "",  # filled in with the other site's URL
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = PAGES.get(self.path.split("?")[0])
        if body is None:
            self.send_response(404); self.end_headers(); return
        data = body.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


class Cdp:
    """Replies and events in arrival order; `state` is updated by events as they arrive, and
    a reply records the state at the moment it arrived."""

    def __init__(self, ws):
        self.ws, self.n, self.waiting = ws, 0, {}
        self.max_c = {}      # session -> newest value of key 'c' seen in an event
        self.keys = {}       # session -> set of keys seen in events
        self.count = {}      # session -> events seen
        self.ids = []        # storageIds seen
        self.reader = asyncio.create_task(self.read())

    async def read(self):
        async for m in self.ws:
            msg = json.loads(m)
            if "id" in msg:
                f = self.waiting.pop(msg["id"])
                f.set_result((msg, dict(self.max_c), {k: set(v) for k, v in self.keys.items()}))
                continue
            method, p, s = msg.get("method", ""), msg.get("params", {}), msg.get("sessionId")
            if method.startswith("DOMStorage.domStorageItem"):
                self.count[s] = self.count.get(s, 0) + 1
                sid = json.dumps(p.get("storageId"), sort_keys=True)
                if sid not in self.ids:
                    self.ids.append(sid)
                key = p.get("key")
                if key is not None:
                    self.keys.setdefault(s, set()).add(key)
                if key == "c" and p.get("newValue"):
                    self.max_c[s] = max(self.max_c.get(s, 0), int(p["newValue"]))

    async def send(self, method, params=None, session=None):
        self.n += 1
        f = asyncio.get_running_loop().create_future()
        self.waiting[self.n] = f
        m = {"id": self.n, "method": method, "params": params or {}}
        if session:
            m["sessionId"] = session
        await self.ws.send(json.dumps(m))
        msg, max_c, keys = await f
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error']}")
        return msg["result"], max_c, keys

    async def value(self, expression, session):
        r, max_c, keys = await self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        return r["result"].get("value"), max_c, keys


async def attach(c, target_id):
    r, _, _ = await c.send("Target.attachToTarget", {"targetId": target_id, "flatten": True})
    return r["sessionId"]


async def navigate(c, s, url):
    await c.send("Page.navigate", {"url": url}, s)
    for _ in range(200):  # wait for the document
        v, _, _ = await c.value("document.readyState + ' ' + location.href", s)
        if v and v.startswith("complete") and v.endswith(url):
            return
        await asyncio.sleep(0.01)
    raise RuntimeError(f"{url} did not load")


async def main():
    server_a = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_b = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    for srv in (server_a, server_b):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    a = f"http://127.0.0.1:{server_a.server_address[1]}"
    b = f"http://localhost:{server_b.server_address[1]}"
    PAGES["/frame"] = f"<iframe src='{b}/timer'></iframe>"

    d = tempfile.mkdtemp()
    p = subprocess.Popen(["/usr/bin/chromium", *FLAGS, f"--user-data-dir={d}", "about:blank"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pf = os.path.join(d, "DevToolsActivePort")
    while not (os.path.exists(pf) and len(open(pf).read().split("\n")) >= 2):
        await asyncio.sleep(0.01)
    port, path = open(pf).read().split("\n")[:2]
    out = {}
    try:
        async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
            c = Cdp(ws)
            targets, _, _ = await c.send("Target.getTargets")
            page = next(t for t in targets["targetInfos"] if t["type"] == "page")
            s = await attach(c, page["targetId"])
            await c.send("Page.enable", session=s)
            await c.send("Runtime.enable", session=s)
            await c.send("DOMStorage.enable", session=s)

            # timer
            await navigate(c, s, f"{a}/timer")
            misses, lags, samples = 0, [], 400
            for i in range(samples):
                n, max_c, _ = await c.value("window.lastN", s)
                seen = max_c.get(s, 0)
                if seen < n:
                    misses += 1
                    lags.append(n - seen)
                await asyncio.sleep(0.001 * (i % 5))
            n, _, _ = await c.value("window.lastN", s)
            out["timer"] = {"samples": samples, "misses": misses, "worst_lag_writes": max(lags or [0]),
                            "writes": n, "events": c.count.get(s, 0)}
            print("timer", out["timer"], flush=True)

            # burst
            await navigate(c, s, f"{a}/idle")
            complete = 0
            for i in range(50):
                prefix = f"burst{i}_"
                _, _, keys = await c.value(
                    f"for (let k = 0; k < 200; k++) localStorage.setItem('{prefix}' + k, 'v'); 1", s)
                got = sum(1 for k in keys.get(s, ()) if k.startswith(prefix))
                complete += got == 200
            out["burst"] = {"evaluates": 50, "all_200_events_before_reply": complete}
            print("burst", out["burst"], flush=True)

            # navigate
            seen_before = 0
            for i in range(50):
                before = dict(c.count)
                await navigate(c, s, f"{a}/onload?{i}")
                v, _, keys = await c.value("localStorage.getItem('navk')", s)
                seen_before += c.count.get(s, 0) > before.get(s, 0)
            out["navigate"] = {"navigations": 50, "event_seen_before_reply": seen_before}
            print("navigate", out["navigate"], flush=True)

            # othertab: a second tab writes on the timer page; the first idles.
            await navigate(c, s, f"{a}/idle")
            before = c.count.get(s, 0)
            r, _, _ = await c.send("Target.createTarget", {"url": f"{a}/timer"})
            s2 = await attach(c, r["targetId"])
            await asyncio.sleep(1.0)
            n2, _, _ = await c.value("window.lastN", s2)
            await c.send("Target.closeTarget", {"targetId": r["targetId"]})
            out["othertab"] = {"writes_in_other_tab": n2,
                               "events_on_first_tabs_session": c.count.get(s, 0) - before}
            print("othertab", out["othertab"], flush=True)

            # oopif: the page embeds the other site's timer page.
            await c.send("Target.setAutoAttach",
                         {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True}, s)
            before = c.count.get(s, 0)
            await navigate(c, s, f"{a}/frame")
            await asyncio.sleep(0.5)
            targets, _, _ = await c.send("Target.getTargets")
            frames = [t for t in targets["targetInfos"] if t["type"] == "iframe"]
            page_events = c.count.get(s, 0) - before
            res = {"iframe_targets": len(frames), "events_on_page_session": page_events}
            if frames:
                fs = await attach(c, frames[0]["targetId"])
                await c.send("DOMStorage.enable", session=fs)
                misses = 0
                for i in range(200):
                    n, max_c, _ = await c.value("window.lastN", fs)
                    misses += max_c.get(fs, 0) < n
                res |= {"iframe_samples": 200, "iframe_misses": misses,
                        "events_on_iframe_session": c.count.get(fs, 0)}
            out["oopif"] = res
            print("oopif", res, flush=True)
            out["storage_ids"] = [json.loads(x) for x in c.ids]
            print("storageIds", out["storage_ids"], flush=True)
            c.reader.cancel()
    finally:
        p.kill(); p.wait(); shutil.rmtree(d, ignore_errors=True)
        server_a.shutdown(); server_b.shutdown()
    json.dump(out, sys.stdout, indent=1)


asyncio.run(main())
