"""Where a checkpoint on a new document spends its time (issue 22), raw CDP.

Seeds 1 MiB of localStorage and the bench's 1 000 IndexedDB records. Then for each variant, N
new documents of the origin, each settled 0.5 s, then the capture expression as outlive sends it.
Known hashes and idbSame are offered. Timed from here, and inside the page where the capture
script is instrumented. Variants ($VARIANTS): inline (the whole installing expression sent) and
preinstalled (Page.addScriptToEvaluateOnNewDocument, only the call sent).

The capture script (first argument): none for js/capture.js as it is now; `cur` or `first` for
the morning's capture.js (commit aa7a148) with performance.now() marks put in at run time;
`first` also asks databases() first. Any other argument is a capture script's path.

Results: docs/measurements/navigated-capture-2026-12-02/probe-results.txt.
Run: target/clients/venv/bin/python crates/lab/experiments/navigated-capture-2026-12-02/probe.py cur
($N, $VARIANTS, $WARM, $FIRST1, $EXTRA, $OUT).
"""
import asyncio, json, os, subprocess, sys, time, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

# The commit whose capture.js the marks fit: the order of the morning of 2026-12-02.
MARKED_BASE = "aa7a148"
# The marks: (text in that capture.js, what replaces it). Each text stands there once.
MARKS = [
    ("  const have = new Set(known);\n",
     "  const T0 = performance.now(); const M = globalThis.__t = {}; const have = new Set(known);\n"),
    ("    if (memo.wasm === undefined) {\n",
     "    const w0 = performance.now(); if (memo.wasm === undefined) {\n"),
    ("    const w = memo.wasm;\n",
     "    const w = memo.wasm; M.wasmInit = (M.wasmInit||0) + performance.now() - w0; const e0 = performance.now();\n"),
    ("      total += fill;\n",
     "      total += fill; M.encodeHash = (M.encodeHash||0) + performance.now() - e0;\n"),
    ("    const items = [];\n",
     "    const r0 = performance.now(); const items = [];\n"),
    ("      if (v !== null) items.push([k, v]);\n    }\n",
     "      if (v !== null) items.push([k, v]);\n    }\n    M['read_' + name] = performance.now() - r0;\n"),
    ("      infos = await indexedDB.databases();\n",
     "      const d0 = performance.now(); infos = await indexedDB.databases(); M.databases = performance.now() - d0;\n"),
    ("  return {\n    url: location.href,\n    origin,\n    local: storable ? area('localStorage') : null,\n"
     "    session: storable ? area('sessionStorage') : null,\n    idb: storable ? await idb() : null,\n  };\n",
     "  const local = storable ? area('localStorage') : null; M.local = performance.now() - T0;\n"
     "  const session = storable ? area('sessionStorage') : null;\n"
     "  const db = storable ? await idb() : null; M.total = performance.now() - T0;\n"
     "  return { url: location.href, origin, local, session, idb: db };\n"),
]
# On top of MARKS: databases() asked before Web Storage is read.
FIRST = [
    ("  const local = storable ?", "  const dbp = storable ? idb() : null;\n  const local = storable ?"),
    ("  const db = storable ? await idb() : null;", "  const db = await dbp;"),
]


def capture_script(which):
    """The capture script to probe: see the module's docstring."""
    if which is None:
        return (lab.JS_DIR / "capture.js").read_text()
    if which not in ("cur", "first"):
        return open(which).read()
    src = subprocess.run(["git", "-C", str(lab.REPO), "show", f"{MARKED_BASE}:crates/outlive/src/js/capture.js"],
                         capture_output=True, text=True, check=True).stdout
    for old, new in MARKS + (FIRST if which == "first" else []):
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    return src


CODEC = (lab.JS_DIR / "codec.js").read_text()
CAPTURE = capture_script(sys.argv[1] if len(sys.argv) > 1 else None)
WASM = (lab.JS_DIR / "hash.wasm.b64").read_text().strip()
N = int(os.environ.get("N", "20"))
SEED = "(async () => { " + lab.SEED_LOCAL_JS + "\n" + lab.SEED_IDB_JS + " return 1; })()"


def install_body():
    return f"(() => {{\n{CODEC}\nconst OUTLIVE_HASH_WASM = '{WASM}';\nreturn ({CAPTURE});\n}})()"


def expression(known, opts, preinstalled):
    k, o = json.dumps(known), json.dumps(opts)
    if preinstalled:
        return f"globalThis[Symbol.for('outlive.capture')]({k}, {o})"
    return f"(globalThis[Symbol.for('outlive.capture')] ??= {install_body()})({k}, {o})"


async def main():
    srv, a = lab.serve("<title>p</title><p>page</p>")
    try:
        async with lab.browser(lab.FLAGS + lab.SITE_PER_PROCESS, graceful=True) as c:
            s = await c.first_page()
            await c.enable(s, "Page", "Runtime")
            await c.navigate(s, f"{a}/seed")
            await c.value(SEED, s)
            first = await c.value(expression([], {"idb": True, "idbMax": 1 << 20, "idbSame": None}, False), s)
            known = [first["local"]["hash"], first["session"]["hash"], first["idb"]["hash"]]
            same = {"origin": a, "hash": first["idb"]["hash"], "list": first["idb"]["list"]}
            opts = {"idb": True, "idbMax": 1 << 20, "idbSame": same}
            await c.send("Storage.trackIndexedDBForStorageKey", {"storageKey": a + "/"}, s)
            variants = os.environ.get("VARIANTS", "inline,preinstalled").split(",")
            script_id = None
            res = {}
            for rnd in range(N):
                for v in variants:
                    if v == "preinstalled" and script_id is None:
                        script_id = (await c.send("Page.addScriptToEvaluateOnNewDocument",
                            {"source": f"globalThis[Symbol.for('outlive.capture')] = {install_body()};" + os.environ.get("EXTRA", "")}, s))["identifier"]
                    if v != "preinstalled" and script_id is not None:
                        await c.send("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script_id}, s); script_id = None
                    await c.navigate(s, f"{a}/p?{v}{rnd}")
                    if os.environ.get("WARM"): await c.value("0", s)
                    await asyncio.sleep(0.5)
                    t0 = time.perf_counter()
                    one = await c.value("1", s) if os.environ.get("FIRST1") else None
                    t1 = time.perf_counter()
                    r = await c.value(expression(known, opts, v == "preinstalled"), s)
                    t2 = time.perf_counter()
                    assert "data" not in r["local"] and "data" not in r["idb"], r
                    marks = await c.value("JSON.stringify(globalThis.__t || null)", s)
                    t3 = time.perf_counter()
                    again = await c.value(expression(known, opts, v == "preinstalled"), s)
                    t4 = time.perf_counter()
                    marks2 = json.loads(await c.value("JSON.stringify(globalThis.__t || null)", s))
                    if rnd == 0: print(v, "again in page", marks2)
                    res.setdefault(v, []).append({"capture": (t2 - t1) * 1e3, "evaluate1": (t1 - t0) * 1e3, "again": (t4 - t3) * 1e3, "marks": json.loads(marks) if marks else None})
            for v, rows in res.items():
                cap = [r["capture"] for r in rows]; again = [r["again"] for r in rows]
                print(f"{v:14s} capture median {statistics.median(cap):6.2f} ms  (min {min(cap):.2f} max {max(cap):.2f})  same doc again {statistics.median(again):.2f} ms")
                if rows[0]["marks"]:
                    print("   in page medians:", {k: round(m, 2) for k, m in lab.medians([r["marks"] for r in rows]).items()})
            out = os.environ.get("OUT", "/tmp/navprobe/out.json")
            os.makedirs(os.path.dirname(out), exist_ok=True)
            json.dump(res, open(out, "w"))
    finally:
        srv.shutdown()

if __name__ == "__main__":
    asyncio.run(main())
