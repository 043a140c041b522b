"""Do Chromium's IndexedDB tracking events (Storage.trackIndexedDBForStorageKey) report every
change a capture's databases() check catches — a database created, deleted, upgraded with no
content change — and before the page's own request completes (the event on the connection
before the reply of the evaluate that awaited it)? Raw CDP, Debian Chromium."""
import asyncio, json, os, shutil, subprocess, tempfile, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import websockets
FLAGS = ["--headless", "--no-sandbox", "--remote-debugging-port=0", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--mute-audio"]
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        data = b"<title>p</title>"
        self.send_response(200); self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def log_message(self, *a): pass
OPEN = """(name, version, upgrade) => new Promise((res, rej) => { const r = version ? indexedDB.open(name, version) : indexedDB.open(name);
  r.onupgradeneeded = () => upgrade(r.result, r.transaction); r.onsuccess = () => { r.result.close(); res(1); }; r.onerror = () => rej(r.error); })"""
CASES = {
  "create empty db": lambda i: f"({OPEN})('c{i}', 1, () => {{}})",
  "create db with store": lambda i: f"({OPEN})('s{i}', 1, (db) => db.createObjectStore('x'))",
  "upgrade, nothing else": lambda i: f"({OPEN})('base', {i + 2}, () => {{}})",
  "upgrade, new empty store": lambda i: f"({OPEN})('base', {i + 200}, (db) => db.createObjectStore('st{i}'))",
  "upgrade, delete a store": lambda i: f"({OPEN})('base', {i + 400}, (db) => db.deleteObjectStore('st{i}'))",
  "delete db": lambda i: f"new Promise((res, rej) => {{ const r = indexedDB.deleteDatabase('c{i}'); r.onsuccess = () => res(1); r.onerror = () => rej(r.error); }})",
  "put a record (control)": lambda i: f"({OPEN})('base', undefined, () => {{}}).then(() => new Promise((res) => {{ const r = indexedDB.open('base'); r.onsuccess = () => {{ const db = r.result; const tx = db.transaction(db.objectStoreNames[0], 'readwrite'); tx.objectStore(db.objectStoreNames[0]).put({i}, 'k'); tx.oncomplete = () => {{ db.close(); res(1); }}; }}; }}))",
}
async def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H); threading.Thread(target=srv.serve_forever, daemon=True).start()
    a = f"http://127.0.0.1:{srv.server_address[1]}"
    d = tempfile.mkdtemp()
    p = subprocess.Popen(["/usr/bin/chromium", *FLAGS, f"--user-data-dir={d}", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pf = os.path.join(d, "DevToolsActivePort")
    while not (os.path.exists(pf) and len(open(pf).read().split("\n")) >= 2): await asyncio.sleep(0.01)
    port, path = open(pf).read().split("\n")[:2]
    try:
        async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
            n = 0; events = []; waiting = {}
            async def reader():
                async for m in ws:
                    msg = json.loads(m)
                    if "id" in msg: waiting.pop(msg["id"]).set_result((msg, len(events)))
                    elif msg.get("method", "").startswith("Storage.indexedDB"): events.append(msg["method"])
            asyncio.create_task(reader())
            async def send(m, params=None, s=None):
                nonlocal n; n += 1; f = asyncio.get_running_loop().create_future(); waiting[n] = f
                msg = {"id": n, "method": m, "params": params or {}}
                if s: msg["sessionId"] = s
                await ws.send(json.dumps(msg)); r, seen = await f
                if "error" in r: raise RuntimeError(r)
                return r.get("result"), seen
            t, _ = await send("Target.getTargets")
            page = next(x for x in t["targetInfos"] if x["type"] == "page")
            s = (await send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}))[0]["sessionId"]
            await send("Page.navigate", {"url": a + "/p"}, s); await asyncio.sleep(0.5)
            ev = lambda e: send("Runtime.evaluate", {"expression": e, "awaitPromise": True, "returnByValue": True}, s)
            r, _ = await ev(f"({OPEN})('base', 1, (db) => db.createObjectStore('first'))")
            await send("Storage.trackIndexedDBForStorageKey", {"storageKey": a + "/"}, s)
            for name, make in CASES.items():
                before_reply = after = 0; kinds = set()
                for i in range(20):
                    start = len(events)
                    r, seen = await ev(make(i))
                    if "exceptionDetails" in r: raise RuntimeError(json.dumps(r)[:400])
                    await asyncio.sleep(0.05)
                    before_reply += seen > start
                    after += len(events) > start
                    kinds.update(events[start:])
                print(f"{name:26s} event before reply {before_reply}/20, any event within 50 ms {after}/20, kinds {sorted(kinds)}", flush=True)
    finally:
        p.terminate(); p.wait(); shutil.rmtree(d, ignore_errors=True); srv.shutdown()
asyncio.run(main())
