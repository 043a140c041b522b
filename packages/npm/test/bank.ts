// The reference README's first example, changed only in the import line and the provider
// (the project's gateway and Aurora Bank), with what the test checks around it: at least two
// deaths, one sign-in, the value returned, `attempt` counting, the rows kept around the task.
import { createHmac } from "node:crypto"
import type { Page } from "playwright-core"
import { outlive, solari as solariProvider, type WideEvent } from "outlive"

const BANK = process.env.BANK_URL!
const POLLS = Number(process.env.POLLS ?? 10)
const POLL_MS = Number(process.env.POLL_MS ?? 500)
const solari = solariProvider({ baseUrl: process.env.SOLARI_BASE_URL, apiKey: process.env.SOLARI_API_KEY })

const rows: string[] = [] // survives: it is yours
const entries: { attempt: number; resumed: boolean; rowsAtEntry: number }[] = []
const events: WideEvent[] = []

const result = await outlive(solari, async (page, ctx) => {
  entries.push({ attempt: ctx.attempt, resumed: !!ctx.resumedFrom, rowsAtEntry: rows.length })
  if (!ctx.resumedFrom) {
    await page.goto(`${BANK}/login`)
    await signIn(page)          // password + 2FA, the expensive part
    await ctx.checkpoint()      // never do that twice
  }
  return await scrapeForTwentyMinutes(page)   // outlives the session
}, { checkpointEveryMs: 30_000, maxRelaunches: 5, onEvent: (e) => events.push(e) })

async function signIn(page: Page): Promise<void> {
  await page.fill("#username", "alice")
  await page.fill("#password", "wonderland")
  await page.click("#submit")
  await page.waitForURL("**/totp")
  await page.fill("#code", totp("JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"))
  await page.click("#submit")
  await page.waitForURL("**/account*")
}

async function scrapeForTwentyMinutes(page: Page): Promise<string[]> {
  // At least POLLS rows and two deaths however fast the machine is (maxRelaunches is 5).
  while (rows.length < POLLS || entries.length < 3) {
    await page.goto(`${BANK}/account`)
    rows.push((await page.textContent("#polls")) ?? "")
    await new Promise((r) => setTimeout(r, POLL_MS))
  }
  return rows
}

function totp(base32: string): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
  const bits = [...base32].map((c) => alphabet.indexOf(c).toString(2).padStart(5, "0")).join("")
  const key = Buffer.from(bits.match(/.{8}/g)!.map((b) => parseInt(b, 2)))
  const counter = Buffer.alloc(8)
  counter.writeBigUInt64BE(BigInt(Math.floor(Date.now() / 30_000)))
  const mac = createHmac("sha1", key).update(counter).digest()
  const offset = mac[mac.length - 1] & 0x0f
  return String((mac.readUInt32BE(offset) & 0x7fffffff) % 1_000_000).padStart(6, "0")
}

const counters = await (await fetch(`${BANK}/__counters`)).json()
const check = (ok: boolean, what: string) => {
  if (!ok) throw new Error(`${what}: ${JSON.stringify({ entries, events, counters, rows: rows.length })}`)
}
check(result === rows && rows.length >= POLLS, "the task's value is the rows")
check(events.length === 1 && events[0].outcome === "completed", "one wide event, completed")
check(events[0].relaunches >= 2, "at least two deaths")
check(counters.signIns === 1, "one sign-in")
check(entries.every((e, i) => e.attempt === i + 1), "attempt counts the entries")
check(entries.slice(1).every((e) => e.resumed && e.rowsAtEntry > 0), "later entries resumed, rows kept")
// One bank session throughout: the account page's own count only grows.
check(rows.every((r, i) => i === 0 || Number(r) > Number(rows[i - 1])), "one bank session")
console.log(JSON.stringify({ test: "bank.ts", entries: entries.length, relaunches: events[0].relaunches, rows: rows.length }))
