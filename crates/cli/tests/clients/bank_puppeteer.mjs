// Aurora Bank with puppeteer-core (Node), as a user would script it, run by `outlive run`.
//
// Signs in once (password + TOTP), optionally seeds the twosite app, polls the account page
// POLLS times and makes one transfer half-way, checkpointing its progress with outlive after
// each step so that a rerun after a browser death skips what is done.
//
// Env: OUTLIVE_* (set by `outlive run`), BANK_URL, BANK_USER, BANK_PASSWORD, BANK_TOTP_SECRET,
// POLLS, POLL_MS, TWOSITE_URL (optional), RESULT_DIR, PAGE_SHAPE (optional): `first` (the
// browser's first page, the default), `new` (`browser.newPage()`, and `browser.close()` at
// the end, as cloud quickstarts do) or `two_tabs` (a new page for the bank, another for the
// twosite app).

import { createHmac } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import puppeteer from 'puppeteer-core';

const env = process.env;
const BANK = env.BANK_URL.replace(/\/$/, '');
const TWOSITE = env.TWOSITE_URL;
const POLLS = Number(env.POLLS ?? 6);
const POLL_MS = Number(env.POLL_MS ?? 500);
const ATTEMPT = Number(env.OUTLIVE_ATTEMPT);
const RESULT_DIR = env.RESULT_DIR;
const TRANSFER_CENTS = 1234;
const SHAPE = env.PAGE_SHAPE ?? 'first';

// RFC 6238: HMAC-SHA1, 30 s step, 6 digits.
function totp(secretB32) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = '';
  for (const c of secretB32.toUpperCase().replace(/[\s=]/g, '')) {
    bits += alphabet.indexOf(c).toString(2).padStart(5, '0');
  }
  const key = Buffer.from(bits.match(/.{8}/g).map((byte) => parseInt(byte, 2)));
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(Math.floor(Date.now() / 30_000)));
  const mac = createHmac('sha1', key).update(counter).digest();
  const code = (mac.readUInt32BE(mac[19] & 0x0f) & 0x7fffffff) % 1_000_000;
  return String(code).padStart(6, '0');
}

async function control(action, body = {}) {
  const response = await fetch(`${env.OUTLIVE_CONTROL_URL}/${action}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`${action}: HTTP ${response.status}`);
  return response.json();
}

const progressIn = env.OUTLIVE_PROGRESS ? JSON.parse(env.OUTLIVE_PROGRESS) : null;
const progress = { polls: 0, ...progressIn };
progress.attempts = [...(progress.attempts ?? []), ATTEMPT];
const seen = {
  attempt: ATTEMPT,
  progressIn,
  resumedFromUrl: env.OUTLIVE_RESUMED_FROM_URL ?? null,
  signedInHere: false,
  transferredHere: false,
  polls: [],
  checkpoints: [],
};

// Rewritten after every step: the browser (and this process) may die at any moment.
function record() {
  // Renamed into place, so a process killed mid-write leaves the last whole record.
  mkdirSync(RESULT_DIR, { recursive: true });
  const partial = join(RESULT_DIR, `.attempt-${ATTEMPT}.json.partial`);
  writeFileSync(partial, JSON.stringify(seen, null, 1));
  renameSync(partial, join(RESULT_DIR, `attempt-${ATTEMPT}.json`));
}

async function checkpoint() {
  seen.checkpoints.push((await control('checkpoint', progress)).checkpointed);
  record();
}

async function submit(page) {
  await Promise.all([page.waitForNavigation(), page.click('#submit')]);
}

const started = performance.now();
const browser = await puppeteer.connect({
  browserWSEndpoint: env.OUTLIVE_CDP_URL,
  defaultViewport: null, // keep the browser's own window size
});
seen.pages = (await browser.pages()).map((p) => p.url());
const page = SHAPE === 'first' ? (await browser.pages())[0] : await browser.newPage();
// The twosite app's tab: its own with `two_tabs`. Headless Chromium does not submit a form
// clicked in a background tab (seen with plain Chromium too), so each tab is brought to the
// front before it is used.
const site = SHAPE === 'two_tabs' ? await browser.newPage() : page;
const front = async (tab) => { if (site !== page) await tab.bringToFront(); };
seen.connectMs = Math.round(performance.now() - started);
seen.urlAtStart = page.url();
record();

if (TWOSITE && progress.seeded) { // what an earlier entry seeded must be back
  await front(site);
  await site.goto(TWOSITE);
  seen.twositeReport = await site.evaluate(() => twosite.report());
  record();
}

await front(page);
if (!progress.signedIn) {
  // A cut between the TOTP and the checkpoint after it leaves a signed-in session in the
  // state a periodic checkpoint restored: look before signing in again.
  await page.goto(`${BANK}/account`);
  if (new URL(page.url()).pathname === '/account') {
    progress.signedIn = true;
    await checkpoint();
  }
}
if (!progress.signedIn) {
  await page.goto(`${BANK}/login`);
  await page.type('#username', env.BANK_USER);
  await page.type('#password', env.BANK_PASSWORD);
  await submit(page);
  await page.type('#code', totp(env.BANK_TOTP_SECRET));
  // From here until the checkpoint below, a browser death loses the session the bank is
  // about to grant: the next entry has to sign in again. Said first, so it is seen.
  seen.totpSent = true;
  record();
  await submit(page);
  if (new URL(page.url()).pathname !== '/account') throw new Error(`sign-in failed at ${page.url()}`);
  seen.signedInHere = progress.signedIn = true;
  await checkpoint();
}

if (TWOSITE && !progress.seeded) {
  await front(site);
  await site.goto(TWOSITE);
  await site.evaluate(() => twosite.seed());
  await front(page);
  progress.seeded = true;
  await checkpoint();
}

while (progress.polls < POLLS) {
  if (progress.polls >= Math.floor(POLLS / 2) && !progress.transferred) {
    // Not repeatable: no automatic checkpoint in the middle, one right after. A death can
    // still cut it between the bank's answer and that checkpoint, so the balance before it
    // is saved first, and an entry that finds it already debited does not send it again.
    await control('hold');
    try {
      await page.goto(`${BANK}/account`);
      const balance = Number(await page.$eval('#balance', (el) => el.dataset.cents));
      if (progress.balanceBefore === undefined) {
        progress.balanceBefore = balance;
        await checkpoint();
      }
      if (balance === progress.balanceBefore - TRANSFER_CENTS) {
        seen.transferFoundDone = progress.transferred = true;
        await checkpoint();
      } else {
        await page.goto(`${BANK}/transfer`);
        await page.type('#to', 'bob');
        await page.type('#amount', String(TRANSFER_CENTS));
        await submit(page);
        if (new URL(page.url()).pathname !== '/account') throw new Error(`transfer failed at ${page.url()}`);
        seen.transferredHere = progress.transferred = true;
        await checkpoint();
      }
    } finally {
      await control('release');
    }
  }

  await page.goto(`${BANK}/account`);
  const poll = {
    polls: await page.$eval('#polls', (el) => el.textContent),
    pref: await page.$eval('#pref', (el) => el.textContent),
    broken: await page.$eval('body', (body) => body.classList.contains('broken')),
    url: page.url(),
  };
  seen.polls.push(poll);
  record();
  if (poll.pref === 'MISSING' || poll.broken) throw new Error(`localStorage lost: ${JSON.stringify(poll)}`);
  progress.polls += 1;
  await checkpoint();
  await sleep(POLL_MS);
}

writeFileSync(
  join(RESULT_DIR, 'result.json'),
  JSON.stringify(
    {
      polls: progress.polls,
      attempts_seen: progress.attempts,
      seeded: progress.seeded ?? false,
      transferred: progress.transferred ?? false,
    },
    null,
    1,
  ),
);
if (SHAPE === 'first') await browser.disconnect();
else await browser.close();
