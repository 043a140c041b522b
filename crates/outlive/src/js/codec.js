// outlive's value codec: IndexedDB keys and values (structured-clone types) to JSON and back.
// Included by capture.js and restore.js; defines `OUTLIVE_CODEC` in the evaluating scope.
// Tagged objects carry "$t": n (odd numbers), u (undefined), bi (BigInt), d (Date),
// re (RegExp), ab (ArrayBuffer), ta (typed array, k = its kind), dv (DataView), m (Map),
// s (Set), b (Blob/File, bytes filled in after the synchronous pass), e (Error),
// w (a Boolean/Number/String wrapper), o (a plain object that has a "$t" key of its own).
// What is not one of these (CryptoKey, file handles, cycles, …) throws `Unsupported`.
const OUTLIVE_CODEC = (() => {
  class Unsupported extends Error {}
  const TYPED = {
    Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array,
    Uint32Array, Float32Array, Float64Array, BigInt64Array, BigUint64Array,
  };
  if (typeof Float16Array === 'function') TYPED.Float16Array = Float16Array;
  const b64 = (u8) => {
    let s = '';
    for (let i = 0; i < u8.length; i += 0x8000) {
      s += String.fromCharCode.apply(null, u8.subarray(i, i + 0x8000));
    }
    return btoa(s);
  };
  const unb64 = (s) => {
    const bin = atob(s);
    const u8 = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
    return u8;
  };
  // `o[k] = v` would set the prototype for k = "__proto__": define it as an own property.
  const put = (o, k, v) => {
    if (k === '__proto__') Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
    else o[k] = v;
  };
  const bytesOf = (v) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  const tag = Object.prototype.toString;

  // Encodes `v`; Blobs are queued on `blobs` as [placeholder, blob] for `fill`.
  function enc(v, blobs, seen) {
    switch (typeof v) {
      case 'string': case 'boolean': return v;
      case 'number':
        return Number.isFinite(v) && !Object.is(v, -0) ? v : { $t: 'n', v: String(Object.is(v, -0) ? '-0' : v) };
      case 'undefined': return { $t: 'u' };
      case 'bigint': return { $t: 'bi', v: v.toString() };
      case 'object': break;
      default: throw new Unsupported(typeof v);
    }
    if (v === null) return null;
    if (seen.has(v)) throw new Unsupported('cycle');
    seen.add(v);
    try {
      const t = tag.call(v);
      if (Array.isArray(v)) return Array.from(v, (x) => enc(x, blobs, seen));
      if (t === '[object Date]') {
        const ms = v.getTime();
        return { $t: 'd', v: Number.isNaN(ms) ? 'NaN' : ms };
      }
      if (t === '[object RegExp]') return { $t: 're', s: v.source, f: v.flags };
      if (t === '[object ArrayBuffer]') return { $t: 'ab', v: b64(new Uint8Array(v)) };
      if (t === '[object DataView]') return { $t: 'dv', v: b64(bytesOf(v)) };
      if (ArrayBuffer.isView(v)) {
        const k = t.slice(8, -1);
        if (!TYPED[k]) throw new Unsupported(k);
        return { $t: 'ta', k, v: b64(bytesOf(v)) };
      }
      if (t === '[object Map]') return { $t: 'm', v: Array.from(v, ([k, x]) => [enc(k, blobs, seen), enc(x, blobs, seen)]) };
      if (t === '[object Set]') return { $t: 's', v: Array.from(v, (x) => enc(x, blobs, seen)) };
      if (typeof Blob === 'function' && v instanceof Blob) {
        const out = { $t: 'b', type: v.type, v: '' };
        if (typeof File === 'function' && v instanceof File) { out.name = v.name; out.lm = v.lastModified; }
        blobs.push([out, v]);
        return out;
      }
      if (t === '[object Error]') return { $t: 'e', n: String(v.name), m: String(v.message) };
      if (t === '[object Boolean]' || t === '[object Number]' || t === '[object String]') {
        return { $t: 'w', k: t.slice(8, -1), v: enc(v.valueOf(), blobs, seen) };
      }
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) throw new Unsupported(t);
      const o = {};
      for (const k of Object.keys(v)) put(o, k, enc(v[k], blobs, seen));
      return Object.prototype.hasOwnProperty.call(v, '$t') ? { $t: 'o', v: o } : o;
    } finally {
      seen.delete(v);
    }
  }

  async function fill(blobs) {
    for (const [out, blob] of blobs) out.v = b64(new Uint8Array(await blob.arrayBuffer()));
  }

  // Encodes one value, Blobs included.
  async function encode(v) {
    const blobs = [];
    const out = enc(v, blobs, new Set());
    await fill(blobs);
    return out;
  }

  function dec(v) {
    if (v === null || typeof v !== 'object') return v;
    if (Array.isArray(v)) return v.map(dec);
    switch (v.$t) {
      case undefined: {
        const o = {};
        for (const k of Object.keys(v)) put(o, k, dec(v[k]));
        return o;
      }
      case 'o': { const o = {}; for (const k of Object.keys(v.v)) put(o, k, dec(v.v[k])); return o; }
      case 'n': return v.v === '-0' ? -0 : Number(v.v);
      case 'u': return undefined;
      case 'bi': return BigInt(v.v);
      case 'd': return new Date(v.v === 'NaN' ? NaN : v.v);
      case 're': return new RegExp(v.s, v.f);
      case 'ab': return unb64(v.v).buffer;
      case 'dv': return new DataView(unb64(v.v).buffer);
      case 'ta': {
        const u8 = unb64(v.v);
        const T = TYPED[v.k];
        return new T(u8.buffer, 0, u8.byteLength / T.BYTES_PER_ELEMENT);
      }
      case 'm': return new Map(v.v.map(([k, x]) => [dec(k), dec(x)]));
      case 's': return new Set(v.v.map(dec));
      case 'b': {
        const bytes = unb64(v.v);
        return v.name !== undefined
          ? new File([bytes], v.name, { type: v.type, lastModified: v.lm })
          : new Blob([bytes], { type: v.type });
      }
      case 'e': { const E = globalThis[v.n]; const e = typeof E === 'function' && E.prototype instanceof Error ? new E(v.m) : new Error(v.m); return e; }
      case 'w': {
        const x = dec(v.v);
        return v.k === 'Boolean' ? new Boolean(x) : v.k === 'Number' ? new Number(x) : new String(x);
      }
      default: throw new Unsupported(String(v.$t));
    }
  }

  return { Unsupported, enc, fill, encode, dec, b64, unb64 };
})();
