"""A plain Playwright client that works through network weather, under `outlive serve` or
`outlive run`. It connects once to OUTLIVE_CDP_URL and evaluates in the first page every 100 ms.
A call that takes SLOW_MS or more met a stall on its connection; it stops once STALLS calls did,
or when DEADLINE_S have passed. A death closes its connection: the call in flight raises, and
the script exits non-zero. It never reconnects.

Env: OUTLIVE_CDP_URL, STALLS, SLOW_MS, DEADLINE_S, RESULT (where it writes its JSON: `calls`,
`slowMs` (each slow call's time), `longestMs`).
"""

import json
import os
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

env = os.environ
STALLS = int(env["STALLS"])
SLOW = int(env["SLOW_MS"]) / 1000
DEADLINE = time.monotonic() + float(env["DEADLINE_S"])


def main() -> None:
    calls, slow, longest = 0, [], 0.0
    with sync_playwright() as pw:
        browser = pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"])
        page = browser.contexts[0].pages[0]
        while len(slow) < STALLS and time.monotonic() < DEADLINE:
            started = time.monotonic()
            assert page.evaluate("1 + 1") == 2
            took = time.monotonic() - started
            calls += 1
            longest = max(longest, took)
            if took >= SLOW:
                slow.append(round(took * 1000))
            time.sleep(0.1)
    result = {"calls": calls, "slowMs": slow, "longestMs": round(longest * 1000)}
    Path(env["RESULT"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
