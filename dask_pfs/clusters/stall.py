"""How long a job waits for a task before it calls the storage or a worker hung (docs/reliability.md).

Two bounds, so that a hang never holds a job for ever:

* **a hung worker** (stopped, swapped out, its host gone): Dask's scheduler drops a worker it has
  not heard from for ``distributed.scheduler.worker-ttl`` and runs its tasks on the others (every
  pfs task is idempotent).  The embedded cluster sets it to ``PFS_WORKER_TTL`` (60 s; Dask's own
  default, kept on a remote cluster unless its configuration says otherwise, is 5 minutes).
* **hung storage** (an NFS server gone with a hard mount, a FUSE daemon stopped): every worker still
  answers, but no task ends.  When no task has finished for ``PFS_STALL_TIMEOUT`` seconds (3600;
  ``0`` waits for ever) while tasks are in flight, the driver gives up with :class:`StalledError`
  (exit code 1).  The journal keeps what finished, so ``--resume`` goes on once the storage is back.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from dask_pfs.errors import PfsError
from dask_pfs.options import named

STALL_TIMEOUT = 3600.0  # a task may legitimately be long: one checksum of a huge file, a 256 MiB range on a slow link
WORKER_TTL = "60s"


class StorageGoneError(PfsError):
    """The tree's storage was unmounted or replaced while the job ran (exit code 1, journal kept)."""

    exit_code = 1


def storage_gone(exc: BaseException) -> StorageGoneError:
    return StorageGoneError(
        f"{exc}; stopped. What finished is journaled: run it again with ",
        named("resume", True),
        " once it is mounted again",
    )


class StalledError(PfsError):
    """No task finished within the stall timeout: the job stops (exit code 1, journal kept)."""

    exit_code = 1


def stall_timeout() -> float | None:
    """``PFS_STALL_TIMEOUT`` seconds (None: wait for ever)."""
    raw = os.environ.get("PFS_STALL_TIMEOUT", "").strip()
    try:
        value = float(raw) if raw else STALL_TIMEOUT
    except ValueError:
        raise PfsError(f"PFS_STALL_TIMEOUT={raw!r}: give a number of seconds (0: no limit)") from None
    return value if value > 0 else None


def worker_ttl() -> str:
    """How long the embedded scheduler keeps a worker it does not hear from (``PFS_WORKER_TTL``)."""
    return os.environ.get("PFS_WORKER_TTL", "").strip() or WORKER_TTL


class Watch:
    """Waits for the next task of a submitter, at most the stall timeout.

    ``back`` is every future's done callback (Dask runs it on a thread of its own); ``until``
    waits on it, checking the submitter's own "a result is ready" between wake-ups, so a result
    is taken within ~50 ms of its callback, whichever of the two Dask signals first.
    """

    TICK = 0.05

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout if timeout is not None else stall_timeout()
        self._event = threading.Event()

    def back(self, _future: Any) -> None:
        self._event.set()

    def until(self, ready: Callable[[], bool], inflight: int) -> None:
        """Return once ``ready()``; :class:`StalledError` if that takes longer than the stall timeout."""
        if self.timeout is None:
            return  # the caller blocks in Dask, for ever if need be
        deadline = time.monotonic() + self.timeout
        while not ready():
            left = deadline - time.monotonic()
            if left <= 0:
                raise stalled(self.timeout, inflight)
            self._event.wait(min(left, self.TICK))
            self._event.clear()


def abandon_stuck_workers(pids: set[int]) -> int:
    """Kill the embedded cluster's worker processes (``pids``) still there after it closed, and never wait for them.

    A worker thread blocked on hung storage (a FUSE or hard NFS request already taken by a
    server that no longer answers) cannot end until the server does, even after SIGKILL, so its
    process cannot be reaped; ``multiprocessing`` would join it at interpreter exit, for ever.
    The kernel reaps it once the storage answers or is aborted (``/sys/fs/fuse/connections/N/abort``,
    ``umount -f``).  Only this cluster's workers: the process may run other clusters of its own
    (a notebook's, a test session's).  Returns how many were left behind.
    """
    import multiprocessing
    import multiprocessing.process as mp_process

    left = 0
    for p in multiprocessing.active_children():
        if p.pid in pids:
            with contextlib.suppress(OSError):
                p.kill()
            mp_process._children.discard(p)  # type: ignore[attr-defined]
            left += 1
    return left


def stalled(seconds: float, inflight: int) -> StalledError:
    return StalledError(
        f"no task finished for {seconds:.0f} s with {inflight} in flight: the storage (or every worker) "
        f"hangs; stopped (PFS_STALL_TIMEOUT={seconds:g}). What finished is journaled: rerun the same "
        "job with ",
        named("resume", True),
        " once the storage answers again",
    )


def in_thread_within_stall(fn: Callable[[], Any]) -> Any:
    """``fn()`` in a daemon thread, waited for at most the stall timeout (:class:`StalledError` after).

    For work the driver does itself (its first slice of a scan): a thread stuck on hung storage
    cannot be interrupted, but a daemon thread does not keep the process from exiting with code 1.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, name="pfs-driver-slice", daemon=True)
    t.start()
    limit = stall_timeout()
    t.join(limit)
    if t.is_alive():
        raise stalled(limit or 0.0, 1)
    if "error" in box:
        raise box["error"]
    return box["result"]
