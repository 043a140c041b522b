"""Can DevTools DOMStorage events tell a checkpoint that localStorage is unchanged?

Raw CDP against Debian Chromium (issue 22's idea: skip reading 1 MiB of unchanged
localStorage after a navigation). A capture could trust "no event since my last read" only
if every write that ran in the page before the capture's own Runtime.evaluate has its event
delivered on the connection before that evaluate's reply. Measured here:

  timer     the page writes localStorage every 1 ms (setInterval) and keeps the last value it
            wrote in a global; we evaluate that global and check the newest event seen
            before the reply is at least that value (a miss = a write the capture would not
            know of yet).
  burst     a single task writes 200 keys, then the evaluate: all 200 events before the reply?
  navigate  a new document writes a key in its inline script; after its load event, was the
            event seen before the reply of an evaluate reading the key?
  othertab  a second tab of the same origin writes; does the first tab's session hear it?
  oopif     a cross-site iframe (localhost vs 127.0.0.1) writes: on which session, if any?

Results: docs/measurements/domstorage-events-2026-12-02/results.txt.
Run: target/clients/venv/bin/python crates/lab/experiments/domstorage-events-2026-12-02/order_exp.py
"""
import asyncio, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

PAGES = {
    "/idle": "<title>idle</title>",
    "/timer": "<script>window.lastN=0;setInterval(()=>{const n=++window.lastN;"
              "localStorage.setItem('c',String(n))},1)</script>",
    "/onload": "<script>localStorage.setItem('navk',String(Math.random()))</script>",
    "/frame": "",  # filled in with the other site's URL
}


class Cdp(lab.Cdp):
    """Replies and events in arrival order. Events update the state as they arrive; a reply
    records the state at the moment it arrived (send_with_state returns it)."""

    def __init__(self, ws):
        self.max_c = {}      # session -> newest value of key 'c' seen in an event
        self.keys = {}       # session -> set of keys seen in events
        self.count = {}      # session -> events seen
        self.ids = []        # storageIds seen
        super().__init__(ws)

    def on_reply(self, msg):
        return dict(self.max_c), {k: set(v) for k, v in self.keys.items()}

    def on_event(self, msg):
        method, p, s = msg.get("method", ""), msg.get("params", {}), msg.get("sessionId")
        if method.startswith("DOMStorage.domStorageItem"):
            self.count[s] = self.count.get(s, 0) + 1
            sid = json.dumps(p.get("storageId"), sort_keys=True)
            if sid not in self.ids:
                self.ids.append(sid)
            key = p.get("key")
            if key is not None:
                self.keys.setdefault(s, set()).add(key)
            if key == "c" and p.get("newValue"):
                self.max_c[s] = max(self.max_c.get(s, 0), int(p["newValue"]))

    async def seen(self, expression, session):
        """The expression's value, with the state its reply recorded: (value, max_c, keys)."""
        r, (max_c, keys) = await self.send_with_state(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        return r["result"].get("value"), max_c, keys


def page(path):
    return PAGES.get(path.split("?")[0])


async def main():
    server_a, a = lab.serve(page)
    server_b, b = lab.serve(page)
    b = b.replace("127.0.0.1", "localhost")
    PAGES["/frame"] = f"<iframe src='{b}/timer'></iframe>"
    out = {}
    try:
        async with lab.browser(lab.FLAGS + lab.SITE_PER_PROCESS, cdp=Cdp) as c:
            s = await c.first_page()
            await c.enable(s, "Page", "Runtime", "DOMStorage")

            # timer
            await c.navigate(s, f"{a}/timer")
            misses, lags, samples = 0, [], 400
            for i in range(samples):
                n, max_c, _ = await c.seen("window.lastN", s)
                seen = max_c.get(s, 0)
                if seen < n:
                    misses += 1
                    lags.append(n - seen)
                await asyncio.sleep(0.001 * (i % 5))
            n, _, _ = await c.seen("window.lastN", s)
            out["timer"] = {"samples": samples, "misses": misses, "worst_lag_writes": max(lags or [0]),
                            "writes": n, "events": c.count.get(s, 0)}
            print("timer", out["timer"], flush=True)

            # burst
            await c.navigate(s, f"{a}/idle")
            complete = 0
            for i in range(50):
                prefix = f"burst{i}_"
                _, _, keys = await c.seen(
                    f"for (let k = 0; k < 200; k++) localStorage.setItem('{prefix}' + k, 'v'); 1", s)
                got = sum(1 for k in keys.get(s, ()) if k.startswith(prefix))
                complete += got == 200
            out["burst"] = {"evaluates": 50, "all_200_events_before_reply": complete}
            print("burst", out["burst"], flush=True)

            # navigate
            seen_before = 0
            for i in range(50):
                before = dict(c.count)
                await c.navigate(s, f"{a}/onload?{i}")
                v, _, keys = await c.seen("localStorage.getItem('navk')", s)
                seen_before += c.count.get(s, 0) > before.get(s, 0)
            out["navigate"] = {"navigations": 50, "event_seen_before_reply": seen_before}
            print("navigate", out["navigate"], flush=True)

            # othertab: a second tab writes on the timer page; the first idles.
            await c.navigate(s, f"{a}/idle")
            before = c.count.get(s, 0)
            r = await c.send("Target.createTarget", {"url": f"{a}/timer"})
            s2 = await c.attach(r["targetId"])
            await asyncio.sleep(1.0)
            n2, _, _ = await c.seen("window.lastN", s2)
            await c.send("Target.closeTarget", {"targetId": r["targetId"]})
            out["othertab"] = {"writes_in_other_tab": n2,
                               "events_on_first_tabs_session": c.count.get(s, 0) - before}
            print("othertab", out["othertab"], flush=True)

            # oopif: the page embeds the other site's timer page.
            await c.send("Target.setAutoAttach",
                         {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True}, s)
            before = c.count.get(s, 0)
            await c.navigate(s, f"{a}/frame")
            await asyncio.sleep(0.5)
            targets = await c.send("Target.getTargets")
            frames = [t for t in targets["targetInfos"] if t["type"] == "iframe"]
            page_events = c.count.get(s, 0) - before
            res = {"iframe_targets": len(frames), "events_on_page_session": page_events}
            if frames:
                fs = await c.attach(frames[0]["targetId"])
                await c.send("DOMStorage.enable", session=fs)
                misses = 0
                for i in range(200):
                    n, max_c, _ = await c.seen("window.lastN", fs)
                    misses += max_c.get(fs, 0) < n
                res |= {"iframe_samples": 200, "iframe_misses": misses,
                        "events_on_iframe_session": c.count.get(fs, 0)}
            out["oopif"] = res
            print("oopif", res, flush=True)
            out["storage_ids"] = [json.loads(x) for x in c.ids]
            print("storageIds", out["storage_ids"], flush=True)
    finally:
        server_a.shutdown(); server_b.shutdown()
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
