"""outlive for Python: a Playwright task that outlives its browser, in this process.

``outlive.run(provider, task, **options)`` (sync Playwright) and ``await
outlive.run_async(provider, task, **options)`` (async Playwright) start the engine (the
``outlive`` binary this wheel installs, as ``outlive serve --stdio``), connect Playwright to
the browser it serves, and call ``task(page, ctx)`` again after each death, with
``ctx.attempt`` + 1: variables around the task survive. The helpers ``checkpoint``,
``progress``, ``attempt``, ``resumed_from`` and ``hold`` are for programs under ``outlive run``.
"""

from ._engine import Ctx, OutliveError, Provider, ResumedFrom, binary_path, cdp, local, solari
from ._helpers import attempt, checkpoint, hold, progress, resumed_from
from ._run import AsyncCtx, run, run_async

__all__ = [
    "AsyncCtx",
    "Ctx",
    "OutliveError",
    "Provider",
    "ResumedFrom",
    "attempt",
    "binary_path",
    "cdp",
    "checkpoint",
    "hold",
    "local",
    "progress",
    "resumed_from",
    "run",
    "run_async",
    "solari",
]
