"""What the sync and async runs share: providers, options as the engine's flags, the
binary, the end line turned into a value or an exception. The protocol is docs/stdio.md."""

from __future__ import annotations

import json
import math
import os
import shutil
import sysconfig
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

SHIPPED = "linux x86_64"


class OutliveError(Exception):
    """An error of outlive's own, with a stable ``code``: ``gave_up``, ``invalid_option``,
    ``engine``, ``missing_binary``, ``not_under_outlive``."""

    def __init__(
        self,
        code: str,
        message: str,
        option: Optional[str] = None,
        event: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.option = option
        self.event = event


@dataclass(frozen=True)
class Provider:
    """Where browsers come from: ``local()``, ``solari(...)``, ``cdp(url)``."""

    kind: str
    args: Tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)


def local() -> Provider:
    """Local Chromium, launched by the engine (found on PATH, or $CHROME)."""
    return Provider("local")


def solari(base_url: Optional[str] = None, *, api_key: Optional[str] = None) -> Provider:
    """A Solari-compatible API; the key reaches the engine in its environment only."""
    key = api_key or os.environ.get("SOLARI_API_KEY")
    if not key:
        raise OutliveError("invalid_option", "solari() needs api_key (or SOLARI_API_KEY)", "api_key")
    url = base_url or os.environ.get("SOLARI_BASE_URL") or "https://api.getsolari.com"
    return Provider("solari", ("--solari-url", url), {"SOLARI_API_KEY": key})


def cdp(url: str) -> Provider:
    """Any CDP websocket URL: each launch connects to it."""
    if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
        raise OutliveError("invalid_option", "cdp(url): url must be a ws:// or wss:// URL", "url")
    return Provider("cdp", ("--cdp-url", url))


@dataclass(frozen=True)
class ResumedFrom:
    """The checkpoint restored into an entry's browser."""

    url: str
    checkpoint_at: datetime


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def binary_path() -> str:
    """The ``outlive`` binary: $OUTLIVE_BINARY, else the one this wheel installed."""
    if os.environ.get("OUTLIVE_BINARY"):
        return os.environ["OUTLIVE_BINARY"]
    beside = Path(sysconfig.get_path("scripts")) / "outlive"
    if beside.exists():
        return str(beside)
    found = shutil.which("outlive")
    if found:
        return found
    raise OutliveError(
        "missing_binary",
        f"the outlive binary is not installed in this environment: the wheel ships it for {SHIPPED}; "
        "elsewhere build it (cargo build -p outlive-cli) and set OUTLIVE_BINARY",
    )


# Option name → (flag, kind); the engine validates ranges, this checks names and types.
FLAGS: Dict[str, Tuple[str, str]] = {
    "checkpoint_every": ("--checkpoint-every", "seconds"),
    "relaunch_backoff": ("--relaunch-backoff", "seconds"),
    "navigation_timeout": ("--navigation-timeout", "seconds"),
    "max_relaunches": ("--max-relaunches", "count"),
    "max_page_recoveries": ("--max-page-recoveries", "count"),
    "max_sessions": ("--max-sessions", "count"),
    "start_url": ("--start-url", "string"),
    "viewport": ("--viewport", "viewport"),
    "diagnostics": ("--diagnostics", "diagnostics"),
    "rotation": ("--rotate", "rotation"),
    "standby": ("--standby", "boolean"),
}


def invalid(option: str, why: str) -> OutliveError:
    return OutliveError("invalid_option", f"option `{option}` {why}", option)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _flag(name: str, v: Any) -> List[str]:
    flag, kind = FLAGS[name]
    if kind == "seconds":
        if not _number(v):
            raise invalid(name, f"must be a number of seconds, 0 or more; got {v!r}")
        return [flag, f"{round(v * 1000)}ms"]
    if kind == "count":
        if not _number(v) or not isinstance(v, int):
            raise invalid(name, f"must be a whole number, 0 or more; got {v!r}")
        return [flag, str(v)]
    if kind == "string":
        if not isinstance(v, str):
            raise invalid(name, f"must be a string; got {v!r}")
        return [flag, v]
    if kind == "boolean":
        if not isinstance(v, bool):
            raise invalid(name, f"must be True or False; got {v!r}")
        return [flag] if v else []
    if kind == "diagnostics":
        if v not in ("safe", "full"):
            raise invalid(name, f'must be "safe" or "full"; got {v!r}')
        return [flag, v]
    if kind == "viewport":
        ok = isinstance(v, tuple) and len(v) == 2 and all(isinstance(n, int) and n > 0 for n in v)
        if not ok:
            raise invalid(name, f"must be (width, height) in whole pixels; got {v!r}")
        return [flag, f"{v[0]}x{v[1]}"]
    if v in ("off", "learned"):
        return [flag, v]
    if _number(v) and v > 0:
        return [flag, f"expected:{round(v * 1000)}ms"]
    raise invalid(name, f'must be "off", "learned" or the expected lifetime in seconds; got {v!r}')


@dataclass
class Checked:
    flags: List[str]
    on_event: Optional[Callable[[Dict[str, Any]], None]]


def check(provider: Any, task: Any, options: Dict[str, Any]) -> Checked:
    """The options as flags; raises ``invalid_option`` (after ``on_event``) before any launch."""
    on_event = options.pop("on_event", None)
    try:
        if not isinstance(provider, Provider):
            raise invalid("provider", "must be outlive.local(), outlive.solari(...) or outlive.cdp(url)")
        if not callable(task):
            raise invalid("task", "must be a function (page, ctx)")
        if on_event is not None and not callable(on_event):
            raise invalid("on_event", "must be a function")
        flags: List[str] = []
        for name, value in options.items():
            if name not in FLAGS:
                known = ", ".join([*FLAGS, "on_event"])
                raise invalid(name, f"is not an option of outlive (options: {known})")
            if value is not None:
                flags += _flag(name, value)
        return Checked(flags, on_event)
    except OutliveError as e:
        if callable(on_event):
            on_event(refused_event(e))
        raise


def refused_event(e: OutliveError) -> Dict[str, Any]:
    """The wide event of a run refused before the engine started."""
    counters = ("relaunches", "checkpointCount", "lostWorkMs", "maxLostWorkMs", "totalMs", "attempts", "releaseFailed")
    event: Dict[str, Any] = {"runId": str(uuid.uuid4()), "outcome": "failed", **{k: 0 for k in counters}}
    return {**event, "errorName": "OutliveError", "errorCode": e.code, "error": str(e)}


def command(provider: Provider, flags: List[str]) -> Tuple[List[str], Dict[str, str]]:
    """The engine's command line and environment."""
    return [binary_path(), "serve", "--stdio", *provider.args, *flags], {**os.environ, **provider.env}


def post(url: str, body: Any, answer: str = "checkpointed") -> bool:
    """POST ``body`` as JSON to the control URL; whether it was done. Never raises."""
    data = b"" if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response).get(answer) is not False
    except Exception:
        return False


@dataclass
class Outcome:
    """How one entry of the task ended."""

    ok: bool
    value: Any = None
    error: Optional[BaseException] = None
    ours: bool = False  # outlive's failure (connecting), not the task's


def describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def line(attempt: int, outcome: Outcome) -> bytes:
    said: Dict[str, Any] = {"type": "done" if outcome.ok else "failed", "attempt": attempt}
    if not outcome.ok and outcome.error is not None:
        said["error"] = describe(outcome.error)
    return (json.dumps(said) + "\n").encode()


def finish(end: Dict[str, Any], mine: Optional[Outcome], on_event: Optional[Callable[[Dict[str, Any]], None]]) -> Any:
    """The run's value from its ``end`` line, or the exception to raise."""
    event = end.get("event")
    if event is not None and on_event is not None:
        on_event(event)
    if end.get("outcome") == "completed" and mine is not None and mine.ok:
        return mine.value
    if end.get("code") == "task_error" and mine is not None and not mine.ok and not mine.ours:
        assert mine.error is not None
        raise mine.error
    code = end.get("code") or "engine"
    raise OutliveError(
        "engine" if code == "task_error" else code,
        end.get("message") or f"the run ended: {end.get('outcome')}",
        end.get("option"),
        event,
    )


class Ctx:
    """What an entry of the task is handed besides its page (sync: ``checkpoint()`` returns
    a bool; under ``run_async`` it is awaited)."""

    def __init__(self, entry: Dict[str, Any], control_url: str, current: Callable[[], int]) -> None:
        self.attempt: int = entry["attempt"]
        r = entry.get("resumedFrom")
        self.resumed_from: Optional[ResumedFrom] = (
            ResumedFrom(r["url"], parse_time(r["checkpointAt"])) if r else None
        )
        self._progress = entry.get("progress")
        self._control_url = control_url
        self._current = current

    def progress(self) -> Any:
        """The progress the newest checkpoint held when this entry started, or ``None``."""
        return self._progress

    def _checkpoint(self, progress: Any) -> bool:
        if self._current() != self.attempt:
            return False  # a cut entry's checkpoint is retired
        return post(f"{self._control_url}/checkpoint", progress)

    def checkpoint(self) -> Any:
        """Captures cookies, storage and the URL now. Never raises: whether it was written."""
        return self._checkpoint(None)

    def checkpoint_with(self, progress: Any) -> Any:
        """``checkpoint()`` holding ``progress`` (JSON), handed to later entries."""
        return self._checkpoint(progress)
