"""One bound on the file-system requests a process keeps in flight, whatever runs them.

``--threads N`` is a storage admin's bound: at most N requests in flight per worker process.  A
process runs several Dask tasks at once (``TASKS_PER_WORKER``), each of which may hand the native
core a batch that it fans out over its own threads (``concurrency.fanned``), while pool jobs
(listings, Python copies) run beside them; bounding each of these by N let a worker keep 93-231
requests waiting on a FUSE mount with 64 allowed.  Every one of them now takes its width from
the process's :class:`Permits` first (:meth:`Permits.holding`): a core call takes as many as are
free, up to its batch, at least one (waiting for one), and gives them back when it returns; a pool
job takes one.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator


class Permits:
    """A counting semaphore whose holders take several permits at once, up to ``size`` in all.

    ``size`` may be a callable (a moving limit): a lowered limit holds new takers back until enough
    permits have come back.
    """

    def __init__(self, size: int | Callable[[], int]) -> None:
        fixed = max(1, size) if isinstance(size, int) else 1
        self._size = size if callable(size) else (lambda: fixed)
        self._cond = threading.Condition(threading.Lock())
        self._mine = threading.local()  # permits the current thread holds
        self.held = 0
        self.peak = 0  # the most ever held at once: what the bound let through (tests read it)

    @property
    def size(self) -> int:
        return max(1, self._size())

    def _take(self, want: int) -> int:
        """Wait until a permit is free, then take up to ``want`` (at least one); how many were taken.

        A thread that already holds some (a pool job whose listing hands the core a batch) never
        waits: it goes on with its own plus any free ones, so nested calls cannot deadlock.
        """
        mine = getattr(self._mine, "n", 0)
        with self._cond:
            if mine:
                extra = max(0, min(want - mine, self.size - self.held))
            else:
                while self.held >= self.size:
                    self._cond.wait()
                extra = max(1, min(want, self.size - self.held))
            self.held += extra
            self.peak = max(self.peak, self.held)
        self._mine.n = mine + extra
        return mine + extra

    @contextlib.contextmanager
    def holding(self, want: int = 1) -> Iterator[int]:
        """Hold up to ``want`` permits (at least one) for the block; yields how many (the width to use)."""
        before = getattr(self._mine, "n", 0)
        got = self._take(want)
        try:
            yield got
        finally:
            with self._cond:
                self.held -= got - before
                self._cond.notify_all()
            self._mine.n = before


_lock = threading.Lock()
_permits: dict[int, Permits] = {}


def _forget_after_fork() -> None:
    """A forked child starts with its own permits: nothing of the parent's is in flight there."""
    global _lock, _permits
    _lock, _permits = threading.Lock(), {}


os.register_at_fork(after_in_child=_forget_after_fork)


def permits(fixed: int) -> Permits:
    """The process's permits for ``--threads fixed``."""
    with _lock:
        got = _permits.get(fixed)
        if got is None:
            got = _permits[fixed] = Permits(fixed)
        return got
