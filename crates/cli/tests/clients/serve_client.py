"""A client of `outlive serve` that reconnects by itself, as Playwright MCP or browser-use
would: it signs in to Aurora Bank, asks for a checkpoint and prints `checkpointed` (the test
then kills the browser). It works until the browser goes away ("Target page, context or
browser has been closed"), connects to the same URL again and checks it is still signed in,
on the same page.

Env: OUTLIVE_CDP_URL, OUTLIVE_CONTROL_URL, BANK_URL, BANK_USER, BANK_PASSWORD,
BANK_TOTP_SECRET, RESULT_DIR. Writes RESULT_DIR/serve.json.
"""

import json
import os
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Error, sync_playwright
from playwright.sync_api import TimeoutError as HungConnect

from bank_login import BANK, sign_in

env = os.environ
RESULT = Path(env.get("RESULT_DIR", ".")) / "serve.json"


def checkpoint() -> bool:
    req = urllib.request.Request(env["OUTLIVE_CONTROL_URL"] + "/checkpoint", data=b"", method="POST")
    with urllib.request.urlopen(req) as r:
        return json.load(r)["checkpointed"]


def work_until_closed(page) -> dict:
    """Evaluates on `page` every 100 ms until the browser goes away (or 60 s pass)."""
    started = time.monotonic()
    try:
        while time.monotonic() - started < 60:
            page.evaluate("1 + 1")
            time.sleep(0.1)
        return {"error": "the browser never went away"}
    except Error as e:
        return {"closedWith": str(e).splitlines()[0]}


def reconnect(pw):
    """The same URL, again, until the restored browser is served. A refused connect is tried
    again; one that hangs is a failure: the front handed out a browser it had lost."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"], timeout=20_000)
        except HungConnect:
            raise
        except Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def main() -> None:
    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"])
        page = browser.contexts[0].pages[0]
        sign_in(page)
        out["checkpointed"] = checkpoint()
        print("checkpointed", flush=True)

        out.update(work_until_closed(page))

        browser = reconnect(pw)
        pages = [p for c in browser.contexts for p in c.pages]
        out["pagesAfter"] = len(pages)
        out["urlAfter"] = pages[0].url
        pages[0].goto(f"{BANK}/account")
        out["signedInAfter"] = pages[0].url.startswith(f"{BANK}/account")
        out["prefAfter"] = pages[0].text_content("#pref")

    RESULT.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
