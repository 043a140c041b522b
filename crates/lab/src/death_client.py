"""The weather benchmark's raw-CDP client of `outlive serve`: it connects to OUTLIVE_CDP_URL,
attaches to the page and, with CASE=waiting, leaves a call waiting on it (a `Runtime.evaluate`
of a promise that never settles, with awaitPromise). It prints `ready T` once a later call was
answered (so the waiting one is on the wire), then `closed T` when serve closes the
connection; T is the wall clock, in seconds. Then it connects again, until killed.

Env: OUTLIVE_CDP_URL, CASE (waiting | idle).
"""

import asyncio
import itertools
import json
import os
import sys
import time

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, WebSocketException

URL = os.environ["OUTLIVE_CDP_URL"]
WAITING = os.environ["CASE"] == "waiting"


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


async def ready(ws):
    """Attaches to the page; with CASE=waiting leaves a call waiting there."""
    ids = itertools.count(1)
    targets = (await call(ws, ids, "Target.getTargets"))["targetInfos"]
    pages = [t for t in targets if t["type"] == "page"]
    if not pages:
        raise Refused(f"no page among {targets}")
    attach = {"targetId": pages[0]["targetId"], "flatten": True}
    session = (await call(ws, ids, "Target.attachToTarget", attach))["sessionId"]
    if WAITING:
        never = {"expression": "new Promise(() => {})", "awaitPromise": True}
        await ws.send(json.dumps({"id": next(ids), "method": "Runtime.evaluate",
                                  "params": never, "sessionId": session}))
    await call(ws, ids, "Runtime.evaluate", {"expression": "1"}, session)


async def main():
    while True:
        try:
            async with connect(URL, max_size=None, open_timeout=60) as ws:
                await ready(ws)
                print(f"ready {time.time():.6f}", flush=True)
                try:
                    # Nothing is asked any more: only the close is awaited.
                    while True:
                        await ws.recv()
                except ConnectionClosed:
                    print(f"closed {time.time():.6f}", flush=True)
        except ConnectionClosed:
            pass  # cut while it was being set up
        except (OSError, WebSocketException, Refused, asyncio.TimeoutError) as e:
            print(f"client: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        await asyncio.sleep(0.2)


asyncio.run(main())
