"""Helpers for a program run by ``outlive run -- python script.py``: they read the
``OUTLIVE_*`` variables and call the control URL, so a script needs no HTTP of its own."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Optional

from ._engine import OutliveError, ResumedFrom, parse_time, post


def _control_url() -> str:
    url = os.environ.get("OUTLIVE_CONTROL_URL")
    if not url:
        raise OutliveError(
            "not_under_outlive",
            "OUTLIVE_CONTROL_URL is not set: run this program with `outlive run -- …`",
        )
    return url


def checkpoint(progress: Any = None) -> bool:
    """A checkpoint now, holding ``progress`` (JSON) if given. Never raises."""
    url = os.environ.get("OUTLIVE_CONTROL_URL")
    return bool(url) and post(f"{url}/checkpoint", progress)


def progress() -> Any:
    """The progress this entry resumes with (the newest checkpoint's), or ``None``."""
    p = os.environ.get("OUTLIVE_PROGRESS")
    return json.loads(p) if p else None


def attempt() -> int:
    """1 on the first entry, 2 after the first relaunch, …"""
    return int(os.environ.get("OUTLIVE_ATTEMPT", "1"))


def resumed_from() -> Optional[ResumedFrom]:
    """The checkpoint restored into this entry's browser, or ``None``."""
    url = os.environ.get("OUTLIVE_RESUMED_FROM_URL")
    at = os.environ.get("OUTLIVE_RESUMED_FROM_AT")
    if not url:
        return None
    return ResumedFrom(url=url, checkpoint_at=parse_time(at) if at else datetime.now())


@contextlib.contextmanager
def hold() -> Iterator[None]:
    """No automatic checkpoint inside the block: a step not to be cut half-way."""
    url = _control_url()
    if post(f"{url}/hold", None, answer="held") is False:
        raise OutliveError("engine", "outlive refused the hold (no browser is up)")
    try:
        yield
    finally:
        post(f"{url}/release", None, answer="held")
