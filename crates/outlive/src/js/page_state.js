// The page as the user left it: form fields typed but not sent, and scroll positions. Runs in
// chromiumoxide's utility world (an isolated world: the page cannot see it), in every frame.
// Evaluating it installs, once per document, a watcher (input, change, scroll and DOM changes
// bump a version) and answers { read, apply }:
// - read(known, { maxFields, maxBytes }): this document's and its same-origin frames' state as
//   a part { hash, data?, leftOut }, `data` left out when `hash` is among `known`. While no
//   frame's version moved, the last read is answered without walking the DOM.
//   The part also carries `nav`, the back/forward list's sign (see `navSign`).
// - apply(data, { withinMs }): puts a read back, retrying on animation frames until every
//   field and scroll position is in place or `withinMs` has passed. Answers { restored,
//   unmatched, leftAlone }.
// Kept: inputs (text-like, number, date, range, color, …), textareas, selects, checkboxes,
// radios, plain-text contenteditables; only where they differ from their default. Never
// password, hidden or file inputs, nor fields with autocomplete="off" (or in such a form):
// Chromium's own session-restore rules. Cross-origin frames are not read.
(() => {
  const SYM = Symbol.for('outlive.page');
  if (globalThis[SYM]) return globalThis[SYM];
  const memo = { version: 1, last: null, typed: new WeakMap() };
  const bump = () => { memo.version++; };
  const listen = { capture: true, passive: true };
  for (const type of ['input', 'change', 'reset', 'scroll']) addEventListener(type, bump, listen);
  // Every navigation of the tab moves the back/forward list's sign: a new document makes a
  // new token; in this one, an entry change or a return from the back/forward cache counts.
  const nav = { token: Math.random().toString(36).slice(2), moves: 0 };
  const moved = () => { nav.moves++; };
  addEventListener('pageshow', moved, listen);
  try { navigation.addEventListener('currententrychange', moved); } catch (e) { nav.token = null; }
  const navSign = () => {
    const entry = nav.token && globalThis.navigation && navigation.currentEntry;
    return entry ? [nav.token, nav.moves, history.length, entry.id].join(':') : null;
  };
  // A contenteditable's text before its first edit: its default, which the DOM does not keep.
  addEventListener('beforeinput', (e) => {
    const el = e.target;
    if (el && el.isContentEditable && !memo.typed.has(el)) memo.typed.set(el, el.textContent);
  }, listen);
  try {
    new MutationObserver(bump).observe(document, { childList: true, subtree: true });
  } catch (e) { memo.version = NaN; }
  // The watcher's memory in the window of `el` (each frame has its own); null without one.
  const memoOf = (el) => {
    try {
      const api = el.ownerDocument.defaultView[SYM];
      return api ? api.memo : null;
    } catch (e) { return null; }
  };

  const digest = (text) => {
    let h1 = 0x9e3779b9, h2 = 0x85ebca6b;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      h1 = Math.imul(h1 ^ c, 2654435761);
      h2 = Math.imul(h2 ^ c, 1597334677);
    }
    h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
    h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
    return 'p' + (h1 >>> 0).toString(16) + (h2 >>> 0).toString(16) + '.' + text.length.toString(16);
  };

  // This window and its same-origin frames, depth first, each with its path ('' for the top,
  // then the frame's index among its parent's iframes: '0', '0.2').
  const windows = () => {
    const out = [];
    const walk = (win, path) => {
      out.push({ win, path });
      const frames = win.document.querySelectorAll('iframe,frame');
      for (let i = 0; i < frames.length; i++) {
        let child = null;
        try {
          child = frames[i].contentWindow;
          if (!child || child.location.origin !== location.origin || !child.document) child = null;
        } catch (e) { child = null; }
        if (child) walk(child, path ? path + '.' + i : String(i));
      }
    };
    walk(window, '');
    return out;
  };

  const off = (v) => typeof v === 'string' && v.trim().toLowerCase() === 'off';
  const SKIP = new Set(['password', 'hidden', 'file', 'submit', 'button', 'reset', 'image']);
  // What is kept of a field: 'value', 'check', 'select', 'text'; null: not kept.
  const kindOf = (el) => {
    const tag = el.localName;
    if (tag === 'input' || tag === 'textarea' || tag === 'select') {
      const own = el.getAttribute('autocomplete');
      if (own !== null ? off(own) : el.form && off(el.form.getAttribute('autocomplete'))) return null;
      if (tag === 'select') return 'select';
      if (tag === 'textarea') return 'value';
      if (SKIP.has(el.type)) return null;
      return el.type === 'checkbox' || el.type === 'radio' ? 'check' : 'value';
    }
    const root = el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable);
    return root && el.children.length === 0 ? 'text' : null;
  };
  const selected = (el, which) => Array.from(el.options).filter((o) => o[which]).map((o) => o.value);
  // The state a field would have untouched: its sanitised default (a range without a value
  // attribute defaults to its midpoint, a color to black). A contenteditable's is its text
  // before its first edit: unknown (null) to a read, its text now to a restore.
  const initial = (el, kind, restoring) => {
    if (kind === 'check') return el.defaultChecked;
    if (kind === 'text') {
      const m = memoOf(el);
      if (m && m.typed.has(el)) return m.typed.get(el);
      return restoring ? el.textContent : null;
    }
    if (kind === 'select') {
      const chosen = selected(el, 'defaultSelected');
      if (el.multiple) return chosen;
      if (chosen.length) return chosen.slice(-1);
      const first = Array.from(el.options).find((o) => !o.disabled);
      return first ? [first.value] : [];
    }
    if (el.localName === 'textarea') return el.defaultValue;
    const probe = el.ownerDocument.createElement('input');
    for (const a of ['type', 'min', 'max', 'step', 'multiple']) {
      const v = el.getAttribute(a);
      if (v !== null) probe.setAttribute(a, v);
    }
    probe.defaultValue = el.defaultValue;
    return probe.value;
  };
  const current = (el, kind) => {
    if (kind === 'check') return el.checked;
    if (kind === 'text') return el.textContent;
    if (kind === 'select') return selected(el, 'selected');
    return el.value;
  };
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

  // Every kept field of one document by its stable key (frame path, form, kind, tag, name or
  // id): a list in document order, the position telling apart fields of one key.
  const fieldsOf = ({ win, path }) => {
    const doc = win.document;
    const byKey = new Map();
    const forms = Array.from(doc.forms);
    for (const el of doc.querySelectorAll('input,textarea,select,[contenteditable]')) {
      const kind = kindOf(el);
      if (!kind) continue;
      const form = el.form ? (el.form.id ? '#' + el.form.id : String(forms.indexOf(el.form))) : '';
      const key = [path, form, kind, el.localName, el.getAttribute('name') || el.id || ''].join('\u0001');
      if (!byKey.has(key)) byKey.set(key, []);
      byKey.get(key).push({ el, kind });
    }
    return byKey;
  };

  // A scrolled element's key: its id, or its path of (tag, index among same-tag siblings)
  // from the nearest ancestor with an id (or the root).
  const pathOf = (el) => {
    const steps = [];
    for (let at = el; at && at !== at.ownerDocument.documentElement; at = at.parentElement) {
      if (at.id) { steps.push('#' + at.id); break; }
      let n = 0;
      for (let s = at.previousElementSibling; s; s = s.previousElementSibling) if (s.localName === at.localName) n++;
      steps.push(at.localName + ':' + n);
    }
    return steps.reverse().join('>');
  };
  const find = (doc, path) => {
    let at = doc.documentElement;
    for (const step of path ? path.split('>') : []) {
      if (step[0] === '#') { at = doc.getElementById(step.slice(1)); }
      else {
        const [tag, n] = step.split(':');
        at = at && Array.from(at.children).filter((c) => c.localName === tag)[Number(n)];
      }
      if (!at) return null;
    }
    return at;
  };

  // What moves when a frame's state may have: each frame's version and window scroll (its
  // event comes a frame late), and the URL; null where a frame has no watcher (always read).
  const versions = (wins) => {
    const parts = [];
    for (const { win } of wins) {
      try {
        const w = win[SYM];
        if (!w || !Number.isFinite(w.memo.version)) return null;
        parts.push(w.memo.version + ':' + win.scrollX + ':' + win.scrollY);
      } catch (e) { return null; }
    }
    return parts.join(',') + '|' + location.href;
  };

  const snapshot = (wins, { maxFields, maxBytes }) => {
    const fields = [];
    const scroll = [];
    let bytes = 0, leftOut = 0;
    for (const w of wins) {
      for (const [key, list] of fieldsOf(w)) {
        list.forEach(({ el, kind }, n) => {
          const value = current(el, kind);
          const from = initial(el, kind);
          if (from === null || same(value, from)) return;
          const size = JSON.stringify(value).length;
          if (fields.length >= maxFields || bytes + size > maxBytes) { leftOut++; return; }
          bytes += size;
          fields.push([key, n, value]);
        });
      }
      const doc = w.win.document;
      const root = doc.scrollingElement;
      if (w.win.scrollX || w.win.scrollY) scroll.push([w.path, null, w.win.scrollX, w.win.scrollY]);
      // Every scrolled element: one layout, then cheap reads; only when a version moved.
      for (const el of doc.querySelectorAll('*')) {
        if (el === root || !(el.scrollTop || el.scrollLeft)) continue;
        scroll.push([w.path, pathOf(el), el.scrollLeft, el.scrollTop]);
      }
    }
    return { text: JSON.stringify({ fields, scroll }), leftOut };
  };

  const read = (known, caps) => {
    const wins = windows();
    const moved = versions(wins);
    const key = moved === null ? null : moved + '|' + caps.maxFields + '|' + caps.maxBytes;
    let last = memo.last;
    if (!last || key === null || last.key !== key) {
      const { text, leftOut } = snapshot(wins, caps);
      last = memo.last = { key, hash: digest(text), text, leftOut };
    }
    const part = { hash: last.hash, leftOut: last.leftOut, nav: navSign() };
    if (!known.includes(last.hash)) part.data = last.text;
    return part;
  };

  // Sets a field the way a user's typing does: the prototype's own setter (past a framework's
  // instance-level override), then `input` and `change`, so controlled inputs follow.
  // Checkboxes and radios are clicked: React follows them by `click`.
  const set = (el, kind, value) => {
    const win = el.ownerDocument.defaultView;
    const fire = (type) => el.dispatchEvent(new win.Event(type, { bubbles: true }));
    if (kind === 'check') {
      if (el.checked !== value && (value || el.type !== 'radio')) el.click();
      return;
    }
    if (kind === 'text') {
      // Its text now is its default from here on (see `initial`).
      const m = memoOf(el);
      if (m && !m.typed.has(el)) m.typed.set(el, el.textContent);
      el.textContent = value;
      fire('input');
      return;
    }
    if (kind === 'select') {
      const setter = Object.getOwnPropertyDescriptor(win.HTMLOptionElement.prototype, 'selected').set;
      for (const o of el.options) setter.call(o, value.includes(o.value));
    } else {
      const proto = el.localName === 'textarea' ? win.HTMLTextAreaElement : win.HTMLInputElement;
      Object.getOwnPropertyDescriptor(proto.prototype, 'value').set.call(el, value);
    }
    fire('input');
    fire('change');
  };

  const apply = async (data, { withinMs }) => {
    const state = JSON.parse(data);
    let fields = state.fields;
    let scroll = state.scroll;
    let restored = 0, leftAlone = 0;
    const until = performance.now() + withinMs;
    for (;;) {
      const wins = new Map(windows().map((w) => [w.path, w]));
      const index = new Map();
      const lookup = (path, key, n) => {
        const w = wins.get(path);
        if (!w) return null;
        if (!index.has(path)) index.set(path, fieldsOf(w));
        const list = index.get(path).get(key);
        return list && list[n];
      };
      fields = fields.filter(([key, n, value]) => {
        const field = lookup(key.split('\u0001')[0], key, n);
        if (!field) return true;
        const { el, kind } = field;
        const now = current(el, kind);
        if (same(now, value)) return false;
        if (!same(now, initial(el, kind, true))) { leftAlone++; return false; }
        set(el, kind, value);
        restored++;
        return false;
      });
      scroll = scroll.filter(([path, at, x, y]) => {
        const w = wins.get(path);
        if (!w) return true;
        if (at === null) {
          w.win.scrollTo(x, y);
          return Math.abs(w.win.scrollX - x) > 1 || Math.abs(w.win.scrollY - y) > 1;
        }
        const el = find(w.win.document, at);
        if (!el) return true;
        el.scrollLeft = x;
        el.scrollTop = y;
        return Math.abs(el.scrollLeft - x) > 1 || Math.abs(el.scrollTop - y) > 1;
      });
      if ((!fields.length && !scroll.length) || performance.now() >= until) break;
      // The next frame, or a moment where frames do not come (a hidden tab).
      await new Promise((resolve) => { requestAnimationFrame(resolve); setTimeout(resolve, 50); });
    }
    return { restored, leftAlone, unmatched: fields.length + scroll.length };
  };

  const api = { read, apply, memo };
  Object.defineProperty(globalThis, SYM, { value: api });
  return api;
})()
