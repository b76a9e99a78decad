"""The stop of a job, as the tasks doing its I/O see it: no new batch of operations once it is stopped.

Dask cannot stop a running task, so a stopped job (Ctrl-C, a cancel, a client whose lease ran out)
stops its tasks here.  Every task of a job runs inside :func:`in_job` (``dask_pfs.runtime.submitter``
wraps each one), which names the job in a context variable that the process's I/O pool hands on to
its threads (``operators.core.pool``).  :func:`stop` marks a job stopped in this process (the driver
broadcasts it to every worker).  From then on:

* :func:`check` raises :class:`Stopped`; ``operators.ratelimit.take_ops``/``take_bytes`` call it before
  every batch, and a wait for a cap's tokens wakes at once (:func:`sleep`);
* ``ratelimit.ops_capped()``/``bytes_capped()`` say True, so an uncapped loop also goes the paced way,
  whose next ``take_ops`` raises: the batch under way finishes, no next one starts.

:class:`Stopped` is a ``BaseException``: the per-entry ``except Exception`` of the operators never
turns it into an entry's error and goes on.  Engine-free: no Dask here.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator


class Task:
    """The running task's job, and what its caps granted it so far (its partial work, should it be stopped)."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.ops = 0
        self.bytes = 0
        self._lock = threading.Lock()  # the task's pool threads share it

    def granted(self, ops: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            self.ops += ops
            self.bytes += nbytes


_TASK: contextvars.ContextVar[Task | None] = contextvars.ContextVar("pfs_task", default=None)
_lock = threading.Lock()
_stopped: dict[str, threading.Event] = {}  # job -> its stop; only jobs stopped (or waited on) in this process
_KEEP = 1024  # stopped jobs remembered per process: a task of an older one has long ended


class Stopped(BaseException):
    """The job this task belongs to was stopped: no new I/O."""


def _event(job: str) -> threading.Event:
    with _lock:
        ev = _stopped.get(job)
        if ev is None:
            if len(_stopped) >= _KEEP:
                _stopped.pop(next(iter(_stopped)))
            ev = _stopped[job] = threading.Event()
        return ev


def stop(job: str) -> None:
    """Mark ``job`` stopped in this process: its tasks here start no new batch (run on every worker)."""
    _event(job).set()


def forget(job: str) -> None:
    """Drop ``job``'s stop (its last task has ended)."""
    with _lock:
        _stopped.pop(job, None)


def current() -> Task | None:
    return _TASK.get()


@contextlib.contextmanager
def in_job(job: str) -> Iterator[Task]:
    """Run the block as a task of ``job``."""
    task = Task(job)
    token = _TASK.set(task)
    try:
        yield task
    finally:
        _TASK.reset(token)


def requested() -> bool:
    """Whether the job of the running task is stopped."""
    task = _TASK.get()
    if task is None:
        return False
    ev = _stopped.get(task.job)
    return ev is not None and ev.is_set()


def check() -> None:
    """Raise :class:`Stopped` if the running task's job is stopped."""
    if requested():
        raise Stopped("job stopped")


def granted(ops: int = 0, nbytes: int = 0) -> None:
    """Count operations or bytes the caps let the running task do (``operators.ratelimit``)."""
    task = _TASK.get()
    if task is not None:
        task.granted(ops, nbytes)


def sleep(seconds: float) -> None:
    """``time.sleep`` that a stop of the running task's job ends at once (with :class:`Stopped`)."""
    task = _TASK.get()
    if task is None:
        time.sleep(seconds)
        return
    if _event(task.job).wait(seconds):
        raise Stopped("job stopped")
