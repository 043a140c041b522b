// Writes one storage key's state in a restore document (served by outlive through Fetch
// interception, so no request reaches the real site). Evaluating this script starts listening
// for the reports of child restore documents (cross-site iframes, which report to their parent
// with postMessage) and gives the restore function, called once as `restore(data)` with
// data = { local, session, idb, caches, files, children, childTimeoutMs } (a part that is null
// is left as it is): the items, databases, caches and files a checkpoint holds for this
// document's origin under this top-level site, and how many child documents it embeds. It
// resolves when this document and every child are done, with { errors, written }. A child
// can finish before its parent's restore is called (the parent's data is handed over after
// it loads), so reports are kept from the start.
(() => {
  const early = [];
  let deliver = (m) => early.push(m);
  window.addEventListener('message', (e) => {
    const m = e.data;
    if (m && m.outliveRestored === true) deliver(m);
  });
  return (data) => {
    const C = OUTLIVE_CODEC;
    const errors = [];
    let written = 0;
    let waiting = data.children;
    let childrenDone;
    const children = new Promise((resolve) => { childrenDone = resolve; });
    if (!waiting) childrenDone();
    else setTimeout(() => { if (waiting > 0) { errors.push('frames: ' + waiting + ' did not report'); childrenDone(); } }, data.childTimeoutMs);
    deliver = (m) => {
      errors.push(...m.errors);
      written += m.written;
      if (--waiting === 0) childrenDone();
    };
    early.splice(0).forEach(deliver);
    // items: every item ([[key, value], …], replacing what is there), or, when the area holds
    // an earlier restore's items, what changed since ({ set: [[key, value], …], remove: [key, …] }).
    const area = (name, items) => {
      if (!items) return;
      try {
        const s = window[name];
        let set = items;
        if (Array.isArray(items)) s.clear();
        else {
          for (const k of items.remove) s.removeItem(k);
          set = items.set;
        }
        for (const [k, v] of set) s.setItem(k, v);
        written += set.length;
      } catch (e) { errors.push(name + ': ' + e.name); }
    };
    const req = (r) => new Promise((resolve, reject) => {
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    const idb = async (dbs) => {
      if (!dbs || !dbs.length) return;
      // Only databases that exist are deleted first (a fresh browser has none: one round trip
      // to the IndexedDB backend instead of one per database).
      let existing = new Set();
      try { existing = new Set((await indexedDB.databases()).map((d) => d.name)); } catch (e) {
        existing = null;
      }
      for (const spec of dbs) {
        try {
          if (!existing || existing.has(spec.name)) await req(indexedDB.deleteDatabase(spec.name));
          const open = indexedDB.open(spec.name, spec.version);
          open.onupgradeneeded = () => {
            const db = open.result;
            for (const s of spec.stores) {
              const st = db.createObjectStore(s.name, { keyPath: s.keyPath, autoIncrement: s.autoIncrement });
              for (const ix of s.indexes) st.createIndex(ix.name, ix.keyPath, { unique: ix.unique, multiEntry: ix.multiEntry });
            }
          };
          const db = await req(open);
          try {
            const names = spec.stores.map((s) => s.name);
            if (names.length) {
              // Relaxed: no flush to disk per transaction (a browser that dies takes it all anyway).
              const tx = db.transaction(names, 'readwrite', { durability: 'relaxed' });
              const done = new Promise((resolve, reject) => {
                tx.oncomplete = resolve;
                tx.onabort = () => reject(tx.error);
              });
              for (const s of spec.stores) {
                const st = tx.objectStore(s.name);
                for (const [k, v] of s.records) {
                  if (s.keyPath === null) st.put(C.dec(v), C.dec(k)); else st.put(C.dec(v));
                }
                written += s.records.length;
              }
              await done;
            }
          } finally {
            db.close();
          }
        } catch (e) { errors.push('indexedDB: ' + (e && e.name)); }
      }
    };
    // Cache Storage: each entry the checkpoint holds put in its cache, one after another (so
    // cache.keys() keeps the captured order). Nothing is deleted: after a page failure this is
    // the same browser's storage, and what the capture left out (over a cap, opaque) stays.
    const cacheStorage = async (list) => {
      if (!list) return;
      try {
        for (const [name, entries] of list) {
          const cache = await caches.open(name);
          for (const [url, status, statusText, headers, body] of entries) {
            try {
              // These statuses take no body.
              const none = [101, 103, 204, 205, 304].includes(status);
              const response = new Response(none ? null : C.unb64(body), { status, statusText, headers });
              await cache.put(new Request(url), response);
              written++;
            } catch (e) { errors.push('caches: ' + e.name); }
          }
        }
      } catch (e) { errors.push('caches: ' + (e && e.name)); }
    };
    // The origin private file system: each directory and file the checkpoint holds made again.
    // Nothing is removed (as for caches: files left out, such as a worker's locked database,
    // stay as they are).
    const files = async (list) => {
      if (!list) return;
      try {
        const root = await navigator.storage.getDirectory();
        const dirOf = async (parts) => {
          let dir = root;
          for (const p of parts) dir = await dir.getDirectoryHandle(p, { create: true });
          return dir;
        };
        for (const [path, body] of list) {
          try {
            const parts = path.split('/');
            const dir = await dirOf(parts.slice(0, -1));
            if (body === null) continue;
            const file = await dir.getFileHandle(parts[parts.length - 1], { create: true });
            const w = await file.createWritable();
            await w.write(C.unb64(body));
            await w.close();
            written++;
          } catch (e) { errors.push('files: ' + e.name); }
        }
      } catch (e) { errors.push('files: ' + (e && e.name)); }
    };
    return (async () => {
      const t0 = performance.now();
      // IndexedDB first: its requests go out at once and the browser answers them (which
      // databases exist, the open) while Web Storage is written here meanwhile.
      const databases = idb(data.idb);
      const stored = Promise.all([cacheStorage(data.caches), files(data.files)]);
      area('localStorage', data.local);
      area('sessionStorage', data.session);
      const t1 = performance.now();
      await databases;
      await stored;
      const t2 = performance.now();
      await children;
      const report = { errors, written, ms: { areas: t1 - t0, idb: t2 - t1, children: performance.now() - t2, sinceStart: t0 } };
      if (window.parent !== window) window.parent.postMessage({ outliveRestored: true, ...report }, '*');
      return report;
    })();
  };
})()
