import asyncio, json, time, sys, statistics
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import restore_exp as R
import os, subprocess, tempfile, shutil, websockets

async def main():
    d = tempfile.mkdtemp()
    p = subprocess.Popen(["/usr/bin/chromium", *R.FLAGS, f"--user-data-dir={d}", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pf = os.path.join(d, "DevToolsActivePort")
    while not (os.path.exists(pf) and len(open(pf).read().split("\n")) >= 2): await asyncio.sleep(0.01)
    port, path = open(pf).read().split("\n")[:2]
    async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
        c = R.Cdp(ws)
        page = next(t for t in (await c.send("Target.getTargets"))["targetInfos"] if t["type"] == "page")
        s = (await c.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}))["sessionId"]
        for size in [1000, 100_000, 400_000, 1_200_000]:
            for chunks in [1, 8]:
                xs = []
                for _ in range(5):
                    part = "7" * (size // chunks)
                    msgs = [json.dumps({"id": 0, "sessionId": s, "method": "Runtime.evaluate", "params": {"expression": f"(globalThis.b = (globalThis.b || '') + '{part}').length", "returnByValue": True}}) for _ in range(chunks)]
                    await c.send("Runtime.evaluate", {"expression": "globalThis.b = ''"}, session=s)
                    t0 = time.perf_counter()
                    futs = []
                    for m in msgs:
                        c.n += 1
                        f = asyncio.get_running_loop().create_future(); c.waiting[c.n] = f
                        await ws.send('{"id": %d,' % c.n + m[len('{"id": 0,'):])
                        futs.append(f)
                    await asyncio.gather(*futs)
                    xs.append((time.perf_counter() - t0) * 1000)
                print(f"evaluate {size:>9} bytes in {chunks} message(s): median {statistics.median(xs):6.1f} ms {[round(x,1) for x in xs]}")
        c.reader.cancel()
    p.kill(); p.wait(); shutil.rmtree(d, ignore_errors=True)
asyncio.run(main())
