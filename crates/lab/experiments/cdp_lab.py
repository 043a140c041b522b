"""What the lab's experiment scripts share: raw CDP over a websocket to a fresh Chromium.

A script puts this folder on sys.path from its own location, then imports this module.
It gives Chromium's flags, a fresh browser on a fresh profile, a small CDP client, a local
page server, the bench's storage seeds as page script, and timing helpers.
Needs Python 3.11 with `websockets` (target/clients/venv has it; `scripts/clients` makes it).
"""
import asyncio
import base64
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# The repository's root, its JavaScript and its measurements.
REPO = Path(__file__).resolve().parents[3]
JS_DIR = REPO / "crates" / "outlive" / "src" / "js"
MEASUREMENTS = REPO / "docs" / "measurements"

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

# The flags every experiment launched Chromium with.
CORE_FLAGS = ["--headless", "--no-sandbox", "--remote-debugging-port=0", "--disable-gpu",
              "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check"]
# Background work off too: most experiments' set.
FLAGS = CORE_FLAGS + ["--disable-background-networking", "--disable-component-update",
                      "--disable-sync", "--disable-extensions", "--disable-default-apps",
                      "--mute-audio"]
# FLAGS and the rest of outlive's LocalChromium set of the time.
LOCAL_CHROMIUM_FLAGS = FLAGS + ["--disable-quic", "--disable-crash-reporter", "--disable-breakpad",
                                "--password-store=basic", "--use-mock-keychain"]
SITE_PER_PROCESS = ["--site-per-process"]


# Timing.

def now_ms():
    """Wall clock in ms, as the page's performance.timeOrigin counts."""
    return time.time() * 1000


def ms_since(t0):
    """Milliseconds since t0, a time.perf_counter() reading."""
    return (time.perf_counter() - t0) * 1e3


def medians(rows, keys=None):
    """The median of each key over rows (dicts); by default the numeric keys of the first row."""
    keys = keys or [k for k in rows[0] if isinstance(rows[0][k], (int, float))]
    return {k: statistics.median(r[k] for r in rows) for k in keys}


async def in_turn(sample, modes, n):
    """n rounds of `await sample(mode)` for each mode in turn: {mode: [rows]}."""
    res = {m: [] for m in modes}
    for _ in range(n):
        for m in modes:
            res[m].append(await sample(m))
    return res


# The bench's storage as page script.

# One of the bench's 1 000 IndexedDB records, for index i.
RECORD_JS = ("{ id: i, tag: 't' + (i % 7), name: 'record number ' + i, "
             "at: new Date(1700000000000 + i), tags: ['a', 'b'], n: i * 1.5 }")
# The bench's 1 MiB of localStorage: 16 items of 64 Ki one-byte characters.
LOCAL_ITEMS = [["blob%d" % i, str(i % 10) * 65536] for i in range(16)]
SEED_LOCAL_JS = "for (let i = 0; i < 16; i++) localStorage.setItem('blob' + i, String(i % 10).repeat(65536));"
# Awaited in an async function: database 'bench', store 'records' (index byTag), 1 000 records.
SEED_IDB_JS = """await new Promise((resolve, reject) => {
  const r = indexedDB.open('bench', 1);
  r.onupgradeneeded = () => r.result.createObjectStore('records', { keyPath: 'id' }).createIndex('byTag', 'tag');
  r.onerror = () => reject(r.error);
  r.onsuccess = () => { const tx = r.result.transaction('records', 'readwrite'); const st = tx.objectStore('records');
    for (let i = 0; i < 1000; i++) st.put(""" + RECORD_JS + """);
    tx.oncomplete = () => { r.result.close(); resolve(true); }; }; });"""

# Helpers for timing the 1 000 puts: recs(from, to), openDb(upgrade), putAll(db, records).
PUTS_JS = r"""
const recs = (from, to) => { const a = []; for (let i = from; i < to; i++) a.push(""" + RECORD_JS + r"""); return a; };
const openDb = (upgrade) => new Promise((res, rej) => { const r = indexedDB.open('bench', 1);
  r.onupgradeneeded = () => { if (upgrade) r.result.createObjectStore('records', { keyPath: 'id' }).createIndex('byTag', 'tag'); };
  r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
const putAll = (db, rs) => new Promise((res, rej) => { const tx = db.transaction('records', 'readwrite', { durability: 'relaxed' });
  const st = tx.objectStore('records'); const t = performance.now(); for (const v of rs) st.put(v); const sync = performance.now() - t;
  tx.oncomplete = () => res(sync); tx.onabort = () => rej(tx.error); });
"""
# The puts on the page's main thread (what restore.js does); its phases in ms.
PUTS_MAIN_JS = "(async () => {" + PUTS_JS + r"""
const T = {}; let t = performance.now();
const rs = recs(0, 1000); T.build = performance.now() - t; t = performance.now();
const db = await openDb(true); T.open = performance.now() - t; t = performance.now();
T.putSync = await putAll(db, rs); T.puts = performance.now() - t; db.close(); return T; })()"""
# The records split between globalThis.NW (default 2) dedicated workers, each its own transaction.
PUTS_WORKERS_JS = "(async () => {" + PUTS_JS + r"""
const T = {}; let t = performance.now();
const db = await openDb(true); db.close(); T.open = performance.now() - t; t = performance.now();
const src = `""" + PUTS_JS.replace("`", "\\`") + r"""
onmessage = async (e) => { const db = await openDb(false); const rs = recs(e.data[0], e.data[1]); const s = await putAll(db, rs); db.close(); postMessage(s); };`;
const url = URL.createObjectURL(new Blob([src], { type: 'text/javascript' }));
const n = +(globalThis.NW || 2);
const ws = Array.from({ length: n }, () => new Worker(url));
const parts = ws.map((w, i) => new Promise((res) => { w.onmessage = (e) => res(e.data); w.postMessage([Math.floor(i * 1000 / n), Math.floor((i + 1) * 1000 / n)]); }));
const syncs = await Promise.all(parts); T.putSync = Math.max(...syncs); T.puts = performance.now() - t; ws.forEach((w) => w.terminate()); return T; })()"""


# A local page server.

def serve(page):
    """Serves HTML on 127.0.0.1 at a free port, from a daemon thread.

    `page` is the body for every path, or a function of the path giving the body (None: 404).
    Returns the server (shutdown() ends it) and its origin."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = page(self.path) if callable(page) else page
            if body is None:
                self.send_response(404); self.end_headers(); return
            data = body.encode() if isinstance(body, str) else body
            self.send_response(200); self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


# Answers to intercepted requests (Fetch domain).

def b64(data):
    """Base64 text of a str (as UTF-8) or bytes: a Fetch.fulfillRequest body."""
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def fulfill_params(request_id, body64, content_type="text/html", headers=()):
    """Fetch.fulfillRequest's parameters: status 200, the content type and any more headers."""
    return {"requestId": request_id, "responseCode": 200,
            "responseHeaders": [{"name": "content-type", "value": content_type}, *headers], "body": body64}


# The CDP client.

class Cdp:
    """Commands and their replies on one browser websocket, sessions flattened.

    A reader task hands each reply to its command and each event to on_event. By default an
    event gets its arrival time (`_t`, ms), goes to every handler, then into the `events` queue.
    A subclass may record state in on_reply: send_with_state returns it beside the result."""

    def __init__(self, ws):
        self.ws, self.n, self.waiting = ws, 0, {}
        self.events, self.handlers = asyncio.Queue(), []
        self.reader = asyncio.create_task(self.read())

    async def read(self):
        async for m in self.ws:
            msg = json.loads(m)
            if "id" in msg:
                f = self.waiting.pop(msg["id"], None)
                if f:
                    f.set_result((msg, self.on_reply(msg)))
            else:
                self.on_event(msg)

    def on_reply(self, msg):
        """The state to record as a reply arrives (before any later event is read)."""
        return None

    def on_event(self, msg):
        msg["_t"] = now_ms()
        for h in self.handlers:
            h(msg)
        self.events.put_nowait(msg)

    async def post(self, build):
        """Sends build(id), a message as text; returns the future of its (reply, state)."""
        self.n += 1
        f = asyncio.get_running_loop().create_future()
        self.waiting[self.n] = f
        await self.ws.send(build(self.n))
        return f

    async def send_raw(self, build):
        """Sends build(id) and awaits its reply's result."""
        msg, _ = await (await self.post(build))
        if "error" in msg:
            raise RuntimeError(str(msg["error"]))
        return msg["result"]

    async def send_with_state(self, method, params=None, session=None):
        def build(n):
            m = {"id": n, "method": method, "params": params or {}}
            if session:
                m["sessionId"] = session
            return json.dumps(m)
        msg, state = await (await self.post(build))
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error']}")
        return msg["result"], state

    async def send(self, method, params=None, session=None):
        return (await self.send_with_state(method, params, session))[0]

    async def event(self, method):
        """The next queued event of this method; those of others before it are dropped."""
        while True:
            e = await self.events.get()
            if e["method"] == method:
                return e

    async def value(self, expression, session):
        """Evaluates in the session's page, awaiting a promise; the value, or raises on an exception."""
        r = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                 "awaitPromise": True}, session)
        if "exceptionDetails" in r:
            raise RuntimeError(json.dumps(r["exceptionDetails"])[:500])
        return r["result"].get("value")

    async def attach(self, target_id):
        r = await self.send("Target.attachToTarget", {"targetId": target_id, "flatten": True})
        return r["sessionId"]

    async def first_page(self):
        """A session on the browser's first page target (the about:blank it started with)."""
        t = await self.send("Target.getTargets")
        return await self.attach(next(x for x in t["targetInfos"] if x["type"] == "page")["targetId"])

    async def new_page(self, url="about:blank"):
        """A session on a new page target."""
        return await self.attach((await self.send("Target.createTarget", {"url": url}))["targetId"])

    async def enable(self, session, *domains):
        for d in domains:
            await self.send(f"{d}.enable", session=session)

    async def navigate(self, session, url, tries=500, pause=0.01, tolerant=False):
        """Page.navigate, then polls until the document at url is complete.

        `tolerant` retries an evaluate that fails (no context yet) instead of raising."""
        await self.send("Page.navigate", {"url": url}, session)
        for _ in range(tries):
            try:
                v = await self.value("document.readyState + ' ' + location.href", session)
                if v and v.startswith("complete") and v.endswith(url):
                    return
            except RuntimeError:
                if not tolerant:
                    raise
            await asyncio.sleep(pause)
        raise RuntimeError(f"{url} did not load")


# A fresh Chromium.

async def devtools_url(profile):
    """The browser websocket's URL, once Chromium has written DevToolsActivePort in profile."""
    pf = os.path.join(profile, "DevToolsActivePort")
    while not (os.path.exists(pf) and len(open(pf).read().split("\n")) >= 2):
        await asyncio.sleep(0.01)
    port, path = open(pf).read().split("\n")[:2]
    return f"ws://127.0.0.1:{port}{path}"


@contextlib.asynccontextmanager
async def browser(flags=FLAGS, extra=(), root=None, graceful=False, cdp=Cdp, after_stop=None):
    """A fresh Chromium on a fresh profile (made under root), connected: yields a `cdp` client.

    The client's `proc` and `profile` are Chromium's process and profile folder. On leaving,
    Chromium is killed (terminated if graceful) and waited for. after_stop(profile) runs then,
    and the profile is removed."""
    import websockets  # here, so that a script which launches nothing needs no websockets

    profile = tempfile.mkdtemp(dir=root)
    proc = subprocess.Popen([CHROMIUM, *flags, *extra, f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = await devtools_url(profile)
        async with websockets.connect(url, max_size=None) as ws:
            c = cdp(ws)
            c.proc, c.profile = proc, profile
            try:
                yield c
            finally:
                c.reader.cancel()
    finally:
        proc.terminate() if graceful else proc.kill()
        proc.wait()
        if after_stop:
            after_stop(profile)
        shutil.rmtree(profile, ignore_errors=True)


async def fresh_page_evaluate(origin, path, expression, flags=FLAGS, after_stop=None):
    """A fresh browser's first page loads origin + path; one evaluate, timed from here.

    Returns the value (a dict; the whole reply if none), with `wall` (ms) added."""
    async with browser(flags, graceful=True, after_stop=after_stop) as c:
        s = await c.first_page()
        await c.navigate(s, origin + path)
        t0 = time.perf_counter()
        r = await c.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                              "awaitPromise": True}, s)
        T = r["result"].get("value") or r
        T["wall"] = ms_since(t0)
        return T


async def time_puts(expressions, flags=FLAGS + SITE_PER_PROCESS, after_stop=None):
    """The IndexedDB puts scripts' run: each mode of $MODES (main,workers2) in turn, $N (8) rounds.

    A sample is a fresh browser, a small page of a local origin, then expressions[mode] timed.
    Modes named workers* get globalThis.NW = $NW (2) set first. Prints each mode's medians."""
    srv, origin = serve("<title>p</title>")

    async def sample(mode):
        expr = expressions[mode]
        if mode.startswith("workers"):
            expr = f"globalThis.NW={os.environ.get('NW', '2')};" + expr
        return await fresh_page_evaluate(origin, "/r", expr, flags, after_stop)

    try:
        res = await in_turn(sample, os.environ.get("MODES", "main,workers2").split(","),
                            int(os.environ.get("N", "8")))
        for m, rows in res.items():
            print(m, {k: round(v, 1) for k, v in medians(rows).items()})
    finally:
        srv.shutdown()
