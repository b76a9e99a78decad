"""One rule for every pfs trigger that resumes a deferred task: it fires no sooner than
``PFS_DEFER_FIRST_CHECK`` seconds (10) after it started.

Airflow 3.3's scheduler fails a resumed task when the trigger fires before it has drained the executor's
"success" event of the deferring try (the try exits cleanly on ``defer()``): the resumed attempt is already
running when that stale event arrives, and it is taken for a task changed externally (apache/airflow#72716,
fix pending in PR 72767). A loaded scheduler drains events seconds late; a sensor whose manifest appears
at once, or a job that ends at once, fired into that window (the deployment test saw it: the sensor
failed, its downstream tasks upstream_failed). A trigger may look as early as it likes; it holds its event
until the window has passed. ``dag.test()`` runs triggers inline, with no scheduler to race: its tests set 0.
"""

from __future__ import annotations

import asyncio
import os
import time


def first_check_default() -> float:
    """Seconds after its start before a trigger may fire (``PFS_DEFER_FIRST_CHECK``, 10)."""
    raw = os.environ.get("PFS_DEFER_FIRST_CHECK", "10")
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"PFS_DEFER_FIRST_CHECK={raw!r}: give a number of seconds") from None
    if not seconds >= 0:  # also refuses nan
        raise ValueError(f"PFS_DEFER_FIRST_CHECK={raw!r}: give a number of seconds >= 0")
    return seconds


async def hold_until_settled(started: float, first_check: float) -> None:
    """Sleep until ``first_check`` seconds have passed since ``started`` (``time.monotonic()``)."""
    left = started + first_check - time.monotonic()
    if left > 0:
        await asyncio.sleep(left)
