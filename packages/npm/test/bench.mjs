// Re-entry after a death, side by side on one gateway: the task through the API (in this
// process) against the same task as an `outlive run` program (a new process, a new Playwright
// each time). Measured from the dying entry's Playwright `disconnected` event (the front
// closing its connection once the death is detected) to the next entry's first line.
// Usage: node bench.mjs DEATHS (env as for bank.ts; OUTLIVE_BINARY or the installed package).
import { spawn } from "node:child_process"
import { readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { outlive, solari } from "outlive"

const DEATHS = Number(process.argv[2] ?? 4)
const provider = solari({ baseUrl: process.env.SOLARI_BASE_URL, apiKey: process.env.SOLARI_API_KEY })
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const gaps = (marks) => marks.slice(1).map((m, i) => m.entered - marks[i].disconnected)

// The API: each entry notes when it started and when its connection closed.
const marks = []
await outlive(provider, async (page, ctx) => {
  const mark = { entered: Date.now() }
  marks.push(mark)
  page.context().browser().on("disconnected", () => (mark.disconnected = Date.now()))
  if (ctx.attempt > DEATHS) return
  for (;;) await page.goto(`${process.env.BANK_URL}/login`).then(() => page.waitForTimeout(200))
}, { maxRelaunches: DEATHS })

// The same task as a program, once per entry.
const log = join(tmpdir(), `outlive-bench-${process.pid}.jsonl`)
writeFileSync(log, "")
const program = `
import { appendFileSync } from "node:fs"
const entered = Date.now()
const { chromium } = await import("playwright-core")
const browser = await chromium.connectOverCDP(process.env.OUTLIVE_CDP_URL)
const page = browser.contexts()[0].pages()[0]
const mark = { attempt: Number(process.env.OUTLIVE_ATTEMPT), started: entered, entered: Date.now() }
browser.on("disconnected", () => appendFileSync(process.env.LOG, JSON.stringify({ ...mark, disconnected: Date.now() }) + "\\n"))
if (mark.attempt > ${DEATHS}) { appendFileSync(process.env.LOG, JSON.stringify(mark) + "\\n"); process.exit(0) }
for (;;) await page.goto(process.env.BANK_URL + "/login").then(() => page.waitForTimeout(200))
`
writeFileSync("bench-program.mjs", program)
await new Promise((resolve, reject) => {
  const child = spawn("npx", ["outlive", "run", "--solari-url", process.env.SOLARI_BASE_URL, "--max-relaunches", String(DEATHS), "--", "node", "bench-program.mjs"], {
    stdio: ["ignore", "inherit", "ignore"],
    env: { ...process.env, LOG: log },
  })
  child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`outlive run exited ${code}`))))
})
const runMarks = readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l)).sort((a, b) => a.attempt - b.attempt)

const api = gaps(marks)
const run = gaps(runMarks)
console.log(JSON.stringify({
  test: "bench.mjs",
  deaths: DEATHS,
  reentryMs: { api: { median: median(api), all: api }, outliveRun: { median: median(run), all: run } },
  outliveRunProgramStartToTaskMs: median(runMarks.map((m) => m.entered - m.started)),
}))
