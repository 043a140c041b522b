"""Where a fresh-browser restore's time goes: raw CDP against Debian Chromium.
Variants: restore document with the data inside ('doc') or a small document and the data by
Runtime.evaluate ('eval'); the profile on disk (/tmp) or tmpfs (/dev/shm)."""
import asyncio, json, os, subprocess, tempfile, time, base64, sys, shutil, statistics
import websockets

FLAGS = ["--headless", "--no-sandbox", "--remote-debugging-port=0", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-quic", "--disable-extensions", "--disable-default-apps", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--mute-audio", "--disable-crash-reporter",
         "--disable-breakpad", "--password-store=basic", "--use-mock-keychain"]

LOCAL = [["blob%d" % i, str(i % 10) * 65536] for i in range(16)]
WRITE_JS = r"""async (data) => {
  const t = { start: performance.timeOrigin + performance.now(), origin: performance.timeOrigin, nav: performance.getEntriesByType('navigation')[0].toJSON() };
  for (const [k, v] of data.local) localStorage.setItem(k, v);
  t.areas = performance.timeOrigin + performance.now();
  const req = (r) => new Promise((res, rej) => { r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
  const open = indexedDB.open('bench', 1);
  open.onupgradeneeded = () => open.result.createObjectStore('records', { keyPath: 'id' }).createIndex('byTag', 'tag');
  const db = await req(open);
  t.opened = performance.timeOrigin + performance.now();
  const tx = db.transaction(['records'], 'readwrite', { durability: 'relaxed' });
  const done = new Promise((res, rej) => { tx.oncomplete = res; tx.onabort = () => rej(tx.error); });
  const st = tx.objectStore('records');
  for (let i = 0; i < 1000; i++) st.put({ id: i, tag: 't' + (i % 7), name: 'record number ' + i, at: new Date(1700000000000 + i), tags: ['a', 'b'], n: i * 1.5 });
  await done; db.close();
  t.idb = performance.timeOrigin + performance.now();
  const recs = []; for (let i = 0; i < 1000; i++) recs.push({ id: i, tag: 't' + (i % 7), name: 'record number ' + i, at: new Date(1700000000000 + i), tags: ['a', 'b'], n: i * 1.5 });
  let c0 = performance.now(); structuredClone(recs); t.clone = performance.now() - c0;
  c0 = performance.now();
  const open2 = indexedDB.open('bench2', 1);
  open2.onupgradeneeded = () => open2.result.createObjectStore('records', { keyPath: 'id' }).createIndex('byTag', 'tag');
  const db2 = await req(open2);
  t.open2 = performance.now() - c0; c0 = performance.now();
  const tx2 = db2.transaction(['records'], 'readwrite', { durability: 'relaxed' });
  const done2 = new Promise((res, rej) => { tx2.oncomplete = res; tx2.onabort = () => rej(tx2.error); });
  const st2 = tx2.objectStore('records');
  for (const r of recs) st2.put(r);
  t.queued2 = performance.now() - c0;
  await done2; db2.close();
  t.tx2 = performance.now() - c0;
  c0 = performance.now();
  const open3 = indexedDB.open('bench3', 1);
  open3.onupgradeneeded = () => open3.result.createObjectStore('records', { keyPath: 'id' });
  const db3 = await req(open3);
  const tx3 = db3.transaction(['records'], 'readwrite', { durability: 'relaxed' });
  const done3 = new Promise((res, rej) => { tx3.oncomplete = res; tx3.onabort = () => rej(tx3.error); });
  tx3.objectStore('records').put({ id: 0, all: recs });
  await done3; db3.close();
  t.oneRecord = performance.now() - c0;
  return t;
}"""

class Cdp:
    def __init__(self, ws):
        self.ws, self.n, self.waiting, self.events = ws, 0, {}, asyncio.Queue()
        self.reader = asyncio.create_task(self.read())
    async def read(self):
        async for m in self.ws:
            msg = json.loads(m)
            if "id" in msg:
                self.waiting.pop(msg["id"]).set_result(msg)
            else:
                msg["_t"] = time.time() * 1000
                await self.events.put(msg)
    async def send(self, method, params=None, session=None):
        self.n += 1
        f = asyncio.get_running_loop().create_future()
        self.waiting[self.n] = f
        m = {"id": self.n, "method": method, "params": params or {}}
        if session: m["sessionId"] = session
        await self.ws.send(json.dumps(m))
        r = await f
        if "error" in r: raise RuntimeError(f"{method}: {r['error']}")
        return r["result"]
    async def send_raw(self, build):
        self.n += 1
        f = asyncio.get_running_loop().create_future()
        self.waiting[self.n] = f
        await self.ws.send(build(self.n))
        r = await f
        if "error" in r: raise RuntimeError(str(r["error"]))
        return r["result"]
    async def event(self, method):
        while True:
            e = await self.events.get()
            if e["method"] == method: return e

async def sample(variant, root, extra=()):
    d = tempfile.mkdtemp(dir=root)
    p = subprocess.Popen(["/usr/bin/chromium", *FLAGS, *extra, f"--user-data-dir={d}", "about:blank"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = os.path.join(d, "DevToolsActivePort")
        while not (os.path.exists(port_file) and len(open(port_file).read().split("\n")) >= 2):
            await asyncio.sleep(0.01)
        port, path = open(port_file).read().split("\n")[:2]
        async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
            c = Cdp(ws)
            targets = (await c.send("Target.getTargets"))["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            s = (await c.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}))["sessionId"]
            await c.send("Page.enable", session=s)
            await asyncio.sleep(0.3)  # let the browser settle as after a launch
            data = json.dumps({"local": LOCAL})
            if variant == "doc":
                body = ("<!doctype html><script>window.__r = (" + WRITE_JS + ")(JSON.parse(" +
                        json.dumps(data).replace("</", "<\\/") + "));</script>")
            elif variant == "fetchjson":
                body = ("<!doctype html><script>window.__r = fetch('/__outlive_restore/1.json').then((r) => r.json()).then(" + WRITE_JS + ");</script>")
            else:
                body = "<!doctype html><title>r</title>"
            b64 = base64.b64encode(body.encode()).decode()
            data_b64 = base64.b64encode(data.encode()).decode()
            hdr = [{"name": "content-type", "value": "text/html; charset=utf-8"}]
            def fulfill(req_id, body64, ctype):
                pre = json.dumps({"method": "Fetch.fulfillRequest", "sessionId": s, "params": {"requestId": req_id, "responseCode": 200, "responseHeaders": [{"name": "content-type", "value": ctype}], "body": "BODY"}})
                head, tail = pre.split('"BODY"')
                return lambda n: '{"id": %d, ' % n + head[1:] + '"' + body64 + '"' + tail
            eval_expr = "(" + WRITE_JS + ")(JSON.parse(" + json.dumps(data) + "))"
            eval_msg_pre = json.dumps({"method": "Runtime.evaluate", "sessionId": s, "params": {"expression": "EXPR", "awaitPromise": True, "returnByValue": True}})
            eh, et = eval_msg_pre.split('"EXPR"')
            eval_body = json.dumps(eval_expr)
            t0 = time.time() * 1000
            await c.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=s)
            nav = asyncio.create_task(c.send("Page.navigate", {"url": "https://app.example/__outlive_restore/1"}, session=s))
            paused = await c.event("Fetch.requestPaused")
            t_paused = paused["_t"]
            await c.send_raw(fulfill(paused["params"]["requestId"], b64, "text/html; charset=utf-8"))
            t_fulfilled = time.time() * 1000
            await nav
            t_nav = time.time() * 1000
            if variant == "fetchjson":
                paused2 = await c.event("Fetch.requestPaused")
                await c.send_raw(fulfill(paused2["params"]["requestId"], data_b64, "application/json"))
                t_nav = time.time() * 1000
            if variant == "eval":
                r = await c.send_raw(lambda n: '{"id": %d, ' % n + eh[1:] + eval_body + et)
            else:
                r = await c.send("Runtime.evaluate", {"expression": "new Promise((r) => { const w = () => window.__r ? r(window.__r) : setTimeout(w, 1); w(); })", "awaitPromise": True, "returnByValue": True}, session=s)
            r = {"result": r["result"]} if "result" in r else r
            t_end = time.time() * 1000
            if "value" not in r["result"]: raise RuntimeError(json.dumps(r)[:2000])
            v = r["result"]["value"]
            await c.send("Fetch.disable", session=s)
            c.reader.cancel()
            return {"paused": t_paused - t0, "fulfilled": t_fulfilled - t0, "navigated": t_nav - t0,
                    "script": v["start"] - t0, "areas": v["areas"] - v["start"], "open": v["opened"] - v["areas"],
                    "idb_tx": v["idb"] - v["opened"], "clone": v["clone"], "open2": v["open2"], "queued2": v["queued2"], "tx2": v["tx2"], "one": v["oneRecord"], "total": t_end - t0, "timeOrigin": v["origin"] - t0, "fetchStart": v["nav"]["fetchStart"], "responseEnd": v["nav"]["responseEnd"], "domInteractive": v["nav"]["domInteractive"], "domComplete": v["nav"]["domComplete"]}
    finally:
        p.kill(); p.wait(); shutil.rmtree(d, ignore_errors=True)

async def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    variants = ["eval", "doc", "fetchjson"]
    out = {k: [] for k in variants}
    for i in range(n):
        for k in variants:
            out[k].append(await sample(k, "/tmp"))
    for name, rows in out.items():
        keys = rows[0].keys()
        print(f"{name:14}", "  ".join(f"{k}={statistics.median(x[k] for x in rows):6.1f}" for k in keys))
    json.dump(out, open("/tmp/exp/restore_exp.json", "w"), indent=1)

if __name__ == "__main__":
    asyncio.run(main())
