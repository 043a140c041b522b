"""The reference README's first example in Python (sync Playwright), against the gateway and
Aurora Bank: through at least two deaths with one sign-in, the rows kept around the task."""

import os
import time

import outlive
from common import BANK, POLL_S, POLLS, check_bank_run, counters, totp

solari = outlive.solari(os.environ["SOLARI_BASE_URL"], api_key=os.environ["SOLARI_API_KEY"])

rows = []  # survives: it is yours
entries = []
events = []
before = counters()["signIns"]


def task(page, ctx):
    entries.append({"attempt": ctx.attempt, "resumed": ctx.resumed_from is not None, "rows_at_entry": len(rows)})
    if not ctx.resumed_from:
        page.goto(f"{BANK}/login")
        sign_in(page)  # password + 2FA, the expensive part
        ctx.checkpoint()  # never do that twice
    return scrape_for_twenty_minutes(page)  # outlives the session


def sign_in(page):
    page.fill("#username", "alice")
    page.fill("#password", "wonderland")
    page.click("#submit")
    page.wait_for_url("**/totp")
    page.fill("#code", totp())
    page.click("#submit")
    page.wait_for_url("**/account*")


def scrape_for_twenty_minutes(page):
    # At least POLLS rows and two deaths however fast the machine is (max_relaunches is 5).
    while len(rows) < POLLS or len(entries) < 3:
        page.goto(f"{BANK}/account")
        rows.append(page.text_content("#polls"))
        time.sleep(POLL_S)
    return rows


result = outlive.run(solari, task, checkpoint_every=30, max_relaunches=5, on_event=events.append)
check_bank_run("bank_sync.py", result, rows, entries, events, before)
