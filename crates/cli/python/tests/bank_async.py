"""bank_sync.py with async Playwright: ``await outlive.run_async(...)``."""

import asyncio
import os

import outlive
from common import BANK, POLL_S, POLLS, check_bank_run, counters, totp

solari = outlive.solari(os.environ["SOLARI_BASE_URL"], api_key=os.environ["SOLARI_API_KEY"])

rows = []  # survives: it is yours
entries = []
events = []
before = counters()["signIns"]


async def task(page, ctx):
    entries.append({"attempt": ctx.attempt, "resumed": ctx.resumed_from is not None, "rows_at_entry": len(rows)})
    if not ctx.resumed_from:
        await page.goto(f"{BANK}/login")
        await sign_in(page)  # password + 2FA, the expensive part
        await ctx.checkpoint()  # never do that twice
    return await scrape_for_twenty_minutes(page)  # outlives the session


async def sign_in(page):
    await page.fill("#username", "alice")
    await page.fill("#password", "wonderland")
    await page.click("#submit")
    await page.wait_for_url("**/totp")
    await page.fill("#code", totp())
    await page.click("#submit")
    await page.wait_for_url("**/account*")


async def scrape_for_twenty_minutes(page):
    # At least POLLS rows and two deaths however fast the machine is (max_relaunches is 5).
    while len(rows) < POLLS or len(entries) < 3:
        await page.goto(f"{BANK}/account")
        rows.append(await page.text_content("#polls"))
        await asyncio.sleep(POLL_S)
    return rows


result = asyncio.run(outlive.run_async(solari, task, checkpoint_every=30, max_relaunches=5, on_event=events.append))
check_bank_run("bank_async.py", result, rows, entries, events, before)
