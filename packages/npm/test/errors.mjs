// How a run ends besides completing: the task's own rejection back by identity, gave_up after
// more deaths than maxRelaunches, invalid_option before anything is launched.
import assert from "node:assert/strict"
import { outlive, solari, OutliveError } from "outlive"

const provider = solari({ baseUrl: process.env.SOLARI_BASE_URL, apiKey: process.env.SOLARI_API_KEY })

// A plain object, rejected: the same object comes back, and the run's one event says failed.
const mine = { reason: "not a bank day" }
const events = []
const thrown = await outlive(provider, async (page) => {
  await page.goto("data:text/html,<title>t</title>")
  throw mine
}, { onEvent: (e) => events.push(e) }).catch((e) => e)
assert.equal(thrown, mine)
assert.deepEqual(events.map((e) => e.outcome), ["failed"])

// Bad options: refused before any launch, naming the option.
for (const [options, option] of [
  [{ checkpointEveryMs: -1 }, "checkpointEveryMs"],
  [{ maxRelaunches: "5" }, "maxRelaunches"],
  [{ bogus: 1 }, "bogus"],
  [{ checkpointEveryMs: 0 }, "checkpointEveryMs"], // refused by the engine, before a launch
]) {
  const seen = []
  let called = false
  const e = await outlive(provider, async () => { called = true }, { ...options, onEvent: (ev) => seen.push(ev) }).catch((e) => e)
  assert.ok(e instanceof OutliveError, `${JSON.stringify(options)}: ${e}`)
  assert.equal(e.code, "invalid_option")
  assert.equal(e.option, option)
  assert.ok(!called)
  assert.equal(seen.length, 1)
  assert.equal(seen[0].attempts, 0)
}

// More deaths than maxRelaunches: gave_up, the task entered once per browser.
const attempts = []
const gaveUp = await outlive(provider, async (page, ctx) => {
  attempts.push(ctx.attempt)
  for (;;) await page.goto("data:text/html,<title>waiting for the session to end</title>").then(() => page.waitForTimeout(300))
}, { maxRelaunches: 1 }).catch((e) => e)
assert.ok(gaveUp instanceof OutliveError, String(gaveUp))
assert.equal(gaveUp.code, "gave_up")
assert.deepEqual(attempts, [1, 2])
assert.equal(gaveUp.event.outcome, "gave_up")
console.log(JSON.stringify({ test: "errors.mjs", ok: true }))
