"""An agent of `outlive serve` in raw CDP that reconnects by itself, as agents do: it connects
to OUTLIVE_CDP_URL, attaches to the page and evaluates in it until the connection closes, then
connects again after a short backoff. It stops once it has worked in BROWSERS browsers (told
apart by their page's target id; 0: never), printing `browser N` as it starts working in each.
With SCREENSHOT_EVERY=n it also takes a full-page screenshot every n evaluations; with
OPS_EVERY=n it prints `ops N` after every n evaluations (N: all so far, in every browser).

Env: OUTLIVE_CDP_URL, BROWSERS, SCREENSHOT_EVERY and OPS_EVERY (optional).
"""

import asyncio
import itertools
import json
import os
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, WebSocketException

URL = os.environ["OUTLIVE_CDP_URL"]
WANT = int(os.environ["BROWSERS"])
SCREENSHOT_EVERY = int(os.environ.get("SCREENSHOT_EVERY", "0"))
OPS_EVERY = int(os.environ.get("OPS_EVERY", "0"))
# A command unanswered this long is a hang, not a death outlive is still detecting.
CALL_TIMEOUT = 15
BACKOFF = 0.2


class Refused(Exception):
    """The browser answered a command with an error."""


async def call(ws, ids, method, params=None, session=None):
    cid = next(ids)
    msg = {"id": cid, "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    await ws.send(json.dumps(msg))
    while True:
        reply = json.loads(await ws.recv())
        if reply.get("id") == cid:
            if "error" in reply:
                raise Refused(f"{method}: {reply['error']}")
            return reply["result"]


async def work(ws, seen, ops):
    """Works in the browser behind `ws` until the connection closes; True once done.
    `ops` holds the evaluations answered so far, in every browser."""
    ids = itertools.count(1)
    timed = lambda *a, **k: asyncio.wait_for(call(ws, ids, *a, **k), CALL_TIMEOUT)
    targets = (await timed("Target.getTargets"))["targetInfos"]
    pages = [t for t in targets if t["type"] == "page"]
    if not pages:
        raise Refused(f"no page among {targets}")
    target = pages[0]["targetId"]
    attached = await timed("Target.attachToTarget", {"targetId": target, "flatten": True})
    session = attached["sessionId"]
    for n in itertools.count(1):
        if SCREENSHOT_EVERY and n % SCREENSHOT_EVERY == 0:
            shot = await timed("Page.captureScreenshot", {"captureBeyondViewport": True}, session)
            if not shot.get("data"):
                raise Refused("an empty screenshot")
        r = await timed("Runtime.evaluate", {"expression": "1 + 1", "returnByValue": True}, session)
        if r["result"].get("value") != 2:
            raise Refused(f"1 + 1 gave {r}")
        ops[0] += 1
        if OPS_EVERY and ops[0] % OPS_EVERY == 0:
            print(f"ops {ops[0]}", flush=True)
        if target not in seen:
            seen.add(target)
            print(f"browser {len(seen)}", flush=True)
            if WANT and len(seen) >= WANT:
                return True
        await asyncio.sleep(0.1)


async def main():
    seen, ops = set(), [0]
    while True:
        try:
            async with connect(URL, max_size=None, open_timeout=60) as ws:
                if await work(ws, seen, ops):
                    return
        except ConnectionClosed:
            pass  # the browser died: connect again
        except (OSError, WebSocketException, Refused, asyncio.TimeoutError) as e:
            print(f"agent: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        await asyncio.sleep(BACKOFF)


asyncio.run(main())
