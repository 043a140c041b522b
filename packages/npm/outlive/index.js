// outlive for TypeScript and JavaScript: the task runs in this process; the engine (the
// `outlive` binary from the platform package, as `outlive serve --stdio`) owns the browsers.
// The protocol this module speaks is docs/stdio.md in the outlive repository.
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";

const require = createRequire(import.meta.url);

/** The platform packages this version ships, by `${process.platform}-${process.arch}`. */
const PLATFORMS = { "linux-x64": "@outlive/linux-x64" };

/** An error of outlive's own, with a stable `code`. */
export class OutliveError extends Error {
  constructor(code, message, extra = {}) {
    super(message);
    this.name = "OutliveError";
    this.code = code;
    if (extra.option !== undefined) this.option = extra.option;
    if (extra.event !== undefined) this.event = extra.event;
  }
}

/** The path of the `outlive` binary: $OUTLIVE_BINARY, else the platform package's. */
export function binaryPath() {
  if (process.env.OUTLIVE_BINARY) return process.env.OUTLIVE_BINARY;
  const key = `${process.platform}-${process.arch}`;
  const shipped = Object.keys(PLATFORMS).join(", ");
  const pkg = PLATFORMS[key];
  if (!pkg) {
    throw new OutliveError(
      "unsupported_platform",
      `outlive ships its binary for ${shipped}, not for ${key}: build it (cargo build -p outlive-cli) and set OUTLIVE_BINARY to its path`,
    );
  }
  try {
    return require.resolve(`${pkg}/bin/outlive`);
  } catch {
    throw new OutliveError(
      "missing_binary",
      `${pkg} (the outlive binary for ${key}) is not installed: install outlive without --omit=optional (shipped for ${shipped})`,
    );
  }
}

// ---- providers -------------------------------------------------------------------------

/** Local Chromium, launched by the engine (found on PATH, or $CHROME). */
export function local() {
  return Object.freeze({ kind: "local", args: [], env: {} });
}

/** A Solari-compatible API; the key is passed to the engine in its environment only. */
export function solari({ baseUrl, apiKey } = {}) {
  const key = apiKey ?? process.env.SOLARI_API_KEY;
  if (typeof key !== "string" || key === "") {
    throw new OutliveError("invalid_option", "solari() needs an apiKey (or SOLARI_API_KEY)", { option: "apiKey" });
  }
  const url = baseUrl ?? process.env.SOLARI_BASE_URL ?? "https://api.getsolari.com";
  if (typeof url !== "string") {
    throw new OutliveError("invalid_option", "solari(): baseUrl must be a string", { option: "baseUrl" });
  }
  return Object.freeze({ kind: "solari", args: ["--solari-url", url], env: { SOLARI_API_KEY: key } });
}

/** Any CDP websocket URL (Browserless, Steel, a Chromium you started): each launch connects to it. */
export function cdp(url) {
  if (typeof url !== "string" || !/^wss?:\/\//.test(url)) {
    throw new OutliveError("invalid_option", "cdp(url): url must be a ws:// or wss:// URL", { option: "url" });
  }
  return Object.freeze({ kind: "cdp", args: ["--cdp-url", url], env: {} });
}

// ---- loggers ---------------------------------------------------------------------------

const log = (levels) =>
  Object.freeze(
    Object.fromEntries(
      ["debug", "info", "warn", "error"].map((l) => [
        l,
        levels.includes(l) ? (msg, fields) => console.error(`outlive: ${msg}`, fields ?? "") : () => {},
      ]),
    ),
  );
/** Warnings and errors to stderr (the default). */
export const quietLogger = log(["warn", "error"]);
/** Everything to stderr. */
export const consoleLogger = log(["debug", "info", "warn", "error"]);
/** Nothing. */
export const noopLogger = log([]);

// ---- options ---------------------------------------------------------------------------

/** Option name → [flag, kind]; the engine validates ranges, this checks names and types. */
const FLAGS = {
  checkpointEveryMs: ["--checkpoint-every", "ms"],
  relaunchBackoffMs: ["--relaunch-backoff", "ms"],
  navigationTimeoutMs: ["--navigation-timeout", "ms"],
  maxRelaunches: ["--max-relaunches", "count"],
  maxPageRecoveries: ["--max-page-recoveries", "count"],
  maxSessions: ["--max-sessions", "count"],
  startUrl: ["--start-url", "string"],
  viewport: ["--viewport", "viewport"],
  diagnostics: ["--diagnostics", "diagnostics"],
  rotation: ["--rotate", "rotation"],
  standby: ["--standby", "boolean"],
};
const LOCAL = { onEvent: "function", logger: "logger" };
/** The engine's option names, back to this API's. */
const NAMES = {
  checkpoint_every: "checkpointEveryMs",
  relaunch_backoff: "relaunchBackoffMs",
  navigation_timeout: "navigationTimeoutMs",
  max_relaunches: "maxRelaunches",
  max_page_recoveries: "maxPageRecoveries",
  max_sessions: "maxSessions",
  start_url: "startUrl",
  viewport: "viewport",
  diagnostics: "diagnostics",
  rotation: "rotation",
};

function invalid(option, why) {
  return new OutliveError("invalid_option", `option \`${option}\` ${why}`, { option });
}

/** One option as flags, or throws `invalid_option`. */
function flagOf(name, value) {
  const [flag, kind] = FLAGS[name];
  const nonNegative = typeof value === "number" && Number.isFinite(value) && value >= 0;
  switch (kind) {
    case "ms":
      if (!nonNegative) throw invalid(name, `must be a number of milliseconds, 0 or more; got ${show(value)}`);
      return [flag, `${Math.round(value)}ms`];
    case "count":
      if (!nonNegative || !Number.isInteger(value)) throw invalid(name, `must be a whole number, 0 or more; got ${show(value)}`);
      return [flag, String(value)];
    case "string":
      if (typeof value !== "string") throw invalid(name, `must be a string; got ${show(value)}`);
      return [flag, value];
    case "boolean":
      if (typeof value !== "boolean") throw invalid(name, `must be true or false; got ${show(value)}`);
      return value ? [flag] : [];
    case "diagnostics":
      if (value !== "safe" && value !== "full") throw invalid(name, `must be "safe" or "full"; got ${show(value)}`);
      return [flag, value];
    case "viewport": {
      const ok = (n) => Number.isInteger(n) && n > 0;
      if (!value || !ok(value.width) || !ok(value.height)) throw invalid(name, `must be { width, height } in whole pixels; got ${show(value)}`);
      return [flag, `${value.width}x${value.height}`];
    }
    case "rotation":
      if (value === "off" || value === "learned") return [flag, value];
      if (value && typeof value.expectedMs === "number" && Number.isFinite(value.expectedMs) && value.expectedMs > 0) {
        return [flag, `expected:${Math.round(value.expectedMs)}ms`];
      }
      throw invalid(name, `must be "off", "learned" or { expectedMs }; got ${show(value)}`);
  }
}

function show(value) {
  try {
    return typeof value === "string" ? JSON.stringify(value) : String(JSON.stringify(value) ?? value);
  } catch {
    return String(value);
  }
}

/** The options as the engine's flags, plus the ones this side keeps; throws `invalid_option`. */
function checkOptions(options) {
  if (options === null || typeof options !== "object") throw invalid("options", "must be an object");
  const flags = [];
  for (const [name, value] of Object.entries(options)) {
    if (value === undefined) continue;
    if (name in FLAGS) flags.push(...flagOf(name, value));
    else if (LOCAL[name] === "function" && typeof value !== "function") throw invalid(name, "must be a function");
    else if (LOCAL[name] === "logger" && !["debug", "info", "warn", "error"].every((l) => typeof value?.[l] === "function")) {
      throw invalid(name, "must have debug, info, warn and error methods");
    } else if (!(name in LOCAL)) {
      const known = [...Object.keys(FLAGS), ...Object.keys(LOCAL)].join(", ");
      throw invalid(name, `is not an option of outlive (options: ${known})`);
    }
  }
  return { flags, onEvent: options.onEvent, logger: options.logger ?? quietLogger };
}

/** The wide event of a run refused before the engine started. */
function refusedEvent(error) {
  return {
    runId: randomUUID(),
    outcome: "failed",
    relaunches: 0,
    checkpointCount: 0,
    lostWorkMs: 0,
    maxLostWorkMs: 0,
    totalMs: 0,
    attempts: 0,
    releaseFailed: 0,
    errorName: "OutliveError",
    errorCode: error.code,
    error: error.message,
  };
}

// ---- the run ---------------------------------------------------------------------------

async function loadPlaywright() {
  for (const name of ["playwright-core", "playwright"]) {
    try {
      return (await import(name)).chromium;
    } catch (e) {
      if (e?.code !== "ERR_MODULE_NOT_FOUND") throw e;
    }
  }
  throw new OutliveError("missing_playwright", "outlive needs playwright-core (a peer dependency): npm install playwright-core");
}

/**
 * Runs `task(page, ctx)` in this process against a browser the engine owns; on a death the
 * entry is abandoned and the task is called again with `ctx.attempt` + 1. Resolves with the
 * task's value; rejects with the task's own rejection, or an `OutliveError`.
 */
export async function outlive(provider, task, options = {}) {
  let checked;
  try {
    if (!provider || !Array.isArray(provider.args)) throw invalid("provider", "must be local(), solari({...}) or cdp(url)");
    if (typeof task !== "function") throw invalid("task", "must be a function (page, ctx) => …");
    checked = checkOptions(options);
  } catch (e) {
    if (typeof options?.onEvent === "function" && e instanceof OutliveError) options.onEvent(refusedEvent(e));
    throw e;
  }
  const chromium = await loadPlaywright();
  const run = new Run(provider, task, checked, chromium);
  return run.result;
}

class Run {
  constructor(provider, task, { flags, onEvent, logger }, chromium) {
    this.task = task;
    this.onEvent = onEvent;
    this.logger = logger;
    this.chromium = chromium;
    this.current = 0;
    this.outcomes = new Map(); // attempt → { ok, value } | { ok: false, error, ours }
    this.browsers = new Set();
    this.stderr = [];
    this.result = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.start(provider, flags);
  }

  start(provider, flags) {
    const child = spawn(binaryPath(), ["serve", "--stdio", ...provider.args, ...flags], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, ...provider.env },
    });
    this.child = child;
    child.on("error", (e) => this.finish(() => this.reject(new OutliveError("engine", `could not start the outlive binary: ${e.message}`))));
    child.stdin.on("error", () => {}); // the engine may be gone; its exit says why
    createInterface({ input: child.stdout }).on("line", (line) => this.onLine(line));
    createInterface({ input: child.stderr }).on("line", (line) => {
      this.stderr.push(line);
      if (this.stderr.length > 20) this.stderr.shift();
      this.logger.info(line);
    });
    // "close", not "exit": stdout is read to its end first, so the end line is never lost.
    child.on("close", (code, signal) => {
      const why = this.stderr.join("\n") || `exit ${code ?? signal}`;
      this.finish(() => this.reject(new OutliveError("engine", `the outlive engine ended without an answer: ${why}`)));
    });
  }

  onLine(line) {
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      return this.logger.warn(`not a protocol line from the engine: ${line.slice(0, 200)}`);
    }
    if (msg.type === "ready") {
      this.cdpUrl = msg.cdpUrl;
      this.controlUrl = msg.controlUrl;
    }
    else if (msg.type === "entry") this.enter(msg);
    else if (msg.type === "end") this.end(msg);
  }

  send(line) {
    if (this.child.stdin.writable) this.child.stdin.write(`${JSON.stringify(line)}\n`);
  }

  /** One entry: connect, call the task, report its outcome unless it was cut meanwhile. */
  async enter(msg) {
    const attempt = msg.attempt;
    if (this.current) this.logger.info(`entry ${this.current} abandoned; entering attempt ${attempt}`);
    this.current = attempt;
    let page;
    try {
      const browser = await this.chromium.connectOverCDP(this.cdpUrl);
      this.browsers.add(browser);
      const context = browser.contexts()[0] ?? (await browser.newContext());
      page = context.pages()[0] ?? (await context.newPage());
    } catch (error) {
      return this.report(attempt, { ok: false, error, ours: true });
    }
    const ctx = new Ctx(this, msg);
    try {
      this.report(attempt, { ok: true, value: await this.task(page, ctx) });
    } catch (error) {
      this.report(attempt, { ok: false, error });
    }
  }

  report(attempt, outcome) {
    if (attempt !== this.current || this.done) return; // cut: its outcome is not the run's
    this.outcomes.set(attempt, outcome);
    this.send(outcome.ok ? { type: "done", attempt } : { type: "failed", attempt, error: describe(outcome.error) });
  }

  end(msg) {
    this.finish(() => {
      if (msg.event && this.onEvent) this.onEvent(msg.event);
      const mine = this.outcomes.get(this.current);
      if (msg.outcome === "completed" && mine?.ok) return this.resolve(mine.value);
      if (msg.code === "task_error" && mine && !mine.ok && !mine.ours) return this.reject(mine.error);
      const option = msg.option ? (NAMES[msg.option] ?? msg.option) : undefined;
      const text = msg.message ?? `the run ended: ${msg.outcome}`;
      this.reject(new OutliveError(msg.code === "task_error" ? "engine" : (msg.code ?? "engine"), text, { option, event: msg.event }));
    });
  }

  /** Settles once: closes Playwright's connections and lets the engine go. */
  finish(settle) {
    if (this.done) return;
    this.done = true;
    for (const b of this.browsers) b.close().catch(() => {});
    this.child.stdin.end();
    settle();
  }
}

function describe(error) {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return show(error);
}

/** What an entry is handed besides its page. */
class Ctx {
  #run;
  #progress;
  constructor(run, msg) {
    this.#run = run;
    this.attempt = msg.attempt;
    this.resumedFrom = msg.resumedFrom
      ? Object.freeze({ url: msg.resumedFrom.url, checkpointAt: new Date(msg.resumedFrom.checkpointAt) })
      : undefined;
    this.#progress = msg.progress ?? undefined;
    Object.freeze(this);
  }

  /** The progress the newest checkpoint held when this entry started (`checkpoint(progress)`). */
  get progress() {
    return this.#progress;
  }

  /** Captures cookies, storage and the URL now (with `progress`, JSON). Never throws. */
  async checkpoint(progress) {
    const run = this.#run;
    if (run.current !== this.attempt || run.done) return false; // a cut entry's is retired
    return post(`${run.controlUrl}/checkpoint`, progress);
  }
}

async function post(url, body) {
  try {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: body === undefined ? "" : JSON.stringify(body),
    });
    const answer = await res.json();
    return res.ok && (answer.checkpointed ?? true) === true;
  } catch {
    return false;
  }
}

// ---- helpers for programs under `outlive run` -------------------------------------------

function controlUrl() {
  const url = process.env.OUTLIVE_CONTROL_URL;
  if (!url) throw new OutliveError("not_under_outlive", "OUTLIVE_CONTROL_URL is not set: run this program with `outlive run -- …`");
  return url;
}

/** Under `outlive run`: a checkpoint now, holding `progress` (JSON) if given. Never throws. */
export async function checkpoint(progress) {
  const url = process.env.OUTLIVE_CONTROL_URL;
  return url ? post(`${url}/checkpoint`, progress) : false;
}

/** Under `outlive run`: the progress this entry resumes with, or undefined. */
export function progress() {
  const p = process.env.OUTLIVE_PROGRESS;
  return p ? JSON.parse(p) : undefined;
}

/** Under `outlive run`: 1 on the first entry, 2 after the first relaunch, … */
export function attempt() {
  return Number(process.env.OUTLIVE_ATTEMPT ?? 1);
}

/** Under `outlive run`: the checkpoint restored into this entry's browser, or undefined. */
export function resumedFrom() {
  const url = process.env.OUTLIVE_RESUMED_FROM_URL;
  const at = process.env.OUTLIVE_RESUMED_FROM_AT;
  return url ? { url, checkpointAt: new Date(at) } : undefined;
}

/** Under `outlive run`: no automatic checkpoint while `fn` runs (a step not to be cut half-way). */
export async function hold(fn) {
  const url = controlUrl();
  const res = await fetch(`${url}/hold`, { method: "POST" });
  if (!res.ok) throw new OutliveError("engine", `outlive refused the hold: ${res.status}`);
  try {
    return await fn();
  } finally {
    await fetch(`${url}/release`, { method: "POST" }).catch(() => {});
  }
}
