import asyncio, json, os, subprocess, tempfile, time, sys, shutil, statistics, random, string
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
            await c.send("Runtime.enable", session=s)
            obj = (await c.send("Runtime.evaluate", {"expression": "globalThis"}, session=s))["result"]["objectId"]
            data = json.dumps([["k%d" % i, "".join(random.choice(string.ascii_letters + '"\\') for _ in range(1000))] for i in range(1100)])
            pieces = [data[i:i+256*1024] for i in range(0, len(data), 256*1024)]
            res = {"eval": [], "call": []}
            for rep in range(12):
                for k in ["eval", "call"]:
                    t = time.time()
                    if k == "eval":
                        await asyncio.gather(*[c.send("Runtime.evaluate", {"expression": f"(globalThis.H ??= [])[{i}] = {json.dumps(pc)}, true"}, session=s) for i, pc in enumerate(pieces)])
                    else:
                        await asyncio.gather(*[c.send("Runtime.callFunctionOn", {"functionDeclaration": f"function (p) {{ (globalThis.H ??= [])[{i}] = p; return true; }}", "objectId": obj, "arguments": [{"value": pc}]}, session=s) for i, pc in enumerate(pieces)])
                    r = await c.send("Runtime.evaluate", {"expression": "(() => { const n = globalThis.H.join('').length; globalThis.H = undefined; return n; })()", "returnByValue": True}, session=s)
                    assert r["result"]["value"] == len(data), r
                    res[k].append((time.time() - t) * 1000)
            for k, v in res.items(): print(k, f"{statistics.median(v):.1f}", [round(x, 1) for x in v])
            print(len(data), len(pieces))
    finally:
        p.kill(); p.wait(); shutil.rmtree(d, ignore_errors=True)
asyncio.run(main())
