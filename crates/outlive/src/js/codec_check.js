// Test support for the codec (not shipped in any page): round-trips each value of `cases`
// through encode → JSON text → decode and compares type by type; for `unsupported`, expects
// `Unsupported`. Answers { failed: [indexes], notRefused: [indexes], checked }.
async (cases, unsupported) => {
  const C = OUTLIVE_CODEC;
  const tag = (v) => Object.prototype.toString.call(v);
  const bytes = async (v) => new Uint8Array(v instanceof Blob ? await v.arrayBuffer()
    : v instanceof ArrayBuffer ? v : v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
  const sameBytes = async (a, b) => {
    const [x, y] = [await bytes(a), await bytes(b)];
    return x.length === y.length && x.every((c, i) => c === y[i]);
  };
  const same = async (a, b) => {
    if (typeof a !== typeof b) return false;
    if (typeof a === 'number') return Object.is(a, b);
    if (a === null || typeof a !== 'object') return a === b;
    if (b === null || tag(a) !== tag(b)) return false;
    if (Array.isArray(a)) {
      if (a.length !== b.length) return false;
      for (let i = 0; i < a.length; i++) if (!(await same(a[i], b[i]))) return false;
      return true;
    }
    switch (tag(a)) {
      case '[object Date]': return Object.is(a.getTime(), b.getTime());
      case '[object RegExp]': return a.source === b.source && a.flags === b.flags;
      case '[object Map]': case '[object Set]': {
        const [x, y] = [Array.from(a), Array.from(b)];
        return x.length === y.length && same(x, y);
      }
      case '[object Error]': return a.name === b.name && a.message === b.message;
      case '[object Boolean]': case '[object Number]': case '[object String]':
        return same(a.valueOf(), b.valueOf());
    }
    if (a instanceof Blob) {
      if (a.type !== b.type || (a instanceof File) !== (b instanceof File)) return false;
      if (a instanceof File && (a.name !== b.name || a.lastModified !== b.lastModified)) return false;
      return sameBytes(a, b);
    }
    if (a instanceof ArrayBuffer || ArrayBuffer.isView(a)) return sameBytes(a, b);
    if (Object.getPrototypeOf(b) !== Object.prototype) return false;
    const [ka, kb] = [Object.keys(a), Object.keys(b)];
    if (ka.join('\u0000') !== kb.join('\u0000')) return false;
    for (const k of ka) if (!(await same(a[k], b[k]))) return false;
    return true;
  };
  const failed = [];
  for (let i = 0; i < cases.length; i++) {
    try {
      const back = C.dec(JSON.parse(JSON.stringify(await C.encode(cases[i]))));
      if (!(await same(cases[i], back))) failed.push(i);
    } catch (e) { failed.push(i); }
  }
  const notRefused = [];
  for (let i = 0; i < unsupported.length; i++) {
    try { await C.encode(unsupported[i]); notRefused.push(i); } catch (e) {
      if (!(e instanceof C.Unsupported)) notRefused.push(i);
    }
  }
  return { failed, notRefused, checked: cases.length + unsupported.length };
}
