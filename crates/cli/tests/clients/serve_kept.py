"""A client of `outlive serve` that connects once, with no reconnect code, and works through
the browser's deaths. It signs in to Aurora Bank, then works in rounds: go to the account
page, click the transfer link, fill a field, evaluate. Each round first reads the field the
last one typed and did not send: after a death it is back. After each round it stores the round in
localStorage, asks for a checkpoint and prints `checkpointed N`; the test then kills the
browser and answers `killed` on stdin, and the next round runs into the death.

An error is recorded with its round and the round is tried again. It keeps the same Browser
and Page objects to the end.

Env: OUTLIVE_CDP_URL, OUTLIVE_CONTROL_URL, BANK_URL, BANK_USER, BANK_PASSWORD,
BANK_TOTP_SECRET, DEATHS, RESULT_DIR, PAGE_SHAPE (optional): `first` (the default context's
first page, the default) or `new_context` (a page of a context it makes). Writes
RESULT_DIR/kept.json.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from playwright.sync_api import Error, sync_playwright

from bank_login import BANK, sign_in

env = os.environ
RESULT = Path(env["RESULT_DIR"]) / "kept.json"
DEATHS = int(env["DEATHS"])


def checkpoint() -> None:
    """A checkpoint of the browser served now; between browsers the control URL answers 503,
    so it is asked again (bounded)."""
    deadline = time.monotonic() + 60
    while True:
        req = urllib.request.Request(env["OUTLIVE_CONTROL_URL"] + "/checkpoint", data=b"", method="POST")
        try:
            with urllib.request.urlopen(req) as r:
                if json.load(r)["checkpointed"]:
                    return
        except urllib.error.HTTPError as e:
            if e.code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def checkpoint_and_die(n: int) -> None:
    """Round `n` is done: a checkpoint, then `checkpointed N` for the test, which kills the
    browser and answers `killed`."""
    checkpoint()
    print(f"checkpointed {n}", flush=True)
    if sys.stdin.readline().strip() != "killed":
        raise SystemExit("the test did not kill the browser")


def one_round(page, n: int) -> dict:
    # The field typed but not sent in the last round, on the page as it was left.
    left = page.evaluate("document.querySelector('#to')?.value ?? null")
    page.goto(f"{BANK}/account")
    user = page.text_content("#user")
    stored = page.evaluate("localStorage.getItem('round')")
    page.locator("#transfer-link").click()
    page.wait_for_url(f"{BANK}/transfer")
    page.locator("#to").fill(f"round {n}")
    filled = page.evaluate("document.querySelector('#to').value")
    return {"user": user, "stored": stored, "filled": filled, "left": left}


def main() -> None:
    out = {"rounds": [], "errors": []}
    with sync_playwright() as pw:
        browser = pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"])
        if env.get("PAGE_SHAPE") == "new_context":
            context = browser.new_context()
            page = context.new_page()
        else:
            context = browser.contexts[0]
            page = context.pages[0]
        sign_in(page)
        for n in range(DEATHS + 1):
            for _ in range(5):
                try:
                    out["rounds"].append(one_round(page, n))
                    page.evaluate(f"localStorage.setItem('round', '{n}')")
                    break
                except Error as e:
                    out["errors"].append({"round": n, "error": str(e).splitlines()[0]})
                    # What a navigation interrupted leaves loading: let it end first.
                    page.wait_for_load_state()
            if n == DEATHS:
                break
            checkpoint_and_die(n)
        out["samePage"] = context.pages == [page] and browser.contexts[-1] is context
        out["connected"] = browser.is_connected()
        out["pageClosed"] = page.is_closed()
    RESULT.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
