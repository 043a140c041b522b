"""Which DevTools DOMStorage events a page session hears, and when, in a row of cases.
The cases: a write on the same document, a new document of the origin, cross-site and back,
another tab, and a cross-site iframe (with and without DOMStorage.enable on its session).
Then a same-site iframe of another origin, and a write after DOMStorage.disable.
Prints the log of sends, replies and events in arrival order. Raw CDP, Debian Chromium. domstorage_lag.py and in_page_pieces.py import it.

Results: docs/measurements/README.md ("A new document warmed up while idle").
Run: target/clients/venv/bin/python crates/lab/experiments/warm-up-2026-12-02/domstorage_cases.py
"""
import asyncio, contextlib, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

FLAGS = lab.CORE_FLAGS + lab.SITE_PER_PROCESS
# The tolerant navigation of these probes: the page may have no context for a moment.
NAV = {"tolerant": True, "pause": 0.05}


def page(path):
    """/frame?src=URL: a page framing URL; any other path: a small page."""
    if path.startswith("/frame"):
        return f"<title>f</title><iframe src='{path.split('src=')[1]}'></iframe>"
    return "<title>p</title><p>page</p>"


log = []


class LoggingCdp(lab.Cdp):
    """Logs sends, replies, DOMStorage events and attaches in `log`, in arrival order.

    `attached` is the session of the last target attached automatically."""

    def on_reply(self, msg):
        log.append(("reply", msg["id"]))

    def on_event(self, msg):
        p = msg.get("params", {})
        if msg["method"].startswith("DOMStorage"):
            log.append(("event", msg["method"], msg.get("sessionId", "")[:6], json.dumps(p.get("storageId")), p.get("key")))
        elif msg["method"] == "Target.attachedToTarget":
            log.append(("attached", p["targetInfo"]["type"], p["targetInfo"]["url"], p["sessionId"][:6]))
            self.attached = p["sessionId"]

    async def send_with_state(self, method, params=None, session=None):
        log.append(("send", self.n + 1, method, (params or {}).get("expression", "")[:60]))
        return await super().send_with_state(method, params, session)


def mark(t): log.append(("----", t)); print("----", t)


@contextlib.asynccontextmanager
async def watched_page(origin):
    """A fresh browser on a LoggingCdp; its page at origin/one, DOMStorage enabled: (c, s)."""
    async with lab.browser(FLAGS, graceful=True, cdp=LoggingCdp) as c:
        s = await c.first_page()
        await c.enable(s, "Page", "Runtime")
        await c.navigate(s, f"{origin}/one", **NAV)
        await c.send("DOMStorage.enable", session=s)
        yield c, s


async def main():
    srv, a = lab.serve(page)
    b = a.replace("127.0.0.1", "localhost")
    srv2 = None
    try:
        async with watched_page(a) as (c, s):
            mark("A setItem same doc")
            await c.value("localStorage.setItem('a', '1'); sessionStorage.setItem('s','1'); localStorage.b = '2'; 1", s)
            mark("B new doc same origin")
            await c.navigate(s, f"{a}/two", **NAV)
            await c.value("localStorage.setItem('a', '2'); 1", s)
            mark("C cross-site and back")
            await c.navigate(s, f"{b}/three", **NAV)
            await c.value("localStorage.setItem('x', '2'); 1", s)
            await c.navigate(s, f"{a}/four", **NAV)
            await c.value("localStorage.setItem('a', '3'); 1", s)
            mark("D another tab same origin")
            s2 = await c.new_page()
            await c.send("Runtime.enable", session=s2)
            await c.navigate(s2, f"{a}/tab", **NAV)
            await c.value("localStorage.setItem('fromtab', '1'); 1", s2)
            await asyncio.sleep(0.3)
            await c.value("1", s)
            mark("E cross-site iframe (OOPIF) write, page session only")
            await c.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True}, s)
            await c.navigate(s, f"{a}/frame?src={b}/inner", **NAV)
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
            # 127.0.0.1 on another port: the same site.
            srv2, o2 = lab.serve(page)
            await c.navigate(s, f"{a}/frame?src={o2}/inner", **NAV)
            await asyncio.sleep(0.5)
            # Write through an isolated world of the child (frames[0].localStorage is cross-origin).
            tree = await c.send("Page.getFrameTree", session=s)
            child = tree["frameTree"]["childFrames"][0]["frame"]["id"]
            ctx = (await c.send("Page.createIsolatedWorld", {"frameId": child, "worldName": "w"}, s))["executionContextId"]
            await c.send("Runtime.evaluate", {"expression": "localStorage.setItem('sameproc', '1'); 1", "contextId": ctx}, s)
            await asyncio.sleep(0.3); await c.value("1", s)
            mark("G disable then write")
            await c.send("DOMStorage.disable", session=s)
            await c.navigate(s, f"{a}/five", **NAV)
            await c.value("localStorage.setItem('a', '4'); 1", s)
            await asyncio.sleep(0.3); await c.value("1", s)
            mark("end")
    finally:
        srv.shutdown()
        if srv2: srv2.shutdown()
    for l in log:
        if l[0] in ("event", "----", "attached") or (l[0] == "send" and l[2] == "Runtime.evaluate" and "setItem" in l[3]) or l[0]=="reply": print(*l)

if __name__ == "__main__":
    asyncio.run(main())
