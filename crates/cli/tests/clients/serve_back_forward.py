"""A client of `outlive serve` that connects once and walks its back/forward list after each
death. It signs in, opens the account page, the transfer page and a `pushState` entry on it
(`?step=2`). On `checkpointed N` the test kills the browser. After each death the client goes
Back twice and Forward twice, and records where each step landed (path, query and title).
Each step waits for its commit: with `connect_over_cdp`, a step the back/forward cache answers
fires no `load`, direct or not (playwright-mcp#1635).

Env: as serve_kept.py. Writes RESULT_DIR/back_forward.json.
"""

import json
import os
from pathlib import Path

from playwright.sync_api import Error, sync_playwright

from bank_login import BANK, sign_in
from serve_kept import checkpoint_and_die

env = os.environ
RESULT = Path(env["RESULT_DIR"]) / "back_forward.json"
DEATHS = int(env["DEATHS"])


def where(page) -> list:
    """The page's path, query and title. A step waits for its commit only, so the document
    may still be loading: a read it interrupts is tried again once it has loaded."""
    for _ in range(5):
        try:
            return page.evaluate("[location.pathname + location.search, document.title]")
        except Error as e:
            if not any(k in str(e) for k in ("Execution context was destroyed", "navigated or closed")):
                raise
            page.wait_for_load_state()
    raise SystemExit("the page never answered")


def walk(page, errors, n) -> dict:
    steps = {"after": where(page)}
    for name, go in [("back1", page.go_back), ("back2", page.go_back),
                     ("forward1", page.go_forward), ("forward2", page.go_forward)]:
        try:
            go(wait_until="commit")
        except Error as e:
            errors.append({"round": n, "error": str(e).splitlines()[0]})
        steps[name] = where(page)
    return steps


def main() -> None:
    out = {"rounds": [], "errors": []}
    with sync_playwright() as pw:
        browser = pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"])
        page = browser.contexts[0].pages[0]
        sign_in(page)
        page.goto(f"{BANK}/account")
        page.locator("#transfer-link").click()
        page.wait_for_url(f"{BANK}/transfer")
        page.evaluate("history.pushState(null, '', '/transfer?step=2')")
        out["before"] = walk(page, out["errors"], 0)
        for n in range(DEATHS):
            checkpoint_and_die(n)
            out["rounds"].append(walk(page, out["errors"], n + 1))
        out["connected"] = browser.is_connected()
    RESULT.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
