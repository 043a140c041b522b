import asyncio, json, os, shutil, subprocess, tempfile, threading, time, sys
sys.argv=[sys.argv[0]]
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "domstorage_cases.py")).read().split("async def main")[0])
async def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    a = f"http://127.0.0.1:{srv.server_address[1]}"
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
            for i in range(20):
                log.clear()
                t0 = time.perf_counter()
                await c.value(f"localStorage.setItem('a', '{i}'); 1", s)
                t1 = time.perf_counter()
                k = len(log)
                await c.value("1", s)
                t2 = time.perf_counter()
                kinds = [l[0] for l in log if l[0] in ("event", "reply")]
                while not any(l[0]=="event" for l in log): await asyncio.sleep(0.001)
                t3 = time.perf_counter()
                print(i, kinds, f"set {1e3*(t1-t0):.2f} ms, next {1e3*(t2-t1):.2f}, event by {1e3*(t3-t0):.2f}")
    finally:
        p.terminate(); p.wait(); shutil.rmtree(d, ignore_errors=True); srv.shutdown()
asyncio.run(main())
