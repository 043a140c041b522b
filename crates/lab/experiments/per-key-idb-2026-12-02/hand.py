"""Handing 1.16 MB of restore data to a fresh restore document. Pieces evaluated as string
literals (what outlive does), against the document fetching it as a sub-resource answered
through Fetch interception, and more ways ($MODES). Raw CDP, a fresh Chromium and profile per
sample. inHand is the page clock (performance.now(), from the navigation's start) when the
data is parsed and in hand.
Modes: pieces[KiB] (256 by default), fetch, dom (DOMStorage.setDOMStorageItem for the items),
obj (Runtime.callFunctionOn, the data as a JSON value), none (the document alone).

Results: docs/measurements/per-key-idb-2026-12-02/restore-experiments.txt.
Run: MODES=pieces,fetch N=8 target/clients/venv/bin/python crates/lab/experiments/per-key-idb-2026-12-02/hand.py
"""
import asyncio, json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

ORIGIN = "http://127.0.0.1:9"
rec = lambda i: json.dumps({"id": i, "tag": "t%d" % (i % 7), "name": "record number %d" % i, "tags": ["a", "b"], "n": i * 1.5})
DATA = json.dumps({"local": lab.LOCAL_ITEMS, "session": None,
        "idb": [{"name": "bench", "version": 1, "stores": [{"name": "records", "keyPath": "id", "autoIncrement": False, "indexes": [],
                 "records": [[str(i), rec(i)] for i in range(1000)]}]}], "children": 0, "childTimeoutMs": 5000})

DOC_PIECES = "<!doctype html><meta charset=utf-8><script>window.RUN = (d) => { if (d.local) for (const [k, v] of d.local) localStorage.setItem(k, v); return d; };</script><body></body>"
DOC_FETCH = ("<!doctype html><meta charset=utf-8><script>window.D = fetch('/__r/data').then((r) => r.json())"
             ".then((d) => { window.T = performance.now(); return d; });</script><body></body>")


def once_loaded(then):
    """An async expression: `then` (statements) once the document is past DOMContentLoaded."""
    return ("(async () => { if (document.readyState === 'loading') await new Promise((r) => addEventListener('DOMContentLoaded', r, { once: true }));"
            f" {then} }})()")


async def sample(mode):
    async with lab.browser(lab.FLAGS + lab.SITE_PER_PROCESS) as c:
        s = await c.first_page()
        doc = DOC_FETCH if mode == "fetch" else DOC_PIECES
        bodies = {ORIGIN + "/__r/": lab.b64(doc), ORIGIN + "/__r/data": lab.b64(DATA)}
        def on(ev):
            if ev.get("method") == "Fetch.requestPaused":
                u = ev["params"]["request"]["url"]
                ct = "application/json" if u.endswith("/data") else "text/html; charset=utf-8"
                asyncio.ensure_future(c.send("Fetch.fulfillRequest", lab.fulfill_params(ev["params"]["requestId"], bodies.get(u, ""), ct,
                    [{"name": "Cache-Control", "value": "no-store"}]), session=s))
        c.handlers.append(on)
        await c.send("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]}, session=s)
        t0 = time.perf_counter()
        await c.send("Page.navigate", {"url": ORIGIN + "/__r/"}, session=s)
        nav = lab.ms_since(t0)
        if mode.startswith("pieces"):
            size = int(mode[6:] or 256) * 1024
            pieces = [DATA[i:i + size] for i in range(0, len(DATA), size)]
            n = len(pieces)
            await asyncio.gather(*[c.send("Runtime.evaluate", {"expression": f"((globalThis.H ??= Array({n}))[{i}] = {json.dumps(pc)}, true)"}, session=s) for i, pc in enumerate(pieces)])
            expr = once_loaded("const d = RUN(JSON.parse(H.join(''))); H = undefined; return [performance.now(), d.local.length];")
        elif mode == "dom":
            data = json.loads(DATA); local = data["local"]; data["local"] = None
            rest = json.dumps(data)
            sends = [c.send("DOMStorage.setDOMStorageItem", {"storageId": {"securityOrigin": ORIGIN, "isLocalStorage": True}, "key": k, "value": v}, session=s) for k, v in local]
            sends.append(c.send("Runtime.evaluate", {"expression": f"(globalThis.H = [{json.dumps(rest)}], true)"}, session=s))
            await asyncio.gather(*sends)
            expr = once_loaded("const d = RUN(JSON.parse(H.join(''))); H = undefined; return [performance.now(), localStorage.length];")
        elif mode == "none":
            expr = once_loaded("return [performance.now(), 16];")
        elif mode == "obj":
            g = (await c.send("Runtime.evaluate", {"expression": "globalThis"}, session=s))["result"]["objectId"]
            await c.send("Runtime.callFunctionOn", {"functionDeclaration": "function (d) { globalThis.H = d; }", "objectId": g, "arguments": [{"value": json.loads(DATA)}]}, session=s)
            expr = once_loaded("const d = RUN(H); H = undefined; return [performance.now(), d.local.length];")
        else:
            expr = "window.D.then((d) => [window.T, d.local.length])"
        r = await c.send("Runtime.evaluate", {"expression": expr, "awaitPromise": True, "returnByValue": True}, session=s)
        if "value" not in r["result"]: print(mode, json.dumps(r)[:600]); raise SystemExit(1)
        at, n = r["result"]["value"]
        assert n == 16, r
        return {"nav": nav, "inHand": at, "wall": lab.ms_since(t0)}


async def main():
    res = await lab.in_turn(sample, os.environ.get("MODES", "pieces,fetch").split(","), int(os.environ.get("N", "10")))
    print(len(DATA), "bytes")
    for m, rows in res.items():
        print(m, {k: round(v, 1) for k, v in lab.medians(rows).items()}, [round(r["inHand"], 1) for r in rows])

if __name__ == "__main__":
    asyncio.run(main())
