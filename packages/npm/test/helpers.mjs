// A program under `npx outlive run -- node helpers.mjs`, using the helpers instead of HTTP:
// the first entry checkpoints its progress and waits for its browser to die; the second
// starts from that progress.
import { writeFileSync } from "node:fs"
import { chromium } from "playwright-core"
import { attempt, checkpoint, hold, progress, resumedFrom } from "outlive"

const browser = await chromium.connectOverCDP(process.env.OUTLIVE_CDP_URL)
const page = browser.contexts()[0].pages()[0]
const done = progress() ?? { steps: [] }
if (attempt() === 1) {
  await page.goto(`${process.env.BANK_URL}/login`)
  const held = await hold(async () => checkpoint({ steps: [...done.steps, "first"] }))
  if (!held) throw new Error("the checkpoint under hold failed")
  for (;;) await page.waitForTimeout(500) // until the session dies
}
writeFileSync(process.env.RESULT, JSON.stringify({ attempt: attempt(), progress: done, resumedFrom: resumedFrom()?.url ?? null }))
await browser.close()
