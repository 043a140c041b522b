import asyncio, json, os, shutil, subprocess, tempfile, threading, time, sys, statistics
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "domstorage_cases.py")).read().split("async def main")[0])
WASM = open("" + os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../crates/outlive/src/js/hash.wasm.b64") + "").read().strip()
PIECES = """(() => { const T = {}; let t = performance.now(); const lap = (n) => { const x = performance.now(); T[n] = +(x - t).toFixed(3); t = x; };
 const s = localStorage; const items = []; for (let i = 0, n = s.length; i < n; i++) { const k = s.key(i); items.push(k, s.getItem(k)); } lap('read');
 const ok = items.every((x) => x.isWellFormed()); lap('wellformed');
 const enc = new TextEncoder(); const buf = new Uint8Array(1200000); let off = 0; for (const x of items) { off += enc.encodeInto(x, buf.subarray(off)).written; } lap('encodeInto');
 const module = new WebAssembly.Module(Uint8Array.from(atob('WASM'), (c) => c.charCodeAt(0))); lap('wasmCompile');
 const { m, r, h } = new WebAssembly.Instance(module).exports; lap('wasmInst');
 r(); const b = new Uint8Array(m.buffer); let left = off & ~7, at = 0; while (left > 0) { const n = Math.min(left, b.length); b.set(buf.subarray(at, at + n)); h(n); at += n; left -= n; } lap('copy+hash');
 let eq = 0; for (let i = 0; i < items.length; i++) eq += (items[i] === items[i].slice(0)) ? 1 : 0; lap('compareCopies');
 return T; })()""".replace("WASM", WASM)
SEED = "(() => { for (let i = 0; i < 16; i++) localStorage.setItem('blob' + i, String(i % 10).repeat(65536)); return 1; })()"
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
            await navigate(c, s, f"{a}/seed"); await c.value(SEED, s)
            rows = []
            for i in range(12):
                await navigate(c, s, f"{a}/p{i}"); await asyncio.sleep(0.5)
                rows.append(await c.value(PIECES, s))
            print({k: statistics.median(r[k] for r in rows) for k in rows[0]})
    finally:
        p.terminate(); p.wait(); shutil.rmtree(d, ignore_errors=True); srv.shutdown()
asyncio.run(main())
