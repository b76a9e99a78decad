"""A test engine that runs for a while and counts its runs, to watch re-attach and cancel.

Importable on the Dask worker subprocesses (they run with PYTHONPATH at the repo root).
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class SlowResult:
    runs: int
    steps: int
    exit_code: int = 0


def slow(marker: str, seconds: float, *, client=None, progress=None, **_) -> SlowResult:
    """Append a line to ``marker`` (one per run), then report progress until ``seconds`` passed."""
    with open(marker, "a") as f:
        f.write("run\n")
    progress.start("slow")
    steps = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            time.sleep(0.05)
            steps += 1
            progress.update({"entries": steps})
    finally:
        progress.stop()
    with open(marker) as f:
        runs = sum(1 for _ in f)
    return SlowResult(runs, steps)
