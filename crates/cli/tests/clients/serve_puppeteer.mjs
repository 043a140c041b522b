// A Puppeteer client of `outlive serve`, holding `pages()[0]`. Puppeteer talks to its pages
// through tab targets, which the endpoint does not carry through a death yet: its connection
// is closed at the death (the fallback), and it connects again to find its page restored.
//
// It stores a mark in localStorage, asks for a checkpoint and prints `checkpointed 0`; the
// test kills the browser and answers `killed` on stdin.
//
// Env: OUTLIVE_CDP_URL, OUTLIVE_CONTROL_URL, BANK_URL, RESULT_DIR. Writes
// RESULT_DIR/puppeteer.json.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import puppeteer from 'puppeteer-core';

const env = process.env;
const BANK = env.BANK_URL.replace(/\/$/, '');
const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const connect = () => puppeteer.connect({ browserWSEndpoint: env.OUTLIVE_CDP_URL, defaultViewport: null });

const out = {};
let browser = await connect();
const closed = new Promise((resolve) => browser.once('disconnected', resolve));
let [page] = await browser.pages();
await page.goto(`${BANK}/login`);
await page.evaluate(() => localStorage.setItem('mark', 'kept'));
const r = await fetch(`${env.OUTLIVE_CONTROL_URL}/checkpoint`, { method: 'POST' });
out.checkpointed = (await r.json()).checkpointed;
console.log('checkpointed 0');
await stdin.next();
await closed;
out.disconnected = true;

// The same URL again, until the restored browser is served.
const deadline = Date.now() + 60_000;
for (;;) {
  try {
    browser = await connect();
    break;
  } catch (e) {
    if (Date.now() > deadline) throw e;
    await sleep(300);
  }
}
[page] = await browser.pages();
out.urlAfter = page.url();
out.markAfter = await page.evaluate(() => localStorage.getItem('mark'));
await browser.disconnect();
writeFileSync(join(env.RESULT_DIR, 'puppeteer.json'), JSON.stringify(out));
process.exit(0);
