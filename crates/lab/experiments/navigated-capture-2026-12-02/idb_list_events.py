"""Do Chromium's IndexedDB tracking events (Storage.trackIndexedDBForStorageKey) report every
change a capture's databases() check catches? Cases: a database created, deleted, upgraded with
no content change. And do they come before the page's own request completes, that is, on the
connection before the reply of the evaluate that awaited it? Raw CDP, Debian Chromium.

Results: docs/measurements/README.md ("The capture script installed as each document starts").
Run: target/clients/venv/bin/python crates/lab/experiments/navigated-capture-2026-12-02/idb_list_events.py
"""
import asyncio, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

OPEN = """(name, version, upgrade) => new Promise((res, rej) => { const r = version ? indexedDB.open(name, version) : indexedDB.open(name);
  r.onupgradeneeded = () => upgrade(r.result, r.transaction); r.onsuccess = () => { r.result.close(); res(1); }; r.onerror = () => rej(r.error); })"""
CASES = {
  "create empty db": lambda i: f"({OPEN})('c{i}', 1, () => {{}})",
  "create db with store": lambda i: f"({OPEN})('s{i}', 1, (db) => db.createObjectStore('x'))",
  "upgrade, nothing else": lambda i: f"({OPEN})('base', {i + 2}, () => {{}})",
  "upgrade, new empty store": lambda i: f"({OPEN})('base', {i + 200}, (db) => db.createObjectStore('st{i}'))",
  "upgrade, delete a store": lambda i: f"({OPEN})('base', {i + 400}, (db) => db.deleteObjectStore('st{i}'))",
  "delete db": lambda i: f"new Promise((res, rej) => {{ const r = indexedDB.deleteDatabase('c{i}'); r.onsuccess = () => res(1); r.onerror = () => rej(r.error); }})",
  "put a record (control)": lambda i: f"({OPEN})('base', undefined, () => {{}}).then(() => new Promise((res) => {{ const r = indexedDB.open('base'); r.onsuccess = () => {{ const db = r.result; const tx = db.transaction(db.objectStoreNames[0], 'readwrite'); tx.objectStore(db.objectStoreNames[0]).put({i}, 'k'); tx.oncomplete = () => {{ db.close(); res(1); }}; }}; }}))",
}


class Cdp(lab.Cdp):
    """Keeps the IndexedDB events' methods; a reply records how many had come before it."""

    def __init__(self, ws):
        self.idb_events = []
        super().__init__(ws)

    def on_reply(self, msg):
        return len(self.idb_events)

    def on_event(self, msg):
        if msg.get("method", "").startswith("Storage.indexedDB"):
            self.idb_events.append(msg["method"])


async def main():
    srv, a = lab.serve("<title>p</title>")
    try:
        async with lab.browser(lab.FLAGS, graceful=True, cdp=Cdp) as c:
            events = c.idb_events
            s = await c.first_page()
            await c.send("Page.navigate", {"url": a + "/p"}, s); await asyncio.sleep(0.5)
            ev = lambda e: c.send_with_state("Runtime.evaluate", {"expression": e, "awaitPromise": True, "returnByValue": True}, s)
            await ev(f"({OPEN})('base', 1, (db) => db.createObjectStore('first'))")
            await c.send("Storage.trackIndexedDBForStorageKey", {"storageKey": a + "/"}, s)
            for name, make in CASES.items():
                before_reply = after = 0; kinds = set()
                for i in range(20):
                    start = len(events)
                    r, seen = await ev(make(i))
                    if "exceptionDetails" in r: raise RuntimeError(json.dumps(r)[:400])
                    await asyncio.sleep(0.05)
                    before_reply += seen > start
                    after += len(events) > start
                    kinds.update(events[start:])
                print(f"{name:26s} event before reply {before_reply}/20, any event within 50 ms {after}/20, kinds {sorted(kinds)}", flush=True)
    finally:
        srv.shutdown()

if __name__ == "__main__":
    asyncio.run(main())
