"""A client of `outlive serve` whose swap fails at a death, after the restore left its page's
load to it. It signs in to Aurora Bank, types a field on the transfer page and stores a mark in
localStorage, asks for a checkpoint, then holds the automatic ones and opens a second tab. That
tab is in no checkpoint: at the death it is not reopened, and the connection is closed
(`tab_not_reopened`). Outlive loads the first page itself. Connecting again, the client finds
it at its URL, signed in, with its field and its mark back.

Env: OUTLIVE_CDP_URL, OUTLIVE_CONTROL_URL, BANK_URL, BANK_USER, BANK_PASSWORD,
BANK_TOTP_SECRET, RESULT_DIR. Writes RESULT_DIR/late_tab.json.
"""

import json
import os
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

from bank_login import BANK, sign_in
from serve_client import reconnect, work_until_closed

env = os.environ
RESULT = Path(env.get("RESULT_DIR", ".")) / "late_tab.json"


def control(action: str) -> dict:
    req = urllib.request.Request(env["OUTLIVE_CONTROL_URL"] + "/" + action, data=b"", method="POST")
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def main() -> None:
    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"])
        context = browser.contexts[0]
        page = context.pages[0]
        sign_in(page)
        page.evaluate("localStorage.setItem('mark', 'kept')")
        page.goto(f"{BANK}/transfer")
        page.locator("#to").fill("typed before the death")
        out["checkpointed"] = control("checkpoint")["checkpointed"]
        control("hold")
        late = context.new_page()
        late.goto(f"{BANK}/account")
        print("checkpointed", flush=True)

        out.update(work_until_closed(page))

        browser = reconnect(pw)
        pages = [p for c in browser.contexts for p in c.pages]
        first = pages[0]
        first.wait_for_load_state()
        out["pagesAfter"] = len(pages)
        out["urlAfter"] = first.url
        out["fieldAfter"] = first.evaluate("document.querySelector('#to')?.value ?? null")
        out["markAfter"] = first.evaluate("localStorage.getItem('mark')")
    RESULT.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
