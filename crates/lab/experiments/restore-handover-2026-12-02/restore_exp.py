"""Where a fresh-browser restore's time goes: raw CDP against Debian Chromium. A fresh browser
navigates to an intercepted restore URL, then 1 MiB of localStorage and 1 000 records are written.
Variants: the data inside the restore document ('doc'), a small document and the data by
Runtime.evaluate ('eval'), or fetched by the document ('fetchjson'). sample()'s root puts the
profile on disk (/tmp) or tmpfs (/dev/shm); msg_exp.py imports this module.

Results: docs/measurements/restore-handover-2026-12-02/experiments.txt.
Run: target/clients/venv/bin/python crates/lab/experiments/restore-handover-2026-12-02/restore_exp.py [samples]
"""
import asyncio, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

WRITE_JS = r"""async (data) => {
  const t = { start: performance.timeOrigin + performance.now(), origin: performance.timeOrigin, nav: performance.getEntriesByType('navigation')[0].toJSON() };
  for (const [k, v] of data.local) localStorage.setItem(k, v);
  t.areas = performance.timeOrigin + performance.now();
  const req = (r) => new Promise((res, rej) => { r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
  const open = indexedDB.open('bench', 1);
  open.onupgradeneeded = () => open.result.createObjectStore('records', { keyPath: 'id' }).createIndex('byTag', 'tag');
  const db = await req(open);
  t.opened = performance.timeOrigin + performance.now();
  const tx = db.transaction(['records'], 'readwrite', { durability: 'relaxed' });
  const done = new Promise((res, rej) => { tx.oncomplete = res; tx.onabort = () => rej(tx.error); });
  const st = tx.objectStore('records');
  for (let i = 0; i < 1000; i++) st.put(""" + lab.RECORD_JS + r""");
  await done; db.close();
  t.idb = performance.timeOrigin + performance.now();
  const recs = []; for (let i = 0; i < 1000; i++) recs.push(""" + lab.RECORD_JS + r""");
  let c0 = performance.now(); structuredClone(recs); t.clone = performance.now() - c0;
  c0 = performance.now();
  const open2 = indexedDB.open('bench2', 1);
  open2.onupgradeneeded = () => open2.result.createObjectStore('records', { keyPath: 'id' }).createIndex('byTag', 'tag');
  const db2 = await req(open2);
  t.open2 = performance.now() - c0; c0 = performance.now();
  const tx2 = db2.transaction(['records'], 'readwrite', { durability: 'relaxed' });
  const done2 = new Promise((res, rej) => { tx2.oncomplete = res; tx2.onabort = () => rej(tx2.error); });
  const st2 = tx2.objectStore('records');
  for (const r of recs) st2.put(r);
  t.queued2 = performance.now() - c0;
  await done2; db2.close();
  t.tx2 = performance.now() - c0;
  c0 = performance.now();
  const open3 = indexedDB.open('bench3', 1);
  open3.onupgradeneeded = () => open3.result.createObjectStore('records', { keyPath: 'id' });
  const db3 = await req(open3);
  const tx3 = db3.transaction(['records'], 'readwrite', { durability: 'relaxed' });
  const done3 = new Promise((res, rej) => { tx3.oncomplete = res; tx3.onabort = () => rej(tx3.error); });
  tx3.objectStore('records').put({ id: 0, all: recs });
  await done3; db3.close();
  t.oneRecord = performance.now() - c0;
  return t;
}"""


def raw(message, placeholder, text):
    """A builder for Cdp.send_raw: message (with `placeholder` standing for a string) as JSON,
    `text` (JSON already) put in the placeholder's place and the id put first."""
    head, tail = json.dumps(message).split(json.dumps(placeholder))
    return lambda n: '{"id": %d, ' % n + head[1:] + text + tail


async def sample(variant, root, extra=()):
    async with lab.browser(lab.LOCAL_CHROMIUM_FLAGS, extra, root=root) as c:
        s = await c.first_page()
        await c.send("Page.enable", session=s)
        await asyncio.sleep(0.3)  # let the browser settle as after a launch
        data = json.dumps({"local": lab.LOCAL_ITEMS})
        if variant == "doc":
            body = ("<!doctype html><script>window.__r = (" + WRITE_JS + ")(JSON.parse(" +
                    json.dumps(data).replace("</", "<\\/") + "));</script>")
        elif variant == "fetchjson":
            body = ("<!doctype html><script>window.__r = fetch('/__outlive_restore/1.json').then((r) => r.json()).then(" + WRITE_JS + ");</script>")
        else:
            body = "<!doctype html><title>r</title>"
        b64, data_b64 = lab.b64(body), lab.b64(data)

        def fulfill(req_id, body64, ctype):
            # The body is put into the message's text as is: no JSON encoding of 1.5 MB here.
            msg = {"method": "Fetch.fulfillRequest", "sessionId": s, "params": lab.fulfill_params(req_id, "BODY", ctype)}
            return raw(msg, "BODY", '"' + body64 + '"')
        eval_expr = "(" + WRITE_JS + ")(JSON.parse(" + json.dumps(data) + "))"
        eval_msg = raw({"method": "Runtime.evaluate", "sessionId": s, "params": {"expression": "EXPR", "awaitPromise": True, "returnByValue": True}},
                       "EXPR", json.dumps(eval_expr))
        t0 = lab.now_ms()
        await c.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=s)
        nav = asyncio.create_task(c.send("Page.navigate", {"url": "https://app.example/__outlive_restore/1"}, session=s))
        paused = await c.event("Fetch.requestPaused")
        t_paused = paused["_t"]
        await c.send_raw(fulfill(paused["params"]["requestId"], b64, "text/html; charset=utf-8"))
        t_fulfilled = lab.now_ms()
        await nav
        t_nav = lab.now_ms()
        if variant == "fetchjson":
            paused2 = await c.event("Fetch.requestPaused")
            await c.send_raw(fulfill(paused2["params"]["requestId"], data_b64, "application/json"))
            t_nav = lab.now_ms()
        if variant == "eval":
            r = await c.send_raw(eval_msg)
        else:
            r = await c.send("Runtime.evaluate", {"expression": "new Promise((r) => { const w = () => window.__r ? r(window.__r) : setTimeout(w, 1); w(); })", "awaitPromise": True, "returnByValue": True}, session=s)
        r = {"result": r["result"]} if "result" in r else r
        t_end = lab.now_ms()
        if "value" not in r["result"]: raise RuntimeError(json.dumps(r)[:2000])
        v = r["result"]["value"]
        await c.send("Fetch.disable", session=s)
        return {"paused": t_paused - t0, "fulfilled": t_fulfilled - t0, "navigated": t_nav - t0,
                "script": v["start"] - t0, "areas": v["areas"] - v["start"], "open": v["opened"] - v["areas"],
                "idb_tx": v["idb"] - v["opened"], "clone": v["clone"], "open2": v["open2"], "queued2": v["queued2"], "tx2": v["tx2"], "one": v["oneRecord"], "total": t_end - t0, "timeOrigin": v["origin"] - t0, "fetchStart": v["nav"]["fetchStart"], "responseEnd": v["nav"]["responseEnd"], "domInteractive": v["nav"]["domInteractive"], "domComplete": v["nav"]["domComplete"]}


async def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    out = await lab.in_turn(lambda k: sample(k, "/tmp"), ["eval", "doc", "fetchjson"], n)
    for name, rows in out.items():
        print(f"{name:14}", "  ".join(f"{k}={m:6.1f}" for k, m in lab.medians(rows).items()))
    os.makedirs("/tmp/exp", exist_ok=True)
    json.dump(out, open("/tmp/exp/restore_exp.json", "w"), indent=1)

if __name__ == "__main__":
    asyncio.run(main())
