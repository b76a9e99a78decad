"""How every driver runs its tasks: one cluster entry, one bounded submitter, one frontier loop.

One policy for all of them:

* **retries**: a task that raises (its worker died, the process ran out of memory) is retried
  ``RETRIES`` (2) times by Dask.  Per-entry problems are returned by the task, never raised, so a
  retry only ever redoes a chunk whose task was lost; every task is idempotent.
* **keys**: ``pfs-<job>[-<kind>]-<run>-<n>[-<part>]``: the job (``scan``, ``cp``, ``rm``,
  ``sum``), what the task does where a job has several kinds (``cp``: ``files``, ``range``...), a
  run id that is new for every run (a resumed run too, so its keys never meet a killed run's), the
  task's number in the run (zero-padded), and for one of several tasks of one item (the ranges of a
  big file) its place.  Side effects need unique keys: Dask merges equal ones.
* **bounded**: at most ``limit`` task slots in flight (two per worker thread), results folded in
  as they finish, so the driver holds counters and a frontier, never the tree.
* **failure**: a task that still raises after its retries ends the job (the exception goes up),
  unless the caller gives ``failed=`` to turn it into per-entry failures (``cp`` does).
* **stop**: every task runs under the job's gate (``dask_pfs.runtime.stopping``).  Left by an exception
  (Ctrl-C, a cancel, a failure), the submitter shuts the gate on every worker, so no task in flight starts
  another batch of I/O, and waits for them all before it returns: the job-wide caps, lifted after it,
  hold until the last task has ended.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import queue
import uuid
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask_pfs.clusters.client import ClusterOptions, cluster_shape, connect
from dask_pfs.clusters.stall import StalledError, Watch, storage_gone
from dask_pfs.runtime import stopping
from dask_pfs.runtime.here import HereClient, here_client
from dask_pfs.runtime.limits import Limits, job_limits
from dask_pfs.runtime.stopping import STOP_WAIT, JobCancelled, Stop, TaskStopped, gated, reopen, wait_for
from operators.root_identity import RootChangedError
from operators.scan.walk import Budget, DirItem

if TYPE_CHECKING:
    from distributed import Client, Future

    from dask_pfs.urls import Location

log = logging.getLogger("pfs.submit")

RETRIES = 2
PER_SLOT = 2  # tasks in flight per worker thread: one running, one queued behind it


def new_run_id() -> str:
    return uuid.uuid4().hex[:8]


@contextlib.contextmanager
def job_client(
    client: Client | None,
    cluster: ClusterOptions | None,
    threads: int | None,
    limits: Limits | None = None,
    here: tuple[Location, ...] = (),
) -> Iterator[Client]:
    """``client``, or one on ``cluster`` (``PFS_SCHEDULER``, else an embedded LocalCluster) for the
    block; the job-wide caps (``limits``, else the cluster's) held over its workers meanwhile.

    Instead of an embedded cluster, a job on the locations ``here`` runs on the driver itself
    (``dask_pfs.runtime.here``: a cluster joins only if the job outlasts ``PFS_ALONE_SECONDS``).
    """
    limits = limits or (cluster.limits if cluster else None)
    with contextlib.ExitStack() as stack:
        if client is None:
            options = cluster or ClusterOptions.from_env(threads=threads)
            alone = here_client(options, limits, here)
            if alone is not None:
                stack.callback(alone.close)
                yield alone  # type: ignore[misc]  # the part of Client's API the drivers use
                return
            client = stack.enter_context(connect(options))
        stack.enter_context(job_limits(client, limits))
        yield client


class _Completions:
    """The finished futures of a :class:`Submitter` in the order they finish (``distributed.as_completed``'s
    part the submitter uses), for futures of any kind: a driver working alone never imports distributed."""

    def __init__(self) -> None:
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._held: set = set()  # a Dask future must stay referenced until taken, or its task is released

    def add(self, fut: Any) -> None:
        self._held.add(fut)
        fut.add_done_callback(self._done.put)

    def has_ready(self) -> bool:
        return not self._done.empty()

    def __next__(self) -> Any:
        fut = self._done.get()
        self._held.discard(fut)
        return fut

    def clear(self) -> None:
        self._held.clear()


class Submitter:
    """Keeps at most ``per_slot`` tasks per worker thread busy and hands each result to its callback as it finishes.

    ``weight`` lets one call stand for several tasks (a big file's ranges and their finish task), so
    the budget counts tasks, not calls.  Use as a context manager: leaving it by an exception stops
    waiting for what is still in flight.
    """

    def __init__(self, client: Client, job: str, run: str | None = None, per_slot: int = PER_SLOT) -> None:
        self.client = client
        self.job = job
        self.run = run or new_run_id()
        self.per_slot = per_slot
        self.workers, self.slots = cluster_shape(client)
        self.limit = self.slots * per_slot
        self.tasks = 0  # submitted so far: the next task's number
        self.inflight = 0  # weight in flight
        self._ac: Any
        if isinstance(client, HereClient):
            self._ac = _Completions()
        else:
            from distributed import as_completed  # here: a job that needs no cluster never imports distributed

            self._ac = as_completed(loop=client.loop)
        self._then: dict[Hashable, tuple[int, Callable[[Any], None], Callable[[BaseException], None] | None]] = {}
        self.watch = Watch()  # no task back within the stall timeout: StalledError (dask_pfs.clusters.stall)
        shared = stopping.current()  # a driver's (dask_pfs.remote.driver), shared by its submitters
        self.stop = shared or Stop(f"pfs-gate-{job}-{self.run}")
        self._own_stop = shared is None  # reopens the gate after its tasks (a shared one: the driver does)
        self._futs: dict[Hashable, Any] = {}  # in flight: waited for after a stop

    def __enter__(self) -> Submitter:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if exc is not None:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.halt(reason, wait=not isinstance(exc, StalledError))  # stalled: its tasks are stuck on storage
            self._ac.clear()

    def halt(self, reason: str, wait: bool = True) -> None:
        """The job ends early: shut its gate on the workers and (``wait``) wait for every task in flight (see
        the module docstring); count how they ended in :attr:`stop`."""
        futs = list(self._futs.values())
        self._futs.clear()
        self.stop.request(reason, self.client)
        if not futs:
            return
        if not wait or isinstance(self.client, HereClient):  # a lone driver's tasks end with it
            self.stop.left_running += len(futs)
            return
        done, running = wait_for(futs, STOP_WAIT)
        for fut in done:
            result = fut.result() if fut.status == "finished" else None
            if isinstance(result, TaskStopped):
                self.stop.stopped_task(result)
            else:
                self.stop.finished_tasks += 1
        self.stop.left_running += len(running)
        if running:
            log.warning("%d task(s) still running %.0f s after the stop (stuck on storage?): refused at their "
                        "next batch", len(running), STOP_WAIT)  # fmt: skip
        elif self._own_stop:
            reopen(self.client, self.stop.gate)

    def key(self, kind: str | None = None, part: int | None = None) -> str:
        """The next task's key (see the module docstring)."""
        what = f"{self.job}-{kind}" if kind else self.job
        return f"pfs-{what}-{self.run}-{self.tasks:07d}" + (f"-{part}" if part is not None else "")

    def future(self, fn: Callable, *args: Any, kind: str | None = None, part: int | None = None) -> Future:
        """Submit a task nothing waits on directly (an input of a later task): same key and retry policy."""
        fut = self.client.submit(
            gated, self.stop.gate, fn, *args, key=self.key(kind, part), pure=False, retries=RETRIES
        )
        self.tasks += 1
        return fut

    def submit(
        self,
        fn: Callable,
        *args: Any,
        then: Callable[[Any], None],
        failed: Callable[[BaseException], None] | None = None,
        weight: int = 1,
        kind: str | None = None,
    ) -> None:
        """Run ``fn(*args)`` once there is room; ``then(result)`` when it is back (``failed(exc)`` if it raised)."""
        self.make_room(weight)
        fut = self.future(fn, *args, kind=kind)
        self.inflight += weight
        self._futs[fut.key] = fut
        self._then[fut.key] = (weight, then, failed)
        fut.add_done_callback(self.watch.back)
        self._ac.add(fut)

    def make_room(self, weight: int) -> None:
        if isinstance(self.client, HereClient) and self.client.joined is not None:  # a cluster joined: more room
            self.workers, self.slots = cluster_shape(self.client)
            self.limit = self.slots * self.per_slot
        while self.inflight + weight > self.limit and self.inflight:
            self.take()

    def take(self) -> None:
        """Wait for the next task to finish and fold its result in; :class:`~dask_pfs.clusters.stall.StalledError`
        when none finishes within the stall timeout."""
        self.watch.until(self._ac.has_ready, self.inflight)
        fut = next(self._ac)
        weight, then, failed = self._then.pop(fut.key)
        self._futs.pop(fut.key, None)
        self.inflight -= weight
        try:
            result = fut.result()
        except Exception as exc:
            if failed is None:
                if isinstance(exc, RootChangedError):  # the storage went away under the job
                    raise storage_gone(exc) from exc
                raise
            fut.release()
            failed(exc)
            return
        fut.release()
        if isinstance(result, TaskStopped):  # the job was stopped (a driver's watcher shut its gate)
            self.stop.stopped_task(result)
            raise JobCancelled(self.stop.reason or "stopped")
        then(result)

    def poll(self) -> None:
        """Fold in the results already back, without waiting."""
        while self.inflight and self._ac.has_ready():
            self.take()

    def drain(self) -> None:
        while self.inflight:
            self.take()


@dataclass(frozen=True)
class WalkTuning:
    """How big a walk task is: entries and seconds per task, tasks in flight per Dask thread."""

    max_entries: int = 50_000
    max_seconds: float = 1.0
    first_seconds: float = 0.25  # short tasks while the frontier is narrower than the cluster
    max_dirs_per_task: int = 512
    inflight_per_slot: int = PER_SLOT


def next_slice(
    frontier: deque[DirItem], inflight: int, max_inflight: int, slots: int, tuning: WalkTuning, workers: int = 1
) -> tuple[list[DirItem], Budget]:
    """Pop the next task's directories off ``frontier`` (non-empty, ``inflight < max_inflight``).

    Each task gets an even share of the frontier over the free slots (capped), and a short time
    budget while the frontier is narrower than the cluster, so work spreads out quickly.  While it is
    narrower than the cluster's ``workers`` (processes: hosts, or interpreters), a task also hands its
    directories back as soon as it holds one for each worker left without a task (``Budget.share_dirs``):
    each task walks many directories at once, so a small tree fitted in one task's short budget and kept
    every other host idle (a 600-file tree at 1 ms: one task of 0.45 s on one host of three).
    """
    free = max_inflight - inflight
    per_task = max(1, min(tuning.max_dirs_per_task, math.ceil(len(frontier) / free)))
    items = [frontier.popleft() for _ in range(min(per_task, len(frontier)))]
    narrow = len(frontier) + inflight < slots
    seconds = tuning.first_seconds if narrow else tuning.max_seconds
    unfed = workers - inflight - len(frontier)  # workers without a task once this one is out, and its own
    # one directory for its own worker alone is no reason to hand back: the task walks on
    return items, Budget(tuning.max_entries, seconds, share_dirs=unfed if unfed > 1 else 0)


def walk_frontier(
    sub: Submitter,
    frontier: deque[DirItem],
    tuning: WalkTuning,
    task: Callable[[list[DirItem], Budget, int], tuple[Callable, tuple]],
    fold: Callable[[Any, list[DirItem], int], list[DirItem]],
    after: Callable[[Any], None] | None = None,
) -> None:
    """Walk tasks over a tree until its frontier is empty (the scan and ``rm URL``).

    ``task(items, budget, n)`` names the function and arguments of the ``n``-th task, given
    directories to walk; ``fold(result, items, n)`` takes its result in and returns the directories
    it did not reach, which go back on the frontier and are re-split over the free slots.
    ``after(result)`` runs once the next tasks are out (work that should not hold up the walk).
    """

    def fill() -> None:
        while frontier and sub.inflight < sub.limit:
            items, budget = next_slice(frontier, sub.inflight, sub.limit, sub.slots, tuning, workers=sub.workers)
            n = sub.tasks
            fn, args = task(items, budget, n)
            sub.submit(fn, *args, then=functools.partial(back, items=items, n=n))

    def back(result: Any, items: list[DirItem], n: int) -> None:
        frontier.extend(fold(result, items, n))
        fill()
        if after is not None:
            after(result)

    fill()
    sub.drain()
