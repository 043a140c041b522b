// Reads one frame's client-side state for a checkpoint. Called as
// `capture(known, opts)`: `known` lists content hashes outlive already holds; a part whose
// hash is among them comes back as `{ hash }` alone, so unchanged megabytes never cross the
// wire. opts: { idb: bool, idbMax: bytes, idbSame: [{ scope, hash, list }], files: bool,
// filesMax: bytes, filesMs: ms, entriesMax: count }. Returns { url, origin, scope, local, session, idb, caches, files }
// (caches: Cache Storage; files: the origin private file system), each part `null` (not
// readable here) or
// `{ hash, data?, leftOut?, list? }`: data the JSON text, leftOut the values left out, list
// (IndexedDB read in full) the databases it found.
// Installed once per document (by outlive as each top-level document starts, or by the first
// capture there; nothing is read or compiled before a capture: a page whose CSP refuses
// WebAssembly would report each refusal); `memo` keeps the items of the last read of each Web
// Storage area, so an unchanged area is recognised by comparing strings (V8 compares the same
// string by identity, equal ones by memcmp) instead of hashing every character again.
// `capture([], { warm: true })` reads and hashes Web Storage into `memo` and sends nothing: run
// once a new document is idle (see `warm_on_new_document`), it leaves the next capture there
// only the comparison.
((memo) => async (known, opts) => {
  const have = new Set(known);
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
    if (memo.wasm === undefined) {
      try {
        const module = new WebAssembly.Module(Uint8Array.from(atob(OUTLIVE_HASH_WASM), (c) => c.charCodeAt(0)));
        const { m, r, h } = new WebAssembly.Instance(module).exports;
        memo.wasm = { r, h, bytes: new Uint8Array(m.buffer), view: new DataView(m.buffer), enc: new TextEncoder() };
      } catch (e) { memo.wasm = null; }
    }
    const w = memo.wasm;
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
      total += fill;
      const end = (fill + 7) & ~7;
      bytes.fill(0, fill, end);
      const [a, b] = h(end);
      return 'w' + BigInt.asUintN(64, a).toString(16) + '.' + BigInt.asUintN(64, b).toString(16) + '.' + total.toString(16);
    } catch (e) { memo.wasm = null; return null; }
  };
  const digest = (strings) => wasmDigest(strings) ?? jsDigest(strings);
  const part = (hash, text) => (have.has(hash) || opts.warm ? { hash } : { hash, data: text() });

  const area = (name) => {
    let s;
    try { s = window[name]; if (!s) return null; } catch (e) { return null; }
    const items = [];
    for (let i = 0, n = s.length; i < n; i++) {
      const k = s.key(i);
      const v = k === null ? null : s.getItem(k);
      if (v !== null) items.push([k, v]);
    }
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
      infos = await indexedDB.databases();
    } catch (e) { return null; }
    // The databases by name and version: what a full read reports as `list`.
    const list = infos.map((i) => i.name + '\u0000' + i.version).sort().join('\u0001');
    // outlive saw no change to this frame's IndexedDB (its scope: see below) since the full
    // read that gave `same.hash` (Chromium's change events): unless a database came, went or
    // changed version, that read stands.
    const same = scope && (opts.idbSame || []).find((s) => s.scope === scope);
    if (same && same.list === list) return { hash: same.hash };
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

  // Cache Storage and the origin private file system are read inside this call: they cost no
  // round trip of their own, and an unchanged one crosses the wire as its hash alone. Each
  // entry or file is costed as its JSON text (bodies in base64); one that would take its kind
  // over `filesMax`, or Cache Storage over `entriesMax` entries, is left out and counted, like
  // an unreadable one. Cache Storage has no cheap change stamp (a put may change a body and
  // nothing else): every capture reads its bodies.
  const costOf = (bytes, ...strings) => Math.ceil(bytes / 3) * 4 + strings.join('').length + 16;

  // [[cache name, [[url, status, statusText, [[header, value], …], body base64], …]], …].
  // Opaque responses (no-cors) cannot be read: left out and counted, as non-GET requests.
  const cacheStorage = async () => {
    if (!opts.files || opts.warm) return null;
    let names;
    try {
      if (typeof caches === 'undefined') return null;
      names = await caches.keys();
    } catch (e) { return null; }
    const out = [];
    let left = 0, size = 2, count = 0;
    for (const name of names) {
      const entries = [];
      const before = left;
      let requests = null;
      try {
        const cache = await caches.open(name);
        requests = await cache.keys();
        // Past the entry cap, the rest is only counted (not matched, not read).
        const room = Math.max(0, Math.min(requests.length, opts.entriesMax - count));
        left += requests.length - room;
        const responses = await Promise.all(requests.slice(0, room).map((q) => cache.match(q).catch(() => undefined)));
        for (let i = 0; i < room; i++) {
          const q = requests[i], r = responses[i];
          if (q.method !== 'GET' || !r || r.type.startsWith('opaque') || r.status === 0) { left++; continue; }
          const body = await r.blob();
          const headers = Array.from(r.headers);
          const cost = costOf(body.size, name, q.url, r.statusText, JSON.stringify(headers));
          if (size + cost > opts.filesMax) { left++; continue; }
          size += cost;
          entries.push([q.url, r.status, r.statusText, headers, OUTLIVE_CODEC.b64(new Uint8Array(await body.arrayBuffer()))]);
        }
      } catch (e) {
        // The whole cache is left out: every entry it holds counted.
        left = before + (requests ? requests.length : 1);
        continue;
      }
      count += entries.length;
      out.push([name, entries]);
    }
    const text = JSON.stringify(out);
    const p = part('c' + digest([text]), () => text);
    if (left) p.leftOut = left;
    return p;
  };

  // [[path, body base64], …], sorted by path; a directory as its path ending in '/' and null.
  const files = async () => {
    if (!opts.files || opts.warm) return null;
    let root;
    try {
      if (!navigator.storage || !navigator.storage.getDirectory) return null;
      root = await navigator.storage.getDirectory();
    } catch (e) { return null; }
    const found = [];
    const walk = async (dir, prefix) => {
      for await (const [name, h] of dir.entries()) {
        const path = prefix + name;
        if (h.kind === 'directory') {
          found.push([path + '/', null]);
          await walk(h, path + '/');
        } else found.push([path, h]);
      }
    };
    try { await walk(root, ''); } catch (e) { return null; }
    found.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    // A file locked by a sync access handle (a worker's database) cannot be read: counted.
    const got = await Promise.all(found.map(([, h]) => (h ? h.getFile().catch(() => null) : null)));
    // Paths, sizes and modification times as of the last full read: the same means the same
    // bytes, so a tree outlive holds by hash is not read again.
    const stamp = found.map(([path, h], i) => (h ? path + '\u0000' + (got[i] ? got[i].size + '.' + got[i].lastModified : '-') : path)).join('\u0001');
    if (memo.files && memo.files.stamp === stamp && have.has(memo.files.hash)) return { hash: memo.files.hash };
    const out = [];
    let left = 0, size = 2;
    for (let i = 0; i < found.length; i++) {
      const [path, h] = found[i], f = got[i];
      if (!h) { out.push([path, null]); continue; }
      const cost = f ? costOf(f.size, path) : 0;
      if (!f || size + cost > opts.filesMax) { left++; continue; }
      try {
        out.push([path, OUTLIVE_CODEC.b64(new Uint8Array(await f.arrayBuffer()))]);
        size += cost;
      } catch (e) { left++; }
    }
    const text = JSON.stringify(out);
    const p = part('f' + digest([text]), () => text);
    memo.files = { stamp, hash: p.hash };
    if (left) p.leftOut = left;
    return p;
  };

  const origin = location.origin;
  const storable = origin.startsWith('http://') || origin.startsWith('https://');
  // This frame's origin and its ancestors' (the top's last): frames of one scope share one
  // storage key (origin, top-level site, whether an ancestor is cross-site), so one scope's
  // IndexedDB is one IndexedDB. Null where the browser does not say, where an ancestor's
  // origin is opaque, in a credentialless iframe (storage keys made with a nonce: another in
  // each document), and in a fenced frame (its ancestors are hidden: it would pass for a top).
  const ancestors = location.ancestorOrigins ? Array.from(location.ancestorOrigins) : null;
  const own = ancestors && !ancestors.includes('null') && !window.credentialless && !window.fence;
  const scope = own ? [origin, ...ancestors].join(' ') : null;
  // IndexedDB first: its `databases()` goes to the browser process, which answers while Web
  // Storage is read and hashed here (1–2 ms on a new document).
  const db = storable ? idb() : null;
  // Cache Storage and files under their own time bound, failures kept to themselves: a slow
  // or failing read of them (null: restored as it is) never costs Web Storage or IndexedDB.
  const bounded = (read) => {
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(() => resolve(null), opts.filesMs); });
    return Promise.race([read().catch(() => null), late]).finally(() => clearTimeout(timer));
  };
  const cached = storable ? bounded(cacheStorage) : null;
  const tree = storable ? bounded(files) : null;
  const local = storable ? area('localStorage') : null;
  const session = storable ? area('sessionStorage') : null;
  return { url: location.href, origin, scope, local, session, idb: await db, caches: await cached, files: await tree };
})({})
