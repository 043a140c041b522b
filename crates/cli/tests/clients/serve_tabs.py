"""A client of `outlive serve` with two tabs, as an agent keeps them: it signs in to Aurora
Bank in the first, opens the twosite app in a second and gives each tab a sessionStorage
value. It checkpoints and prints `checkpointed` (the test then kills the browser), works in
the second tab until the browser goes away, then reconnects and reports the tabs it finds:
their order, URLs and sessionStorage.

Env: OUTLIVE_CDP_URL, OUTLIVE_CONTROL_URL, BANK_URL, BANK_USER, BANK_PASSWORD,
BANK_TOTP_SECRET, TWOSITE_URL, RESULT_DIR. Writes RESULT_DIR/tabs.json.
"""

import json
import os
from pathlib import Path

from playwright.sync_api import sync_playwright

from bank_login import BANK, sign_in
from serve_client import checkpoint, reconnect, work_until_closed

env = os.environ
RESULT = Path(env["RESULT_DIR"]) / "tabs.json"


def tabs(browser):
    return [
        {"url": p.url, "tab": p.evaluate("sessionStorage.getItem('tab')")}
        for p in browser.contexts[0].pages
    ]


out = {}
with sync_playwright() as pw:
    browser = pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"])
    bank = browser.contexts[0].pages[0]
    sign_in(bank)
    bank.evaluate("sessionStorage.setItem('tab', 'bank')")
    other = browser.contexts[0].new_page()
    other.goto(env["TWOSITE_URL"])
    other.evaluate("sessionStorage.setItem('tab', 'twosite')")
    out["before"] = tabs(browser)
    out["checkpointed"] = checkpoint()
    print("checkpointed", flush=True)

    out.update(work_until_closed(other))

    browser = reconnect(pw)
    out["after"] = tabs(browser)
    bank = next((p for p in browser.contexts[0].pages if p.url.startswith(BANK)), None)
    if bank is not None:
        bank.goto(f"{BANK}/account")
        out["signedInAfter"] = bank.url.startswith(f"{BANK}/account")

RESULT.write_text(json.dumps(out))
