"""What a capture pays, piece by piece, for 1 MiB of localStorage on a settled new document:
the read, isWellFormed, the UTF-8 encoding, the hash module's compile and instance, the hash,
and comparing each item with itself. Timed in the page (performance.now()), medians of 12
documents. Raw CDP, Debian Chromium; the flags and page of domstorage_cases.py.

Results: docs/measurements/warm-up-2026-12-02/results.txt.
Run: target/clients/venv/bin/python crates/lab/experiments/warm-up-2026-12-02/in_page_pieces.py
"""
import asyncio, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab
from domstorage_cases import FLAGS, NAV, page

WASM = (lab.JS_DIR / "hash.wasm.b64").read_text().strip()
PIECES = """(() => { const T = {}; let t = performance.now(); const lap = (n) => { const x = performance.now(); T[n] = +(x - t).toFixed(3); t = x; };
 const s = localStorage; const items = []; for (let i = 0, n = s.length; i < n; i++) { const k = s.key(i); items.push(k, s.getItem(k)); } lap('read');
 const ok = items.every((x) => x.isWellFormed()); lap('wellformed');
 const enc = new TextEncoder(); const buf = new Uint8Array(1200000); let off = 0; for (const x of items) { off += enc.encodeInto(x, buf.subarray(off)).written; } lap('encodeInto');
 const module = new WebAssembly.Module(Uint8Array.from(atob('WASM'), (c) => c.charCodeAt(0))); lap('wasmCompile');
 const { m, r, h } = new WebAssembly.Instance(module).exports; lap('wasmInst');
 r(); const b = new Uint8Array(m.buffer); let left = off & ~7, at = 0; while (left > 0) { const n = Math.min(left, b.length); b.set(buf.subarray(at, at + n)); h(n); at += n; left -= n; } lap('copy+hash');
 let eq = 0; for (let i = 0; i < items.length; i++) eq += (items[i] === items[i].slice(0)) ? 1 : 0; lap('compareCopies');
 return T; })()""".replace("WASM", WASM)
SEED = "(() => { " + lab.SEED_LOCAL_JS + " return 1; })()"


async def main():
    srv, a = lab.serve(page)
    try:
        async with lab.browser(FLAGS, graceful=True) as c:
            s = await c.first_page()
            await c.enable(s, "Page", "Runtime")
            await c.navigate(s, f"{a}/seed", **NAV); await c.value(SEED, s)
            rows = []
            for i in range(12):
                await c.navigate(s, f"{a}/p{i}", **NAV); await asyncio.sleep(0.5)
                rows.append(await c.value(PIECES, s))
            print(lab.medians(rows))
    finally:
        srv.shutdown()

if __name__ == "__main__":
    asyncio.run(main())
