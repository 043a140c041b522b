"""Aurora Bank with Playwright (Python), as a user would script it, run by `outlive run`.

Signs in once (password + TOTP), optionally seeds the twosite app, polls the account page
POLLS times and makes one transfer half-way, checkpointing its progress with outlive after
each step so that a rerun after a browser death skips what is done.

Env: OUTLIVE_* (set by `outlive run`), BANK_URL, BANK_USER, BANK_PASSWORD, BANK_TOTP_SECRET,
POLLS, POLL_MS, TWOSITE_URL (optional), RESULT_DIR. Run as a durable task (`outlive worker
--task`), it takes `polls` and `poll_ms` from its input ($OUTLIVE_INPUT) instead.
"""

import json
import os
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

from bank_login import BANK, sign_in

env = os.environ
TWOSITE = env.get("TWOSITE_URL")
INPUT = json.loads(env.get("OUTLIVE_INPUT") or "{}")
POLLS = int(INPUT.get("polls", env.get("POLLS", "6")))
POLL_MS = int(INPUT.get("poll_ms", env.get("POLL_MS", "500")))
ATTEMPT = int(env["OUTLIVE_ATTEMPT"])
# Where the script works: `first` (contexts[0].pages[0], the default), `context_new_page`
# (contexts[0].new_page()), `new_context` (browser.new_context().new_page()) or
# `browser_new_page` (browser.new_page(), a context of its own).
SHAPE = env.get("PAGE_SHAPE", "first")
RESULT_DIR = Path(env["RESULT_DIR"])
TRANSFER_CENTS = 1234


def control(action: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"{env['OUTLIVE_CONTROL_URL']}/{action}",
        data=json.dumps(body or {}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


progress = json.loads(env.get("OUTLIVE_PROGRESS") or "{}")
progress.setdefault("polls", 0)
progress["attempts"] = progress.get("attempts", []) + [ATTEMPT]
seen = {
    "attempt": ATTEMPT,
    "input": INPUT,
    "progressIn": json.loads(env["OUTLIVE_PROGRESS"]) if env.get("OUTLIVE_PROGRESS") else None,
    "resumedFromUrl": env.get("OUTLIVE_RESUMED_FROM_URL"),
    "signedInHere": False,
    "transferredHere": False,
    "polls": [],
    "checkpoints": [],
}


def record() -> None:
    # Rewritten after every step: the browser (and this process) may die at any moment.
    # Renamed into place, so a process killed mid-write leaves the last whole record.
    RESULT_DIR.mkdir(parents=True, exist_ok=True)
    partial = RESULT_DIR / f".attempt-{ATTEMPT}.json.partial"
    partial.write_text(json.dumps(seen, indent=1))
    partial.rename(RESULT_DIR / f"attempt-{ATTEMPT}.json")


def checkpoint() -> None:
    seen["checkpoints"].append(control("checkpoint", progress).get("checkpointed"))
    record()


with sync_playwright() as p:
    started = time.monotonic()
    browser = p.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"])
    if SHAPE == "first":
        page = browser.contexts[0].pages[0]
    elif SHAPE == "context_new_page":
        page = browser.contexts[0].new_page()
    elif SHAPE == "new_context":
        page = browser.new_context().new_page()
    elif SHAPE == "browser_new_page":
        page = browser.new_page()
    else:
        raise SystemExit(f"unknown PAGE_SHAPE {SHAPE}")
    seen |= {
        "connectMs": round((time.monotonic() - started) * 1000),
        "contexts": len(browser.contexts),
        "pages": [pg.url for c in browser.contexts for pg in c.pages],
        "urlAtStart": page.url,
    }
    record()

    if TWOSITE and progress.get("seeded"):  # what an earlier entry seeded must be back
        page.goto(TWOSITE)
        seen["twositeReport"] = page.evaluate("twosite.report()")
        record()

    if not progress.get("signedIn"):
        # A cut between the TOTP and the checkpoint after it leaves a signed-in session in
        # the state a periodic checkpoint restored: look before signing in again.
        page.goto(f"{BANK}/account")
        if page.url.split("?")[0].endswith("/account"):
            progress["signedIn"] = True
            checkpoint()
    if not progress.get("signedIn"):

        def code_typed():
            # From here until the checkpoint below, a browser death loses the session the
            # bank is about to grant: the next entry has to sign in again. Said first, so
            # it is seen.
            seen["totpSent"] = True
            record()

        sign_in(page, code_typed)
        seen["signedInHere"] = progress["signedIn"] = True
        checkpoint()

    if TWOSITE and not progress.get("seeded"):
        page.goto(TWOSITE)
        page.evaluate("twosite.seed()")
        progress["seeded"] = True
        checkpoint()

    while progress["polls"] < POLLS:
        if progress["polls"] >= POLLS // 2 and not progress.get("transferred"):
            # Not repeatable: no automatic checkpoint in the middle, one right after. A death
            # can still cut it between the bank's answer and that checkpoint, so the balance
            # before it is saved first, and an entry that finds it already debited does not
            # send it again.
            control("hold")
            try:
                page.goto(f"{BANK}/account")
                balance = int(page.get_attribute("#balance", "data-cents"))
                if "balanceBefore" not in progress:
                    progress["balanceBefore"] = balance
                    checkpoint()
                if balance == progress["balanceBefore"] - TRANSFER_CENTS:
                    seen["transferFoundDone"] = progress["transferred"] = True
                    checkpoint()
                    continue
                page.goto(f"{BANK}/transfer")
                page.fill("#to", "bob")
                page.fill("#amount", str(TRANSFER_CENTS))
                page.click("#submit")
                page.wait_for_url("**/account")
                seen["transferredHere"] = progress["transferred"] = True
                checkpoint()
            finally:
                control("release")

        page.goto(f"{BANK}/account")
        poll = {
            "polls": page.text_content("#polls"),
            "pref": page.text_content("#pref"),
            "broken": page.evaluate("document.body.classList.contains('broken')"),
            "url": page.url,
        }
        seen["polls"].append(poll)
        record()
        assert poll["pref"] != "MISSING" and not poll["broken"], f"localStorage lost: {poll}"
        progress["polls"] += 1
        checkpoint()
        time.sleep(POLL_MS / 1000)

    result = {
        "polls": progress["polls"],
        "input": INPUT,
        "attempts_seen": progress["attempts"],
        "seeded": progress.get("seeded", False),
        "transferred": progress.get("transferred", False),
    }
    (RESULT_DIR / "result.json").write_text(json.dumps(result, indent=1))
