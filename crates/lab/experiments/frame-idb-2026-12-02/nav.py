"""A fresh browser's navigation to an intercepted restore URL, timed: until the request is paused,
until the navigation answers, until a first evaluate, and when the document's script ran. Also
whether the navigation started a renderer process (processes listed before and after).
Variants (arguments after the sample count): default, script (a 1 500-line document-start
script), nosi (site isolation off), spare (a spare renderer).

Results: docs/measurements/README.md ("Also tried for the fresh restore this session, no gain").
Run: target/clients/venv/bin/python crates/lab/experiments/frame-idb-2026-12-02/nav.py 12 default script
"""
import asyncio, os, subprocess, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

EXTRA = {"nosi": ["--disable-site-isolation-trials", "--disable-features=IsolateOrigins,site-per-process"],
         "spare": ["--enable-features=SpareRendererForSitePerProcess"]}


def renderers(pid):
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return sorted(int(l.split()[0]) for l in out.splitlines() if "--type=renderer" in l and "--user-data-dir" not in l and "chromium" in l)


async def sample(variant):
    async with lab.browser(lab.LOCAL_CHROMIUM_FLAGS, EXTRA.get(variant, [])) as c:
        s = await c.new_page()
        await c.send("Page.enable", session=s)
        if variant == "script":
            # A 1 500-line script stands in for capture.js.
            await c.send("Page.addScriptToEvaluateOnNewDocument", {"source": "(() => { " + "let a = 1;\n" * 1500 + "})()"}, session=s)
        await asyncio.sleep(0.4)
        before = renderers(c.proc.pid)
        body64 = lab.b64("<!doctype html><title>r</title><script>window.__s = performance.now()</script>")
        t0 = lab.now_ms()
        await c.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=s)
        nav = asyncio.create_task(c.send("Page.navigate", {"url": "http://127.0.0.1:9/__outlive_restore/1"}, session=s))
        paused = await c.event("Fetch.requestPaused")
        tp = lab.now_ms()
        await c.send("Fetch.fulfillRequest", lab.fulfill_params(paused["params"]["requestId"], body64), session=s)
        await nav
        tn = lab.now_ms()
        await c.send("Runtime.evaluate", {"expression": "1"}, session=s)
        t1 = lab.now_ms()
        r = await c.send("Runtime.evaluate", {"expression": "const n = performance.getEntriesByType('navigation')[0]; [window.__s, n.responseEnd, n.domInteractive, performance.timeOrigin]", "returnByValue": True}, session=s)
        v = r["result"]["value"]
        after = renderers(c.proc.pid)
        return {"paused": tp - t0, "navigated": tn - t0, "eval1": t1 - t0, "script": v[0] + v[3] - t0, "resp": v[1], "interactive": v[2], "newproc": int(before != after)}


async def main():
    out = await lab.in_turn(sample, sys.argv[2:], int(sys.argv[1]))
    for name, rows in out.items():
        print(f"{name:8}", "  ".join(f"{k}={m:6.1f}" for k, m in lab.medians(rows).items()))

if __name__ == "__main__":
    asyncio.run(main())
