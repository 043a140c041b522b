// Reads one frame's client-side state for a checkpoint. Called as
// `capture(known, opts)`: `known` lists content hashes outlive already holds; a part whose
// hash is among them comes back as `{ hash }` alone, so unchanged megabytes never cross the
// wire. opts: { idb: bool, idbMax: bytes, idbSame: null | { origin, hash, list } }. Returns
// { url, origin, local, session, idb }, each part `null` (not readable here) or
// `{ hash, data?, leftOut?, list? }`: data the JSON text, leftOut the values left out, list
// (IndexedDB read in full) the databases it found.
// Installed once per document; `memo` keeps the items of the last read of each Web Storage
// area, so an unchanged area is recognised by comparing strings (V8 compares the same string
// by identity, equal ones by memcmp) instead of hashing every character again.
((memo) => async (known, opts) => {
  const T0 = performance.now(); const M = globalThis.__t = {}; const have = new Set(known);
  // Two 32-bit lanes of a multiply-xorshift hash, over every string with its length: the
  // fallback where the WebAssembly hash cannot run.
  const jsDigest = (strings) => {
    let h1 = 0x9e3779b9, h2 = 0x85ebca6b, n = 0;
    for (const s of strings) {
      h1 = Math.imul(h1 ^ s.length, 0x85ebca77); h2 = Math.imul(h2 ^ s.length, 0xc2b2ae3d);
      for (let i = 0; i < s.length; i++) {
        const c = s.charCodeAt(i);
        h1 = Math.imul(h1 ^ c, 2654435761);
        h2 = Math.imul(h2 ^ c, 1597334677);
      }
      n += s.length + 1;
    }
    h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
    h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
    return (h1 >>> 0).toString(16).padStart(8, '0') + (h2 >>> 0).toString(16).padStart(8, '0') + n.toString(16);
  };
  // The same strings hashed by `hash.wat`: each as its length in UTF-16 units (4 bytes) and
  // its UTF-8 bytes, streamed through the document's one instance's fixed window. A fresh
  // document runs this at native speed where the loop above runs in V8's interpreter. `null`
  // where it cannot run: WebAssembly refused (a page's CSP) or failing once in this document
  // (the document then keeps the JavaScript hash, so its hashes stay comparable), a string
  // not well-formed UTF-16 (a lone surrogate has no UTF-8 of its own, and two different ones
  // must not hash alike).
  const wasmDigest = (strings) => {
    const w0 = performance.now(); if (memo.wasm === undefined) {
      try {
        const module = new WebAssembly.Module(Uint8Array.from(atob(OUTLIVE_HASH_WASM), (c) => c.charCodeAt(0)));
        const { m, r, h } = new WebAssembly.Instance(module).exports;
        memo.wasm = { r, h, bytes: new Uint8Array(m.buffer), view: new DataView(m.buffer), enc: new TextEncoder() };
      } catch (e) { memo.wasm = null; }
    }
    const w = memo.wasm; M.wasmInit = (M.wasmInit||0) + performance.now() - w0; const e0 = performance.now();
    if (!w || typeof ''.isWellFormed !== 'function' || !strings.every((s) => s.isWellFormed())) return null;
    const { r, h, bytes, view, enc } = w;
    try {
      // `fill` bytes wait in the window; a flush hashes their whole words and moves the
      // remainder (< 8 bytes) to its start.
      let fill = 0, total = 0;
      const flush = () => {
        const whole = fill & ~7;
        h(whole);
        bytes.copyWithin(0, whole, fill);
        fill -= whole; total += whole;
      };
      r();
      for (const s of strings) {
        if (fill + 4 > bytes.length) flush();
        view.setUint32(fill, s.length, true);
        fill += 4;
        for (let at = 0; ;) {
          const { read, written } = enc.encodeInto(at ? s.substring(at) : s, bytes.subarray(fill));
          fill += written; at += read;
          if (at >= s.length) break;
          flush();
        }
      }
      total += fill; M.encodeHash = (M.encodeHash||0) + performance.now() - e0;
      const end = (fill + 7) & ~7;
      bytes.fill(0, fill, end);
      const [a, b] = h(end);
      return 'w' + BigInt.asUintN(64, a).toString(16) + '.' + BigInt.asUintN(64, b).toString(16) + '.' + total.toString(16);
    } catch (e) { memo.wasm = null; return null; }
  };
  const digest = (strings) => wasmDigest(strings) ?? jsDigest(strings);
  const part = (hash, text) => (have.has(hash) ? { hash } : { hash, data: text() });

  const area = (name) => {
    let s;
    try { s = window[name]; if (!s) return null; } catch (e) { return null; }
    const r0 = performance.now(); const items = [];
    for (let i = 0, n = s.length; i < n; i++) {
      const k = s.key(i);
      const v = k === null ? null : s.getItem(k);
      if (v !== null) items.push([k, v]);
    }
    M['read_' + name] = performance.now() - r0;
    const last = memo[name];
    let h;
    if (last && last.items.length === items.length
        && last.items.every(([k, v], i) => k === items[i][0] && v === items[i][1])) {
      h = last.h;
    } else {
      h = name[0] + digest(items.flat());
      memo[name] = { items, h };
    }
    return part(h, () => JSON.stringify(items));
  };

  const req = (r) => new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });

  const idb = async () => {
    if (!opts.idb) return null;
    let infos;
    try {
      if (typeof indexedDB === 'undefined' || !indexedDB.databases) return null;
      const d0 = performance.now(); infos = await indexedDB.databases(); M.databases = performance.now() - d0;
    } catch (e) { return null; }
    // The databases by name and version: what a full read reports as `list`.
    const list = infos.map((i) => i.name + '\u0000' + i.version).sort().join('\u0001');
    // outlive saw no change to this origin's IndexedDB since the full read that gave
    // `same.hash` (Chromium's change events; top frame only): unless a database came, went or
    // changed version, that read stands.
    const same = opts.idbSame;
    if (same && window === window.top && same.origin === location.origin && same.list === list) {
      return { hash: same.hash };
    }
    const C = OUTLIVE_CODEC;
    const dbs = [];
    let left = 0;
    for (const info of infos) {
      let db;
      try {
        db = await new Promise((resolve, reject) => {
          const r = indexedDB.open(info.name);
          // Gone since databases() listed it: do not create it.
          r.onupgradeneeded = () => r.transaction.abort();
          r.onsuccess = () => resolve(r.result);
          r.onerror = () => reject(r.error);
        });
      } catch (e) { continue; }
      try {
        const names = Array.from(db.objectStoreNames);
        const raw = [];
        if (names.length) {
          const tx = db.transaction(names, 'readonly');
          for (const name of names) {
            const st = tx.objectStore(name);
            const indexes = Array.from(st.indexNames, (n) => {
              const ix = st.index(n);
              return { name: n, keyPath: ix.keyPath, unique: ix.unique, multiEntry: ix.multiEntry };
            });
            raw.push({ name, keyPath: st.keyPath, autoIncrement: st.autoIncrement, indexes,
              keys: req(st.getAllKeys()), values: req(st.getAll()) });
          }
          for (const s of raw) { s.keys = await s.keys; s.values = await s.values; }
        }
        const stores = [];
        const blobs = [];
        for (const s of raw) {
          const records = [];
          for (let i = 0; i < s.keys.length; i++) {
            try {
              const v = C.enc(s.values[i], blobs, new Set());
              records.push(s.keyPath === null ? [C.enc(s.keys[i], blobs, new Set()), v] : [null, v]);
            } catch (e) {
              if (!(e instanceof C.Unsupported)) throw e;
              left++;
            }
          }
          stores.push({ name: s.name, keyPath: s.keyPath, autoIncrement: s.autoIncrement, indexes: s.indexes, records });
        }
        await C.fill(blobs);
        dbs.push({ name: db.name, version: db.version, stores });
      } finally {
        db.close();
      }
    }
    if (!dbs.length) return left ? { hash: 'i0', data: '[]', leftOut: left } : null;
    const text = JSON.stringify(dbs);
    if (text.length > opts.idbMax) {
      const records = dbs.reduce((n, db) => n + db.stores.reduce((m, s) => m + s.records.length, 0), 0);
      return { hash: 'i0', data: '[]', leftOut: left + records };
    }
    const p = part('i' + digest([text]), () => text);
    if (left) p.leftOut = left;
    p.list = list;
    return p;
  };

  const origin = location.origin;
  const storable = origin.startsWith('http://') || origin.startsWith('https://');
  const local = storable ? area('localStorage') : null; M.local = performance.now() - T0;
  const session = storable ? area('sessionStorage') : null;
  const db = storable ? await idb() : null; M.total = performance.now() - T0;
  return { url: location.href, origin, local, session, idb: db };
})({})
