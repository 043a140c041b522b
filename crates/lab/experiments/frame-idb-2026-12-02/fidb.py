"""A cross-site iframe's IndexedDB, tracked: which session answers Storage.getStorageKey for the
frame, and on which session the frame's IndexedDB change events come. The pages are served by
Fetch interception: a top page on 127.0.0.1 framing one on localhost. Prints what it finds.

Results: docs/measurements/README.md ("A cross-site iframe's IndexedDB, change-tracked").
Run: target/clients/venv/bin/python crates/lab/experiments/frame-idb-2026-12-02/fidb.py
"""
import asyncio, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

DOCS = {"http://127.0.0.1:9/": "<!doctype html><iframe src='http://localhost:9/f'></iframe>", "http://localhost:9/f": "<!doctype html><p>frame"}
WRITE = "new Promise((res) => { const r = indexedDB.open('fdb', 1); r.onupgradeneeded = () => r.result.createObjectStore('s'); r.onsuccess = () => { const tx = r.result.transaction('s', 'readwrite'); tx.objectStore('s').put('v', 'k'); tx.oncomplete = () => { r.result.close(); res(location.href + ' ' + location.ancestorOrigins[0]); }; }; })"


async def main():
    async with lab.browser(lab.LOCAL_CHROMIUM_FLAGS) as c:
        s = await c.new_page()
        await c.send("Page.enable", session=s)
        await c.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True}, session=s)
        await c.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=s)
        side = []

        async def serve():
            # Answers the paused requests; keeps every other event in `side`.
            while True:
                e = await c.events.get()
                if e["method"] != "Fetch.requestPaused":
                    side.append(e); continue
                body64 = lab.b64(DOCS.get(e["params"]["request"]["url"], ""))
                await c.send("Fetch.fulfillRequest", lab.fulfill_params(e["params"]["requestId"], body64), session=e.get("sessionId"))

        srv = asyncio.create_task(serve())
        # Only the page's session intercepts requests: the frame's auto-attached session gets no Fetch.enable.
        await c.send("Page.navigate", {"url": "http://127.0.0.1:9/"}, session=s)
        await asyncio.sleep(1.5)
        srv.cancel()
        att = [e for e in side if e["method"] == "Target.attachedToTarget"]
        print("attached", [(a["params"]["targetInfo"]["type"], a["params"]["targetInfo"]["url"]) for a in att])
        fa = next(a for a in att if a["params"]["targetInfo"]["type"] == "iframe")
        fs = fa["params"]["sessionId"]; fid = fa["params"]["targetInfo"]["targetId"]
        for name, sess in [("frame", fs), ("top", s)]:
            for params in [{"frameId": fid}, {}]:
                for m in ["Storage.getStorageKey", "Storage.getStorageKeyForFrame"]:
                    try: print(name, m, params, await c.send(m, params, session=sess))
                    except Exception as e: print(name, m, params, "ERR", e)
        key = (await c.send("Storage.getStorageKey", {"frameId": fid}, session=fs))["storageKey"]
        await c.send("Storage.trackIndexedDBForStorageKey", {"storageKey": key}, session=s)
        r = await c.send("Runtime.evaluate", {"expression": WRITE, "awaitPromise": True, "returnByValue": True}, session=fs)
        print("wrote", r["result"])
        await asyncio.sleep(0.5)
        evs = []
        while not c.events.empty(): evs.append(await c.events.get())
        print("events", [(e["method"], e.get("sessionId") == s, e.get("sessionId") == fs) for e in evs])
        print([(e["method"], e.get("sessionId") == s, e["params"]) for e in evs if "indexedDB" in e["method"]])

if __name__ == "__main__":
    asyncio.run(main())
