"""A client of `outlive serve` that reconnects by itself, as Playwright MCP or browser-use
would: it signs in to Aurora Bank, asks for a checkpoint, works until the browser goes away
("Target page, context or browser has been closed"), then connects to the same URL again and
checks it is still signed in, on the same page.

Env: OUTLIVE_CDP_URL, OUTLIVE_CONTROL_URL, BANK_URL, BANK_USER, BANK_PASSWORD,
BANK_TOTP_SECRET, RESULT_DIR. Writes RESULT_DIR/serve.json.
"""

import base64
import hashlib
import hmac
import json
import os
import struct
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Error, sync_playwright

env = os.environ
BANK = env["BANK_URL"].rstrip("/")
RESULT = Path(env.get("RESULT_DIR", ".")) / "serve.json"


def totp(secret: str) -> str:
    key = base64.b32decode(secret.upper() + "=" * (-len(secret) % 8))
    digest = hmac.new(key, struct.pack(">Q", int(time.time()) // 30), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    code = struct.unpack(">I", digest[offset : offset + 4])[0] & 0x7FFFFFFF
    return f"{code % 1_000_000:06d}"


def checkpoint() -> bool:
    req = urllib.request.Request(env["OUTLIVE_CONTROL_URL"] + "/checkpoint", data=b"", method="POST")
    with urllib.request.urlopen(req) as r:
        return json.load(r)["checkpointed"]


def sign_in(page) -> None:
    page.goto(f"{BANK}/login")
    page.fill("#username", env["BANK_USER"])
    page.fill("#password", env["BANK_PASSWORD"])
    page.click("#submit")
    page.wait_for_url("**/totp")
    page.fill("#code", totp(env["BANK_TOTP_SECRET"]))
    page.click("#submit")
    page.wait_for_url("**/account*")


def reconnect(pw):
    """The same URL, again, until the restored browser is served."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"])
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

        # Work until the browser goes away.
        started = time.monotonic()
        try:
            while time.monotonic() - started < 60:
                page.evaluate("1 + 1")
                time.sleep(0.1)
            out["error"] = "the browser never went away"
        except Error as e:
            out["closedWith"] = str(e).splitlines()[0]

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
