"""Stopping a job on a cluster: its tasks start no new I/O, its caps hold until the last one ends.

Dask cannot stop a running task, and a task of ``rm`` may have thousands of entries to go.  So each task
runs under its job's *gate* (:func:`gated`, ``operators.stopgate``): once the gate is shut on a worker,
the task's next batch of operations is refused (``ratelimit.take_ops``/``take_bytes``; a wait for a cap's
tokens ends at once) and the task returns :class:`TaskStopped` instead of a result.

Who shuts the gate: the job's :class:`~dask_pfs.runtime.submitter.Submitter` when it is left by an
exception (a local driver's Ctrl-C, a failure that ends the job), and, for a driver running on the cluster
(``dask_pfs.remote.driver``), its watcher thread the moment the job is cancelled or its client is gone.
The submitter then waits (:data:`STOP_WAIT` at most) for every task it has in flight, so the job-wide caps
(``dask_pfs.runtime.limits``), lifted only after it, hold until the last task has ended, and it counts how
those tasks ended for the job's report (:class:`Stop`).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from operators import stopgate

if TYPE_CHECKING:
    from distributed import Client

log = logging.getLogger("pfs.stop")

STOP_WAIT = 30.0  # seconds a stopped job waits for its tasks in flight (each ends at its next batch: ~1 s)


class JobCancelled(Exception):
    """The job was stopped: cancelled, its client gone, or its tasks refused by their gate."""


@dataclass(frozen=True)
class TaskStopped:
    """What a task returns when its job's gate refused its next batch: its partial work is not in the job's
    counters, only what the caps had granted it (operations, bytes; 0 without caps)."""

    job: str
    ops: int = 0
    bytes: int = 0


def gated(job: str, fn: Callable, *args: Any) -> Any:
    """The task: ``fn(*args)`` as a task of ``job`` (``operators.stopgate``); :class:`TaskStopped` if the
    job was stopped before it started or while it ran.  Returned, not raised: Dask would retry it."""
    with stopgate.in_job(job) as task:
        try:
            stopgate.check()
            if any(isinstance(a, TaskStopped) for a in args):  # a task it depends on was stopped
                return TaskStopped(job)
            return fn(*args)
        except stopgate.Stopped:
            return TaskStopped(job, task.ops, task.bytes)


class Stop:
    """One job's stop, shared by the thread that decides it (a driver's watcher) and the submitters that
    run its tasks (they share :attr:`gate`).  Also what the stop did, for the job's report."""

    def __init__(self, gate: str | None = None) -> None:
        self.gate = gate or f"pfs-gate-{uuid.uuid4().hex[:12]}"
        self.event = threading.Event()
        self.reason: str | None = None
        self.stopped_tasks = 0  # tasks in flight at the stop that their gate refused
        self.finished_tasks = 0  # tasks in flight at the stop that ended on their own
        self.left_running = 0  # tasks still running after STOP_WAIT (stuck on storage; refused at their next batch)
        self.granted_ops = 0  # what the caps had granted the stopped tasks: their partial work, not in the counters
        self.granted_bytes = 0

    def stopped_task(self, result: TaskStopped) -> None:
        self.stopped_tasks += 1
        self.granted_ops += result.ops
        self.granted_bytes += result.bytes

    def request(self, reason: str, client: Client | None = None) -> bool:
        """Stop the job (once) and shut its gate on every worker of ``client``; True the first time."""
        if self.event.is_set():
            return False
        self.reason = reason
        self.event.set()
        if client is not None:
            shut(client, self.gate)
        return True

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def report(self) -> dict:
        """What the stop did, for the job's record."""
        return {
            "reason": self.reason,
            "stopped_tasks": self.stopped_tasks,
            "finished_tasks": self.finished_tasks,
            "left_running": self.left_running,
            "granted_ops": self.granted_ops,
            "granted_bytes": self.granted_bytes,
        }


_CURRENT: contextvars.ContextVar[Stop | None] = contextvars.ContextVar("pfs_stop", default=None)


@contextlib.contextmanager
def job_stop(stop: Stop) -> Iterator[Stop]:
    """Run the block (an engine call) under ``stop``: its submitters use its gate and report to it."""
    token = _CURRENT.set(stop)
    try:
        yield stop
    finally:
        _CURRENT.reset(token)


def current() -> Stop | None:
    return _CURRENT.get()


SHUT_WAIT = 5.0  # seconds the broadcast of a stop may take (a frozen worker must not hold the driver)


def shut(client: Any, gate: str) -> None:
    """Shut ``gate`` on every worker of ``client`` (and in this process, where a lone driver runs tasks);
    a worker that does not answer within :data:`SHUT_WAIT` is not waited for (it answers nobody else either)."""
    stopgate.stop(gate)

    def broadcast() -> None:
        try:
            client.run(stopgate.stop, gate, on_error="ignore")
        except Exception as exc:  # the cluster is going away: its tasks go with it
            log.debug("could not shut gate %s on the workers: %s", gate, exc)

    sender = threading.Thread(target=broadcast, name="pfs-stop-broadcast", daemon=True)
    sender.start()
    sender.join(SHUT_WAIT)


def reopen(client: Any, gate: str) -> None:
    """Forget ``gate`` on every worker (its last task has ended)."""
    stopgate.forget(gate)
    with contextlib.suppress(Exception):
        client.run(stopgate.forget, gate, on_error="ignore")


def wait_for(futures: list, timeout: float = STOP_WAIT) -> tuple[list, list]:
    """(done, still running) of ``futures`` after waiting ``timeout`` seconds at most for them."""
    import time

    deadline = time.monotonic() + timeout
    pending = list(futures)
    while pending and time.monotonic() < deadline:
        pending = [f for f in pending if not f.done()]
        if pending:
            threading.Event().wait(0.05)
    done = [f for f in futures if f.done()]
    return done, pending
