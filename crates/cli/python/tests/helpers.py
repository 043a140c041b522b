"""A script under ``outlive run -- python helpers.py``, with the helpers instead of HTTP: the
first entry checkpoints its progress and waits for its browser to die; the second starts
from that progress."""

import json
import os

from playwright.sync_api import sync_playwright

import outlive

with sync_playwright() as pw:
    browser = pw.chromium.connect_over_cdp(os.environ["OUTLIVE_CDP_URL"])
    page = browser.contexts[0].pages[0]
    done = outlive.progress() or {"steps": []}
    if outlive.attempt() == 1:
        page.goto(f"{os.environ['BANK_URL']}/login")
        with outlive.hold():
            assert outlive.checkpoint({"steps": done["steps"] + ["first"]})
        while True:
            page.wait_for_timeout(500)  # until the session dies
    resumed = outlive.resumed_from()
    with open(os.environ["RESULT"], "w") as f:
        json.dump({"attempt": outlive.attempt(), "progress": done, "resumedFrom": resumed.url if resumed else None}, f)
