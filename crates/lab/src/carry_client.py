"""The carry benchmark's Playwright client of `outlive serve` (`outlive-lab bench --carry-only`).

It connects once, signs in to Aurora Bank, then works in rounds: go to the account page, read
the user, evaluate. After each round it asks for a checkpoint (the bench kills the browser
after one) and prints {"checkpointed": t}. Each page call is printed as a JSON line:
{"call": NAME, "ok": true|false, "t": wall clock in s at its end, "error": first line}.

With RECONNECT=1 it connects to the same URL again when its connection closes, as
`serve_client.py` does, and prints {"connected": t}. Without, a closed connection ends it with
{"fatal": ...}: the front was meant to carry it.

Env: OUTLIVE_CDP_URL, OUTLIVE_CONTROL_URL, BANK_URL, BANK_USER, BANK_PASSWORD,
BANK_TOTP_SECRET, RECONNECT.
"""

import json
import os
import time
import urllib.error
import urllib.request

from playwright.sync_api import Error, sync_playwright

from bank_login import BANK, sign_in

env = os.environ
RECONNECT = env.get("RECONNECT") == "1"


def say(**line) -> None:
    print(json.dumps(line), flush=True)


def call(name, f) -> bool:
    """Runs one page call and prints how it ended."""
    try:
        f()
        say(call=name, ok=True, t=time.time())
        return True
    except Error as e:
        say(call=name, ok=False, t=time.time(), error=str(e).splitlines()[0])
        return False


def checkpoint() -> None:
    """A checkpoint of the browser served now; between browsers the control URL answers 503,
    so it is asked again (bounded)."""
    deadline = time.monotonic() + 60
    while True:
        url = env["OUTLIVE_CONTROL_URL"] + "/checkpoint"
        req = urllib.request.Request(url, data=b"", method="POST")
        try:
            with urllib.request.urlopen(req) as r:
                if json.load(r)["checkpointed"]:
                    return
        except urllib.error.HTTPError as e:
            if e.code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def connect(pw):
    """The same URL until a browser is served (a refused connect is tried again)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            browser = pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"], timeout=20_000)
            say(connected=time.time())
            return browser, browser.contexts[0].pages[0]
        except Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def one_round(page) -> bool:
    return (
        call("goto", lambda: page.goto(f"{BANK}/account"))
        and call("text", lambda: page.text_content("#user"))
        and call("evaluate", lambda: page.evaluate("document.title + localStorage.length"))
    )


def main() -> None:
    with sync_playwright() as pw:
        browser, page = connect(pw)
        sign_in(page)
        while True:
            if one_round(page):
                checkpoint()
                say(checkpointed=time.time())
                continue
            if browser.is_connected() and not page.is_closed():
                # What a navigation interrupted leaves loading: let it end first.
                try:
                    page.wait_for_load_state()
                except Error:
                    pass
            elif RECONNECT:
                browser, page = connect(pw)
            else:
                say(fatal="the connection closed")
                raise SystemExit(1)


if __name__ == "__main__":
    main()
