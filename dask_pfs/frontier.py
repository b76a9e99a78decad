"""Re-splitting a walk's frontier over free task slots: shared by the scan and the tree-mode rm drivers.

Walk tasks hand back the directories they did not reach; the driver turns that frontier into new
tasks.  Each task gets an even share of the frontier over the free slots (capped), and a short
time budget while the frontier is narrower than the cluster, so work spreads out quickly.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from operators.walk import Budget, DirItem


@dataclass(frozen=True)
class WalkTuning:
    """How big a walk task is: entries and seconds per task, tasks in flight per Dask thread."""

    max_entries: int = 50_000
    max_seconds: float = 1.0
    first_seconds: float = 0.25  # short tasks while the frontier is narrower than the cluster
    max_dirs_per_task: int = 512
    inflight_per_slot: int = 2


def next_slice(
    frontier: deque[DirItem], inflight: int, max_inflight: int, slots: int, tuning: WalkTuning
) -> tuple[list[DirItem], Budget]:
    """Pop the next task's directories off ``frontier`` (non-empty, ``inflight < max_inflight``)."""
    free = max_inflight - inflight
    per_task = max(1, min(tuning.max_dirs_per_task, math.ceil(len(frontier) / free)))
    items = [frontier.popleft() for _ in range(min(per_task, len(frontier)))]
    narrow = len(frontier) + inflight < slots
    return items, Budget(tuning.max_entries, tuning.first_seconds if narrow else tuning.max_seconds)
