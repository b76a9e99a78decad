"""Parts written on a thread of their own while the walk goes on.

A flush used to sort, encode and write its part on the walk's own thread, so the last part of a task
(all of it, for a tree of up to ``flush_rows`` entries) was a serial phase after the walk: on a warm
200,020-entry tree, ~0.25 s of one core while the other idled (benchmarks/RESULTS.md, issue 30,
h30l).  Here each flush hands its rows (``RowBuffer.detach``: no copy) to one writer thread, one part
at a time: the walk fills the next part meanwhile, and waits only if a part is still being written
when the next one is full, so a task holds at most two parts' rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from operators.rows import RowBuffer


class PartWriter:
    """``write(buf)`` of each flushed buffer, in order, on one thread; errors surface at the next
    :meth:`submit` or at :meth:`close`."""

    def __init__(self, write: Callable[[RowBuffer], None]) -> None:
        self._write = write
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="pfs-part")
        self._last: Future | None = None

    def submit(self, buf: RowBuffer) -> None:
        """Write ``buf``'s rows (taken from it now) after the part before, which must be done first."""
        self.wait()
        if len(buf):
            self._last = self._pool.submit(self._write, buf.detach())

    def wait(self) -> None:
        """Until the part being written is; its error, if it failed."""
        last, self._last = self._last, None
        if last is not None:
            last.result()

    def close(self) -> None:
        """Wait for the last part and end the thread (its error, if it failed)."""
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)

    def abandon(self) -> None:
        """Wait for the part being written and end the thread, dropping its error: the task has failed
        already, with the error that says why."""
        with contextlib.suppress(Exception):  # the caller raises its own
            self.close()
