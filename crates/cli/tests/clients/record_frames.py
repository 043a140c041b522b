"""A raw CDP client under `outlive run` that records every frame it receives and judges
whether any of them belongs to someone else (outlive's own sessions, worlds or targets).

It connects to OUTLIVE_CDP_URL, discovers and auto-attaches (flatten) to targets, takes the
session of the one page, enables Runtime and Page on it, then for DURATION_MS navigates that
page between a few URLs and POSTs OUTLIVE_CONTROL_URL/checkpoint now and then. It writes
RESULT_DIR/frames.json: what it sent, every frame it received, and a verdict listing
- replies to ids it never sent,
- sessionIds that no Target.attachedToTarget it received gave it,
- Runtime.executionContextCreated with auxData.type "isolated" (a world someone else made),
- main frames navigated whose id is not the page's target id,
- target events (created/destroyed/attached/detached/info changed) of any target but the page,
  except two kinds it lists apart and does not count against `clean`: the page's own
  cross-site iframes (its navigations made them) and Chromium's `browser_ui` targets (headless
  Chromium has omnibox-popup WebUI targets, which browser-level auto-attach attaches to).
Isolated worlds that another client (Playwright, Puppeteer) left on the page earlier are
reported too: run it on a page no other client has touched.

Env: OUTLIVE_CDP_URL, OUTLIVE_CONTROL_URL, OUTLIVE_ATTEMPT, RESULT_DIR, DURATION_MS (default
5000), and the pages to visit: NAV_URLS (space-separated) or else BANK_URL (/login, /account)
and TWOSITE_URL; ANNOUNCE_CHECKPOINTS=1 prints `checkpointed` after each. Exits 0 whatever the verdict; non-zero only if it could not do its part.
"""

import asyncio
import itertools
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

from websockets.asyncio.client import connect

env = os.environ
DURATION_MS = int(env.get("DURATION_MS", "5000"))
RESULT_DIR = Path(env["RESULT_DIR"])
TARGET_EVENTS = {
    "Target.targetCreated",
    "Target.targetDestroyed",
    "Target.targetInfoChanged",
    "Target.attachedToTarget",
    "Target.detachedFromTarget",
    "Target.targetCrashed",
}


def nav_urls() -> list[str]:
    if env.get("NAV_URLS"):
        return env["NAV_URLS"].split()
    urls = []
    if env.get("BANK_URL"):
        bank = env["BANK_URL"].rstrip("/")
        urls += [f"{bank}/account", f"{bank}/login"]
    if env.get("TWOSITE_URL"):
        urls.append(env["TWOSITE_URL"])
    return urls or ["about:blank", "data:text/html,<title>two</title>"]


def checkpoint(progress: dict) -> dict:
    """A checkpoint with `progress`; under `serve`, asked again while the browser is replaced
    (the control URL answers 503 then)."""
    deadline = time.monotonic() + 60
    while True:
        request = urllib.request.Request(
            f"{env['OUTLIVE_CONTROL_URL']}/checkpoint",
            data=json.dumps(progress).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            if e.code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


class Cdp:
    def __init__(self, ws):
        self.ws = ws
        self.ids = itertools.count(1)
        self.sent: list[dict] = []
        self.received: list[dict] = []
        self.replies: dict[int, asyncio.Future] = {}
        self.waiters: list[tuple] = []  # (predicate, future)
        self.started = time.monotonic()

    def ms(self) -> int:
        return round((time.monotonic() - self.started) * 1000)

    async def send(self, method: str, params: dict | None = None, session: str | None = None):
        message = {"id": next(self.ids), "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.sent.append({"t": self.ms(), **message})
        reply = self.replies[message["id"]] = asyncio.get_running_loop().create_future()
        await self.ws.send(json.dumps(message))
        frame = await asyncio.wait_for(reply, 30)
        if "error" in frame:
            raise RuntimeError(f"{method}: {frame['error']}")
        return frame.get("result", {})

    def wait_for(self, method: str, session: str | None = None, target: str | None = None):
        """A future of the next event `method` (on `session`, about `target`, if given)."""

        def matches(frame: dict) -> bool:
            info = frame.get("params", {}).get("targetInfo", {})
            return (frame.get("method") == method
                    and session in (None, frame.get("sessionId"))
                    and target in (None, info.get("targetId")))

        future = asyncio.get_running_loop().create_future()
        self.waiters.append((matches, future))
        return future

    async def read(self) -> None:
        async for text in self.ws:
            frame = json.loads(text)
            self.received.append({"t": self.ms(), "frame": frame})
            if "id" in frame:
                future = self.replies.pop(frame["id"], None)
                if future and not future.done():
                    future.set_result(frame)
            for waiter in list(self.waiters):
                matches, future = waiter
                if matches(frame):
                    self.waiters.remove(waiter)
                    if not future.done():
                        future.set_result(frame)


def verdict(cdp: Cdp, page_target: str, types: dict[str, str]) -> dict:
    sent_ids = {m["id"] for m in cdp.sent}
    given, unknown_replies, unknown_sessions, isolated = set(), [], [], []
    foreign, iframes, chromium_ui, main_frames = [], [], [], []
    for entry in cdp.received:
        frame = entry["frame"]
        method, params = frame.get("method"), frame.get("params", {})
        if method == "Target.attachedToTarget":
            given.add(params["sessionId"])
        if "id" in frame and frame["id"] not in sent_ids:
            unknown_replies.append(frame)
        if frame.get("sessionId") and frame["sessionId"] not in given:
            unknown_sessions.append(frame)
        if method == "Runtime.executionContextCreated":
            context = params["context"]
            if context.get("auxData", {}).get("type") == "isolated":
                isolated.append({"name": context.get("name"), "sessionId": frame.get("sessionId")})
        if method == "Page.frameNavigated" and "parentId" not in params["frame"]:
            if params["frame"]["id"] != page_target:
                main_frames.append(params["frame"]["id"])
        if method in TARGET_EVENTS:
            info = params.get("targetInfo", {})
            target = info.get("targetId") or params.get("targetId")
            kind = types.setdefault(target, info.get("type"))
            event = {"method": method, "targetId": target, "type": kind,
                     "url": info.get("url"), "sessionId": params.get("sessionId")}
            if target == page_target:
                pass
            elif kind == "iframe":
                iframes.append(event)
            elif kind == "browser_ui":
                chromium_ui.append(event)
            else:
                foreign.append(event)
    return {
        "unknownReplyIds": unknown_replies,
        "unknownSessionIds": unknown_sessions,
        "isolatedWorlds": isolated,
        "foreignTargetEvents": foreign,
        "iframeTargetEvents": iframes,
        "chromiumUiTargetEvents": chromium_ui,
        "foreignMainFrames": main_frames,
        "clean": not (unknown_replies or unknown_sessions or isolated or foreign or main_frames),
    }


async def main() -> None:
    async with connect(env["OUTLIVE_CDP_URL"], max_size=None, ping_interval=None) as ws:
        cdp = Cdp(ws)
        reader = asyncio.create_task(cdp.read())

        await cdp.send("Target.setDiscoverTargets", {"discover": True})
        targets = (await cdp.send("Target.getTargets"))["targetInfos"]
        types = {t["targetId"]: t["type"] for t in targets}
        pages = [t for t in targets if t["type"] == "page"]
        assert len(pages) == 1, f"expected exactly one page, got {pages}"
        page_target = pages[0]["targetId"]
        attached = cdp.wait_for("Target.attachedToTarget", target=page_target)
        await cdp.send("Target.setAutoAttach",
                       {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True})
        try:
            session = (await asyncio.wait_for(attached, 5))["params"]["sessionId"]
        except TimeoutError:  # not auto-attached: attach by hand
            session = (await cdp.send("Target.attachToTarget",
                                      {"targetId": page_target, "flatten": True}))["sessionId"]
        await cdp.send("Runtime.enable", session=session)
        await cdp.send("Page.enable", session=session)

        checkpoints, urls = [], nav_urls()
        deadline = time.monotonic() + DURATION_MS / 1000
        for n in itertools.count():
            if time.monotonic() >= deadline:
                break
            loaded = cdp.wait_for("Page.loadEventFired", session)
            await cdp.send("Page.navigate", {"url": urls[n % len(urls)]}, session=session)
            await asyncio.wait_for(loaded, 30)
            if n % 2 == 1:
                progress = {"navigations": n + 1}
                answer = await asyncio.to_thread(checkpoint, progress)
                checkpoints.append({"t": cdp.ms(), "progress": progress, "answer": answer})
                if env.get("ANNOUNCE_CHECKPOINTS"):
                    print("checkpointed", flush=True)  # the test may kill the browser now
            await asyncio.sleep(0.2)

        await asyncio.sleep(0.3)  # let late frames arrive before judging
        reader.cancel()
        RESULT_DIR.mkdir(parents=True, exist_ok=True)
        (RESULT_DIR / "frames.json").write_text(json.dumps({
            "attempt": int(env.get("OUTLIVE_ATTEMPT", "1")),
            "pageTargetId": page_target,
            "pageSessionId": session,
            "checkpoints": checkpoints,
            "sent": cdp.sent,
            "received": cdp.received,
            "verdict": verdict(cdp, page_target, types),
        }, indent=1))


asyncio.run(main())
