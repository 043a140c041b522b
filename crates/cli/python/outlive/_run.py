"""``run`` (sync Playwright) and ``run_async`` (async Playwright): the engine as a child
process, each entry of the task called in this process, the end line turned into the
result. The engine decides what a failure was; these only report (docs/stdio.md)."""

from __future__ import annotations

import asyncio
import collections
import json
import queue
import subprocess
import threading
from typing import Any, Awaitable, Callable, Deque, Dict, Optional, TypeVar

from ._engine import Checked, Ctx, OutliveError, Outcome, Provider, check, command, finish, line

T = TypeVar("T")


def _gone(tail: Deque[str]) -> OutliveError:
    why = "\n".join(tail) or "no message"
    return OutliveError("engine", f"the outlive engine ended without an answer: {why}")


class _Engine:
    """The child process, its stdout read by a thread into a queue (the sync run)."""

    def __init__(self, provider: Provider, checked: Checked) -> None:
        argv, env = command(provider, checked.flags)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.lines: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        self.tail: Deque[str] = collections.deque(maxlen=20)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.cdp_url = self.control_url = ""

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:
                continue
        self.lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.tail.append(raw.decode(errors="replace").rstrip())

    def next(self) -> Dict[str, Any]:
        """The next entry or end line (ready is noted on the way)."""
        while True:
            msg = self.lines.get()
            if msg is None:
                self.proc.wait()
                raise _gone(self.tail)
            if msg.get("type") == "ready":
                self.cdp_url, self.control_url = msg["cdpUrl"], msg["controlUrl"]
                continue
            return msg

    def say(self, data: bytes) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the engine is gone; its end (or exit) says why

    def close(self) -> None:
        """Closing stdin ends the run; the engine releases every browser and exits."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run(provider: Provider, task: Callable[[Any, Ctx], T], **options: Any) -> T:
    """Runs ``task(page, ctx)`` (a sync Playwright page) against a browser that outlives its
    deaths; returns its value, raises its own exception, or ``OutliveError`` (``gave_up``,
    ``invalid_option`` before any launch). Options: checkpoint_every=30 (seconds),
    max_relaunches=5, relaunch_backoff=2, viewport=(1280, 800), start_url, navigation_timeout=30,
    diagnostics="safe", rotation, standby, max_page_recoveries=10, max_sessions=100, on_event.

    A sync task cannot be abandoned mid-call: after a death its next page call raises, and
    only then is it entered again."""
    checked = check(provider, task, dict(options))
    from playwright.sync_api import sync_playwright

    engine = _Engine(provider, checked)
    outcomes: Dict[int, Outcome] = {}
    current = 0
    try:
        with sync_playwright() as pw:
            while True:
                msg = engine.next()
                if msg["type"] == "end":
                    return finish(msg, outcomes.get(current), checked.on_event)
                current = msg["attempt"]
                outcome = _enter_sync(pw, engine, task, msg, lambda: current)
                outcomes[current] = outcome
                engine.say(line(current, outcome))
    finally:
        engine.close()


def _enter_sync(pw: Any, engine: _Engine, task: Callable[..., Any], msg: Dict[str, Any], current: Callable[[], int]) -> Outcome:
    try:
        browser = pw.chromium.connect_over_cdp(engine.cdp_url)
        context = browser.contexts[0] if browser.contexts else browser.new_context()
        page = context.pages[0] if context.pages else context.new_page()
    except Exception as e:
        return Outcome(ok=False, error=e, ours=True)
    try:
        return Outcome(ok=True, value=task(page, Ctx(msg, engine.control_url, current)))
    except Exception as e:
        return Outcome(ok=False, error=e)


class AsyncCtx(Ctx):
    """``Ctx`` whose checkpoints are awaited."""

    async def checkpoint(self) -> bool:  # type: ignore[override]
        return await asyncio.to_thread(self._checkpoint, None)

    async def checkpoint_with(self, progress: Any) -> bool:  # type: ignore[override]
        return await asyncio.to_thread(self._checkpoint, progress)


async def run_async(provider: Provider, task: Callable[[Any, AsyncCtx], Awaitable[T]], **options: Any) -> T:
    """``run`` with an async Playwright page and an async task. On a death the running entry
    is cancelled, so at most one entry runs at a time."""
    checked = check(provider, task, dict(options))
    from playwright.async_api import async_playwright

    argv, env = command(provider, checked.flags)
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    run = _AsyncRun(proc, task)
    try:
        async with async_playwright() as pw:
            end = await run.follow(pw)
        return finish(end, run.outcomes.get(run.current), checked.on_event)
    finally:
        await run.close()


class _AsyncRun:
    def __init__(self, proc: asyncio.subprocess.Process, task: Callable[..., Awaitable[Any]]) -> None:
        self.proc, self.task = proc, task
        self.outcomes: Dict[int, Outcome] = {}
        self.current = 0
        self.entry: Optional[asyncio.Task[None]] = None
        self.tail: Deque[str] = collections.deque(maxlen=20)
        self.stderr = asyncio.ensure_future(self._read_stderr())
        self.cdp_url = self.control_url = ""

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self.tail.append(raw.decode(errors="replace").rstrip())

    async def follow(self, pw: Any) -> Dict[str, Any]:
        """Enters the task on each entry line; answers the end line."""
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if msg.get("type") == "ready":
                self.cdp_url, self.control_url = msg["cdpUrl"], msg["controlUrl"]
            elif msg.get("type") == "entry":
                if self.entry is not None:
                    self.entry.cancel()  # cut: its outcome is not the run's
                self.current = msg["attempt"]
                self.entry = asyncio.ensure_future(self._enter(pw, msg))
            elif msg.get("type") == "end":
                return msg
        await self.proc.wait()
        await asyncio.sleep(0)
        raise _gone(self.tail)

    async def _enter(self, pw: Any, msg: Dict[str, Any]) -> None:
        attempt = msg["attempt"]
        try:
            browser = await pw.chromium.connect_over_cdp(self.cdp_url)
            context = browser.contexts[0] if browser.contexts else await browser.new_context()
            page = context.pages[0] if context.pages else await context.new_page()
        except Exception as e:
            return self._report(attempt, Outcome(ok=False, error=e, ours=True))
        try:
            value = await self.task(page, AsyncCtx(msg, self.control_url, lambda: self.current))
            self._report(attempt, Outcome(ok=True, value=value))
        except Exception as e:
            self._report(attempt, Outcome(ok=False, error=e))

    def _report(self, attempt: int, outcome: Outcome) -> None:
        if attempt != self.current:
            return
        self.outcomes[attempt] = outcome
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line(attempt, outcome))
        except (BrokenPipeError, ConnectionResetError):
            pass

    async def close(self) -> None:
        if self.entry is not None:
            self.entry.cancel()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        self.stderr.cancel()
