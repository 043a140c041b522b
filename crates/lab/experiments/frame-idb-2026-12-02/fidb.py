import asyncio, json, os, subprocess, tempfile, time, base64, sys, shutil
import websockets
sys.path.insert(0, "/tmp/exp")
from nav import FLAGS, Cdp
async def main():
    d = tempfile.mkdtemp()
    p = subprocess.Popen(["/usr/bin/chromium", *FLAGS, f"--user-data-dir={d}", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pf = os.path.join(d, "DevToolsActivePort")
        while not (os.path.exists(pf) and len(open(pf).read().split("\n")) >= 2): await asyncio.sleep(0.01)
        port, path = open(pf).read().split("\n")[:2]
        async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
            c = Cdp(ws)
            tid = (await c.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
            s = (await c.send("Target.attachToTarget", {"targetId": tid, "flatten": True}))["sessionId"]
            await c.send("Page.enable", session=s)
            await c.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True}, session=s)
            await c.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=s)
            docs = {"http://127.0.0.1:9/": "<!doctype html><iframe src='http://localhost:9/f'></iframe>", "http://localhost:9/f": "<!doctype html><p>frame"}
            async def serve():
                while True:
                    e = await c.events.get()
                    if e["method"] != "Fetch.requestPaused":
                        side.append(e); continue
                    url = e["params"]["request"]["url"]
                    sess = e.get("sessionId")
                    await c.send("Fetch.fulfillRequest", {"requestId": e["params"]["requestId"], "responseCode": 200, "responseHeaders": [{"name": "content-type", "value": "text/html"}], "body": base64.b64encode(docs.get(url, "").encode()).decode()}, session=sess)
            side = []
            srv = asyncio.create_task(serve())
            # frame sessions need Fetch too (auto-attached, not paused)
            attached = []
            async def on_attach():
                while True:
                    e = await c.event("Target.attachedToTarget")
                    fs = e["params"]["sessionId"]; attached.append(fs)
                    await c.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=fs)
            # can't consume two event types from one queue reliably: do it simply
            nav = asyncio.create_task(c.send("Page.navigate", {"url": "http://127.0.0.1:9/"}, session=s))
            await nav
            await asyncio.sleep(1.5)
            srv.cancel()
            evs = side
            att = [e for e in evs if e["method"] == "Target.attachedToTarget"]
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
            r = await c.send("Runtime.evaluate", {"expression": "new Promise((res) => { const r = indexedDB.open('fdb', 1); r.onupgradeneeded = () => r.result.createObjectStore('s'); r.onsuccess = () => { const tx = r.result.transaction('s', 'readwrite'); tx.objectStore('s').put('v', 'k'); tx.oncomplete = () => { r.result.close(); res(location.href + ' ' + location.ancestorOrigins[0]); }; }; })", "awaitPromise": True, "returnByValue": True}, session=fs)
            print("wrote", r["result"])
            await asyncio.sleep(0.5)
            evs = []
            while not c.events.empty(): evs.append(await c.events.get())
            print("events", [(e["method"], e.get("sessionId") == s, e.get("sessionId") == fs) for e in evs])
            print([(e["method"], e.get("sessionId") == s, e["params"]) for e in evs if "indexedDB" in e["method"]])
    finally:
        p.kill(); p.wait(); shutil.rmtree(d, ignore_errors=True)
asyncio.run(main())
