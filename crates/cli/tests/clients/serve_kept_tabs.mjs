// A Node Playwright client of `outlive serve` with two tabs, connected once, with no reconnect
// code, working through the browser's deaths. Tab A works on Aurora Bank's login form (click,
// fill, evaluate), tab B on the twosite app (its cross-site iframe comes back each time). Each
// tab keeps a sessionStorage mark; the bank's localStorage holds the round.
//
// After each round it asks for a checkpoint and prints `checkpointed N`; the test kills the
// browser and answers `killed` on stdin. An error is recorded with its round, and the round is
// tried again once the page has loaded.
//
// Env: OUTLIVE_CDP_URL, OUTLIVE_CONTROL_URL, BANK_URL, TWOSITE_URL, DEATHS, RESULT_DIR.
// Writes RESULT_DIR/kept_tabs.json.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { chromium } from 'playwright-core';

const env = process.env;
const BANK = env.BANK_URL.replace(/\/$/, '');
const DEATHS = Number(env.DEATHS);
const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

// Between browsers the control URL answers 503: asked again, within a minute.
async function checkpoint() {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const r = await fetch(`${env.OUTLIVE_CONTROL_URL}/checkpoint`, { method: 'POST' });
    if (r.ok && (await r.json()).checkpointed) return;
    if (r.status !== 503 || Date.now() > deadline) throw new Error(`checkpoint: HTTP ${r.status}`);
    await sleep(200);
  }
}

async function bankRound(page, n) {
  await page.goto(`${BANK}/login`);
  const stored = await page.evaluate(() => localStorage.getItem('round'));
  await page.locator('#username').click();
  await page.locator('#username').fill(`round ${n}`);
  const filled = await page.evaluate(() => document.querySelector('#username').value);
  const tab = await page.evaluate(() => sessionStorage.getItem('tab'));
  await page.evaluate((round) => localStorage.setItem('round', String(round)), n);
  return { stored, filled, tab };
}

async function siteRound(page) {
  await page.goto(env.TWOSITE_URL);
  await page.locator('body').click();
  const widget = await page.frameLocator('#widget').locator('body').count();
  const tab = await page.evaluate(() => sessionStorage.getItem('tab'));
  return { widget, tab };
}

// One round in a tab, tried again after an error (recorded) once the page has loaded.
async function attempt(out, page, n, round) {
  for (let i = 0; i < 5; i++) {
    try {
      return await round();
    } catch (e) {
      out.errors.push({ round: n, error: String(e.message).split('\n')[0] });
      await page.waitForLoadState().catch(() => {});
    }
  }
  return null;
}

const out = { rounds: [], errors: [] };
const browser = await chromium.connectOverCDP(env.OUTLIVE_CDP_URL);
const context = browser.contexts()[0];
const bank = context.pages()[0];
const site = await context.newPage();
await bank.goto(`${BANK}/login`);
await bank.evaluate(() => sessionStorage.setItem('tab', 'A'));
await site.goto(env.TWOSITE_URL);
await site.evaluate(() => sessionStorage.setItem('tab', 'B'));
for (let n = 0; n <= DEATHS; n++) {
  const a = await attempt(out, bank, n, () => bankRound(bank, n));
  const b = await attempt(out, site, n, () => siteRound(site));
  out.rounds.push({ a, b });
  if (n === DEATHS) break;
  await checkpoint();
  console.log(`checkpointed ${n}`);
  const { value } = await stdin.next();
  if (value?.trim() !== 'killed') throw new Error('the test did not kill the browser');
}
const pages = context.pages();
out.samePages = pages.length === 2 && pages[0] === bank && pages[1] === site;
out.sameContext = browser.contexts().length === 1 && browser.contexts()[0] === context;
out.connected = browser.isConnected();
writeFileSync(join(env.RESULT_DIR, 'kept_tabs.json'), JSON.stringify(out));
process.exit(0);
