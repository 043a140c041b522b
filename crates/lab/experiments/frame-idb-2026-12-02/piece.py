"""Handing 1.16 MB of escape-heavy text to a page in 256 KiB pieces, all in flight at once: as
string literals in Runtime.evaluate (outlive's way) against as Runtime.callFunctionOn arguments.
12 rounds in turn, each checked whole in the page; medians in ms.

Results: docs/measurements/README.md ("Also tried for the fresh restore this session, no gain").
Run: target/clients/venv/bin/python crates/lab/experiments/frame-idb-2026-12-02/piece.py
"""
import asyncio, json, os, random, statistics, string, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab


async def main():
    async with lab.browser(lab.LOCAL_CHROMIUM_FLAGS) as c:
        s = await c.new_page()
        await c.send("Runtime.enable", session=s)
        obj = (await c.send("Runtime.evaluate", {"expression": "globalThis"}, session=s))["result"]["objectId"]
        data = json.dumps([["k%d" % i, "".join(random.choice(string.ascii_letters + '"\\') for _ in range(1000))] for i in range(1100)])
        pieces = [data[i:i+256*1024] for i in range(0, len(data), 256*1024)]
        res = {"eval": [], "call": []}
        for rep in range(12):
            for k in ["eval", "call"]:
                t = time.perf_counter()
                if k == "eval":
                    await asyncio.gather(*[c.send("Runtime.evaluate", {"expression": f"(globalThis.H ??= [])[{i}] = {json.dumps(pc)}, true"}, session=s) for i, pc in enumerate(pieces)])
                else:
                    await asyncio.gather(*[c.send("Runtime.callFunctionOn", {"functionDeclaration": f"function (p) {{ (globalThis.H ??= [])[{i}] = p; return true; }}", "objectId": obj, "arguments": [{"value": pc}]}, session=s) for i, pc in enumerate(pieces)])
                r = await c.send("Runtime.evaluate", {"expression": "(() => { const n = globalThis.H.join('').length; globalThis.H = undefined; return n; })()", "returnByValue": True}, session=s)
                assert r["result"]["value"] == len(data), r
                res[k].append(lab.ms_since(t))
        for k, v in res.items(): print(k, f"{statistics.median(v):.1f}", [round(x, 1) for x in v])
        print(len(data), len(pieces))

if __name__ == "__main__":
    asyncio.run(main())
