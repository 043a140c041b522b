// Types of the `outlive` package. playwright-core is a peer dependency, used here for types.
import type { Page } from "playwright-core";

/** The wide event: one per run, on every path (see the outlive README). */
export interface WideEvent {
  runId: string;
  outcome: "completed" | "failed" | "gave_up";
  relaunches: number;
  checkpointCount: number;
  lostWorkMs: number;
  maxLostWorkMs: number;
  totalMs: number;
  attempts: number;
  releaseFailed: number;
  errorName?: string;
  errorCode?: string;
  error?: string;
  [more: string]: unknown;
}

/** Where a re-entered task resumes: the checkpoint restored into its browser. */
export interface ResumedFrom {
  readonly url: string;
  readonly checkpointAt: Date;
}

/** What an entry of the task is handed besides its page. */
export interface Ctx {
  /** 1 on the first entry, 2 after the first relaunch, … The re-entry signal. */
  readonly attempt: number;
  /** The checkpoint restored into this browser; absent on the first entry. */
  readonly resumedFrom?: ResumedFrom;
  /** The progress the newest checkpoint held when this entry started. */
  readonly progress?: unknown;
  /** Captures cookies, storage and the URL now, with `progress` (JSON) if given.
   * Never throws: true if a checkpoint was written. */
  checkpoint(progress?: unknown): Promise<boolean>;
}

/** Where browsers come from: `local()`, `solari({...})`, `cdp(url)`. */
export interface Provider {
  readonly kind: string;
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
}

export interface Logger {
  debug(msg: string, fields?: object): void;
  info(msg: string, fields?: object): void;
  warn(msg: string, fields?: object): void;
  error(msg: string, fields?: object): void;
}

export interface Options {
  /** Automatic capture interval. Default 30_000. */
  checkpointEveryMs?: number;
  /** Deaths in a row without progress before giving up. Default 5. */
  maxRelaunches?: number;
  /** Wait after a launch that failed; a death relaunches at once. Default 2_000. */
  relaunchBackoffMs?: number;
  /** Default 1280×800. */
  viewport?: { width: number; height: number };
  /** Navigated to before the first entry only. */
  startUrl?: string;
  /** Cap on the resume navigation. Default 30_000. */
  navigationTimeoutMs?: number;
  /** "full" puts raw URLs and error text in the event. Default "safe". */
  diagnostics?: "safe" | "full";
  /** Called once per run with the wide event. */
  onEvent?: (event: WideEvent) => void;
  /** Default quietLogger. */
  logger?: Logger;
  /** Leave each browser before its predicted death. Default "off". */
  rotation?: "off" | "learned" | { expectedMs: number };
  /** Keep a warm standby browser. Default false. */
  standby?: boolean;
  /** Page failures in a row in a live browser before giving up. Default 10. */
  maxPageRecoveries?: number;
  /** Browser sessions the whole run may use. Default 100. */
  maxSessions?: number;
}

export type OutliveErrorCode =
  | "gave_up"
  | "invalid_option"
  | "engine"
  | "unsupported_platform"
  | "missing_binary"
  | "missing_playwright"
  | "not_under_outlive"
  | (string & {});

export class OutliveError extends Error {
  readonly code: OutliveErrorCode;
  /** For `invalid_option`: the option's name. */
  readonly option?: string;
  /** The run's wide event, when the engine ran. */
  readonly event?: WideEvent;
}

/** Runs `task` in this process against a browser that outlives its deaths. Resolves with
 * the task's value; rejects with the task's own rejection (by identity) or an OutliveError. */
export function outlive<T>(
  provider: Provider,
  task: (page: Page, ctx: Ctx) => Promise<T>,
  options?: Options,
): Promise<T>;

export function local(): Provider;
export function solari(options?: { baseUrl?: string; apiKey?: string }): Provider;
export function cdp(url: string): Provider;

export const quietLogger: Logger;
export const consoleLogger: Logger;
export const noopLogger: Logger;

/** The path of the `outlive` binary this package runs. */
export function binaryPath(): string;

/** Under `outlive run`: a checkpoint now, with `progress` if given. Never throws. */
export function checkpoint(progress?: unknown): Promise<boolean>;
/** Under `outlive run`: the progress this entry resumes with. */
export function progress<T = unknown>(): T | undefined;
/** Under `outlive run`: 1 on the first entry, 2 after the first relaunch, … */
export function attempt(): number;
/** Under `outlive run`: the checkpoint restored into this browser. */
export function resumedFrom(): ResumedFrom | undefined;
/** Under `outlive run`: no automatic checkpoint while `fn` runs. */
export function hold<T>(fn: () => Promise<T> | T): Promise<T>;
