"""The foreign-client benchmark's script: a Playwright (Python) client, run the same way
connected straight to a gateway session and under `outlive run`. Env: OUTLIVE_CDP_URL,
BANK_URL, PHASE (pace | screenshots | screencast | replace), RESULT (a file: one JSON line
per entry is appended), and for `replace` OUTLIVE_ATTEMPT and LAST_ATTEMPT.
"""

import time

STARTED = time.time()  # before the imports: the process's own start-up is part of the figure

import json
import os
from urllib.parse import quote

from playwright.sync_api import sync_playwright

env = os.environ
BANK = env.get("BANK_URL", "").rstrip("/")
PHASE = env["PHASE"]
ATTEMPT = int(env.get("OUTLIVE_ATTEMPT", "1"))
ANIMATION = "data:text/html," + quote(
    "<canvas id=c width=800 height=600></canvas><script>"
    "const c = document.getElementById('c').getContext('2d'); let t = 0;"
    "(function f() { t++; c.fillStyle = 'hsl(' + (t % 360) + ',80%,50%)';"
    " c.fillRect(0, 0, 800, 600); c.fillStyle = '#000'; c.fillText(t, 10, 20);"
    " requestAnimationFrame(f); })()</script>"
)


def emit(record):
    with open(env["RESULT"], "a") as f:
        f.write(json.dumps(record) + "\n")


with sync_playwright() as pw:
    browser = pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"])
    page = browser.contexts[0].pages[0]
    # The same viewport in both arms: outlive's page is 1280 x 800, a fresh tab 800 x 600, and
    # a screenshot's or a screencast frame's cost grows with its pixels.
    page.set_viewport_size({"width": 1280, "height": 800})
    connected = time.time()
    record = {"phase": PHASE, "attempt": ATTEMPT, "startedMs": STARTED * 1000, "connectedMs": connected * 1000}
    t0 = time.monotonic()
    if PHASE == "pace":
        for _ in range(40):
            page.goto(f"{BANK}/login")
            page.text_content("h1")
    elif PHASE == "screenshots":
        page.goto(f"{BANK}/login")
        for _ in range(60):
            page.screenshot(full_page=True)
    elif PHASE == "screencast":
        page.goto(ANIMATION)
        cdp = page.context.new_cdp_session(page)
        frames = []

        def on_frame(f):
            frames.append(time.monotonic())
            cdp.send("Page.screencastFrameAck", {"sessionId": f["sessionId"]})

        cdp.on("Page.screencastFrame", on_frame)
        cdp.send("Page.enable")
        # 60 fps animation, every 4th frame: about 15 fps offered.
        cdp.send("Page.startScreencast", {"format": "jpeg", "quality": 60, "everyNthFrame": 4})
        end = time.monotonic() + 30
        while time.monotonic() < end:
            page.wait_for_timeout(100)
        cdp.send("Page.stopScreencast")
        record["frames"] = len(frames)
    elif PHASE == "replace":
        emit(record)
        if ATTEMPT >= int(env["LAST_ATTEMPT"]):
            raise SystemExit(0)
        while True:  # until the browser dies under it
            page.goto(f"{BANK}/login")
            page.wait_for_timeout(200)
    record["workMs"] = (time.monotonic() - t0) * 1000
    record["endedMs"] = time.time() * 1000
    emit(record)
