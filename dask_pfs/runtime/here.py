"""Small jobs without a cluster: the driver runs the job's own tasks, and a cluster joins only if the job lasts.

An embedded LocalCluster costs 1.5-2.5 s of wall time and as much CPU before the first file (a
scheduler and worker processes, each importing distributed, pyarrow and the operators), most of a
1-file ``cp``/``rm``/``verify``/``sync`` (docs/performance.md).  :class:`HereClient` stands in for
the Dask client of a job that would start one: it runs the very same task functions (``operators``)
through the same :class:`~dask_pfs.runtime.submitter.Submitter`, keys, retries and journals, but on the
driver's side:

* **local disks**: on daemon threads of the driver (the native core does the I/O without the
  interpreter lock, so one process already keeps the host's cores busy);
* **network and FUSE mounts**: in child processes forked from the driver, which already imported
  everything (a few ms each), so that hung storage cannot trap the command: a process with a
  request stuck on a dead server cannot exit, and the driver abandons such a child instead of
  waiting for it (as ``stall.abandon_stuck_workers`` does for a cluster's workers).

A job on local disks still submitting after :data:`ALONE_SECONDS` starts the embedded cluster then
(:func:`dask_pfs.clusters.client.connect`), and its later tasks go there, so a big job pays the start-up
only when it is small beside the job: its worker processes add cores that the driver's one interpreter
lock cannot use.  Only if that lock can be the bound: the driver must have used at least
:data:`JOIN_BUSY` of a core over the last window.  A driver that waits more than it works (an object
store's server, a disk, the job's caps) would get workers that wait too, for their start-up's CPU (an
S3 -> local copy of 3,000 objects on moto: 1.8 s more CPU and 2 s more wall with the join).
A job with helper processes never does: they are as many as the embedded cluster's workers, with as
many tasks each, so the cluster would bring the same width for its start-up (1.2-2.5 s of CPU)
and a pause in the job's I/O while it starts (2 s on a loaded host; docs/performance.md).
Tasks that take another task's result as an argument (a big file's finish task) run where that task
ran, here if any of them did.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import logging
import multiprocessing
import multiprocessing.process as mp_process
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from operators import ratelimit

if TYPE_CHECKING:
    from distributed import Client

    from dask_pfs.clusters.client import ClusterOptions
    from dask_pfs.runtime.limits import Limits
    from dask_pfs.urls import Location

log = logging.getLogger("pfs.here")

ALONE_SECONDS = 10.0  # as scan_here.DRIVER_SECONDS: past it a cluster's start-up is small beside the job
# Cores the driver must have used over the last window for a cluster to join: below half of the one core its
# interpreter lock allows, the lock is idle half the time and the job is bound elsewhere.
JOIN_BUSY = 0.5
BUSY_WINDOW = 1.0  # seconds: the shortest window the driver's CPU is measured over after the first


def alone_seconds() -> float:
    """How long the driver works alone before a cluster joins (``PFS_ALONE_SECONDS``; 0: start one at once)."""
    raw = os.environ.get("PFS_ALONE_SECONDS", "").strip()
    try:
        return float(raw) if raw else ALONE_SECONDS
    except ValueError:
        return ALONE_SECONDS


class HereFuture(cf.Future):
    """A task run by the driver: a ``concurrent.futures.Future`` with the little of Dask's API the drivers use."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    @property
    def status(self) -> str:
        if not self.done():
            return "pending"
        if self.cancelled():
            return "cancelled"
        return "error" if self.exception() is not None else "finished"

    def release(self) -> None:
        """Nothing to release: the result lives in this process."""


def _resolved(args: tuple) -> tuple:
    """Arguments with the results of the futures among them (Dask's dependencies, here: already running)."""
    return tuple(a.result() if isinstance(a, cf.Future) or _is_dask_future(a) else a for a in args)


def _is_dask_future(obj: Any) -> bool:
    return type(obj).__name__ == "Future" and type(obj).__module__.startswith("distributed")


class _Threads:
    """``n`` daemon threads taking tasks in order: a thread stuck on storage never holds the process's exit."""

    def __init__(self, n: int, name: str = "pfs-here") -> None:
        self.jobs: queue.Queue = queue.Queue()
        self.threads = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def put(self, job: Callable[[], None]) -> None:
        self.jobs.put(job)

    def _serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            job()

    def close(self) -> None:
        for _ in self.threads:
            self.jobs.put(None)


def _child(conn, tasks: int, siblings: list[int]) -> None:
    """A forked helper: runs up to ``tasks`` tasks at once on its threads, sends back ``(id, ok, value)``
    for each, until the pipe closes.  ``siblings``: the driver's ends of the other helpers' pipes, which
    the fork copied here; closed, so that each helper sees its own pipe close when the driver closes it."""
    import pickle
    import signal

    import cloudpickle

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle: it ends the helpers
    for fd in siblings:
        with contextlib.suppress(OSError):
            os.close(fd)
    send = threading.Lock()
    runners = _Threads(tasks, "pfs-helper")

    def run(tid: int, fn: Callable, args: tuple) -> None:
        try:
            out = (tid, True, fn(*args))
        except BaseException as exc:  # handed to the driver, which retries or reports it
            out = (tid, False, exc)
        try:
            data = cloudpickle.dumps(out)
        except Exception as exc:  # an unpicklable result or exception
            data = cloudpickle.dumps((tid, False, RuntimeError(f"{type(exc).__name__}: {exc}")))
        with send:
            conn.send_bytes(data)

    while True:
        try:
            tid, fn, args = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            os._exit(0)
        runners.put(functools.partial(run, tid, fn, args))


class _Helper:
    """One forked child process running up to ``tasks`` tasks at once, and the driver's side of its pipe."""

    driver_ends: ClassVar[set[int]] = set()  # every helper's pipe, the driver's end: a new child closes its copies

    def __init__(self, tasks: int) -> None:
        self.ctx = multiprocessing.get_context("fork")
        self.tasks = tasks
        self.proc: Any = None
        self.conn: Any = None
        self.pending: dict[int, cf.Future] = {}
        self._lock = threading.Lock()
        self._ids = 0

    def start(self) -> None:
        with self._lock:
            if self.proc is None:
                self._start()

    def _start(self) -> None:
        parent, child = self.ctx.Pipe()
        siblings = sorted(_Helper.driver_ends | {parent.fileno()})
        self.proc = self.ctx.Process(
            target=_child, args=(child, self.tasks, siblings), name="pfs-here-helper", daemon=True
        )
        self.proc.start()
        child.close()
        self.conn = parent
        _Helper.driver_ends.add(parent.fileno())
        threading.Thread(target=self._read, args=(parent,), name="pfs-here-reader", daemon=True).start()

    def _read(self, conn) -> None:
        import pickle

        while True:
            try:
                tid, ok, value = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError) as exc:  # the child died (killed, out of memory) or was abandoned
                self._fail(conn, exc)
                return
            with self._lock:
                fut = self.pending.pop(tid, None)
            if fut is not None and ok:
                fut.set_result(value)
            elif fut is not None:
                fut.set_exception(value)

    def _fail(self, conn, exc: BaseException) -> None:
        with self._lock:
            if self.conn is conn:
                self.proc = self.conn = None  # the next task starts a new child
                _Helper.driver_ends.discard(conn.fileno())
                with contextlib.suppress(OSError):
                    conn.close()
            lost, self.pending = self.pending, {}
        for fut in lost.values():
            fut.set_exception(RuntimeError(f"helper process lost: {exc!r}"))

    def run(self, fn: Callable, args: tuple) -> Any:
        """``fn(*args)`` in the child; waits for its result (or the child's end)."""
        import cloudpickle

        fut: cf.Future = cf.Future()
        with self._lock:
            if self.proc is None:
                self._start()
            self._ids += 1
            tid, conn = self._ids, self.conn
            self.pending[tid] = fut
            try:
                conn.send_bytes(cloudpickle.dumps((tid, fn, args)))
            except OSError as exc:
                self.pending.pop(tid, None)
                raise RuntimeError(f"helper process lost: {exc}") from None
        return fut.result()

    @property
    def busy(self) -> int:
        return len(self.pending)

    def stop(self) -> int:
        """End the child: an idle one is told to (its pipe closed) and reaped, so its CPU is the driver's;
        one still running tasks (stuck on hung storage, it cannot be reaped yet) is killed and never
        waited for.  How many tasks it was still running."""
        with self._lock:
            proc, conn, busy = self.proc, self.conn, len(self.pending)
            self.proc = self.conn = None
        if proc is None:
            return 0
        _Helper.driver_ends.discard(conn.fileno())
        _hang_up(conn)
        if not busy:
            proc.join(timeout=2)  # it leaves at once on EOF
        if busy or proc.exitcode is None:  # stuck, or not gone within 2 s
            with contextlib.suppress(OSError, AttributeError):
                proc.kill()
            mp_process._children.discard(proc)  # type: ignore[attr-defined]  # multiprocessing joins children at exit
        return busy


def _hang_up(conn) -> None:
    """Close a helper's pipe for good: a plain close leaves the socket open while the reader thread
    is blocked in ``recv`` on it, so the child would never see the end."""
    import socket

    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
    with contextlib.suppress(OSError):
        conn.close()


class HereClient:
    """The driver as the job's only worker, until :data:`ALONE_SECONDS` pass (see the module docstring)."""

    def __init__(
        self,
        cluster: ClusterOptions,
        limits: Limits | None = None,
        *,
        slots: int,
        processes: bool,
        alone: float | None = None,
        per_helper: int = 1,
    ) -> None:
        self.options = cluster
        self.limits = limits
        self.slots = max(1, slots)
        self.processes = processes
        self.alone = alone_seconds() if alone is None else alone
        self.t0 = time.monotonic()
        self._window = (self.t0, time.process_time())  # (start, the process's CPU then) of the busy window
        self._busy = 0.0  # cores the driver used over the last whole window
        self._told_idle = False
        self.joined: Client | None = None  # the cluster that joined a long job
        self._stack = contextlib.ExitStack()
        self._helpers = [_Helper(per_helper) for _ in range(max(1, self.slots // per_helper))] if processes else []
        for h in self._helpers:  # forked now, before this client's threads run: nothing held mid-fork
            h.start()
        self._threads = _Threads(self.slots)
        if limits and not processes:
            ratelimit.configure(limits)  # the job's caps, whole, for the one process working

    # -- what the drivers use of a Dask client --
    def submit(self, fn: Callable, *args: Any, key: str, pure: bool = False, retries: int = 0) -> Any:
        here = any(isinstance(a, HereFuture) for a in args)
        if not here and self._join_cluster():
            assert self.joined is not None
            return self.joined.submit(fn, *args, key=key, pure=pure, retries=retries)
        fut = HereFuture(key)
        self._threads.put(lambda: self._run(fut, fn, args, retries))
        return fut

    def nthreads(self) -> dict[str, int]:
        mine = {"here": self.slots}
        return mine | (self.joined.nthreads() if self.joined is not None else {})

    def run(self, fn: Callable, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``fn(*args)`` on every worker: here, the driver (its own process, or not at all for helper processes)."""
        mine = {"here": fn(*args)} if not self.processes else {}
        return mine | (self.joined.run(fn, *args, **kwargs) if self.joined is not None else {})

    def cancel(self, futures: list) -> None:
        for f in futures:
            if isinstance(f, HereFuture):
                f.cancel()
            elif self.joined is not None:
                self.joined.cancel([f])

    @property
    def cluster(self) -> Any:
        return self.joined.cluster if self.joined is not None else None

    @property
    def dashboard_link(self) -> str | None:
        return self.joined.dashboard_link if self.joined is not None else None

    # -- running here --
    def _run(self, fut: HereFuture, fn: Callable, args: tuple, retries: int) -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            real = _resolved(args)
        except BaseException as exc:  # a dependency failed: so does this task, as in Dask
            fut.set_exception(exc)
            return
        for attempt in range(retries + 1):
            try:
                value = self._call(fn, real)
            except BaseException as exc:
                if attempt < retries and not isinstance(exc, KeyboardInterrupt):
                    log.debug("task %s failed (%s); retrying", fut.key, exc)
                    continue
                fut.set_exception(exc)
                return
            fut.set_result(value)
            return

    def _call(self, fn: Callable, args: tuple) -> Any:
        if not self.processes:
            return fn(*args)
        return min(self._helpers, key=lambda h: h.busy).run(fn, args)

    def _join_cluster(self) -> bool:
        """Start the embedded cluster once the job has outlasted :attr:`alone`; whether there is one.
        Never an embedded one in place of helper processes: the same width (see the module docstring)."""
        if self.processes and self.options.embedded:
            return False
        if self.joined is None and self.limits and self._capped():
            return False  # the job-wide cap sets the pace, not the driver's cores: workers would only wait too
        if self.joined is None and time.monotonic() - self.t0 >= self.alone:
            if not self._cpu_bound():
                return False  # the driver waits more than it works: workers would only wait too
            from dask_pfs.clusters.client import connect
            from dask_pfs.runtime.limits import job_limits

            log.info(
                "the job goes on after %.0f s, the driver busy (%.1f cores): starting a cluster for the rest",
                self.alone,
                self._busy,
            )
            self.joined = client = self._stack.enter_context(connect(self.options))
            self._stack.enter_context(job_limits(client, self.limits))
        return self.joined is not None

    def _cpu_bound(self) -> bool:
        """Whether the driver used :data:`JOIN_BUSY` of a core or more over its last window: the first
        from the job's start, each later one at least :data:`BUSY_WINDOW` long (a job can become bound by
        the driver's CPU later, as its files grow smaller).  Process CPU: the native core's threads count."""
        start, cpu0 = self._window
        now, cpu = time.monotonic(), time.process_time()
        if now - start >= min(BUSY_WINDOW, self.alone):
            self._busy = (cpu - cpu0) / (now - start)
            self._window = (now, cpu)
        if self._busy >= JOIN_BUSY:
            return True
        if not self._told_idle:
            self._told_idle = True
            log.info("the job goes on after %.0f s, the driver mostly waiting (%.2f cores): no cluster", self.alone,
                     self._busy)  # fmt: skip
        return False

    def _capped(self) -> bool:
        """Whether, the time to join come, the job has waited on its caps for a tenth of it or more."""
        elapsed = time.monotonic() - self.t0
        return elapsed >= self.alone and ratelimit.throttled_seconds() >= 0.1 * elapsed

    def close(self) -> int:
        """Stop the helpers (abandoning any stuck on storage) and the cluster that joined; how many were left behind."""
        self._threads.close()
        left = sum(bool(h.stop()) for h in self._helpers)
        if self.limits and not self.processes:
            ratelimit.configure(None)
        self._stack.close()
        if left:
            log.warning("%d helper process(es) stuck on storage left behind", left)
        return left


def on_network(where: tuple[Location, ...]) -> bool:
    """Whether any of the job's local paths is on network or FUSE storage (object stores are not: no mount to hang)."""
    from operators.mounts import is_network

    return any(loc.is_local and is_network(loc.path) for loc in where)


def here_client(cluster: ClusterOptions, limits: Limits | None, where: tuple[Location, ...]) -> HereClient | None:
    """A :class:`HereClient` for a job on ``where`` that would start an embedded cluster, else None.

    Not when worker processes or a dashboard are asked for, ``PFS_ALONE_SECONDS=0``, or job-wide
    caps on network storage (helper processes would each hold the whole rate).
    """
    from dask_pfs.clusters.client import default_workers
    from dask_pfs.clusters.worker_config import TASKS_PER_WORKER

    if not where or not cluster.embedded or cluster.workers or cluster.dashboard_asked or alone_seconds() <= 0:
        return None  # worker processes asked for in so many words (--workers) are started
    network = on_network(where)
    if network and limits:
        return None
    from operators.stores import runtime_started

    if network and runtime_started():  # forked helpers would hang on an object store (operators.stores)
        return None
    slots = default_workers() * TASKS_PER_WORKER
    return HereClient(cluster, limits, slots=slots, processes=network, per_helper=TASKS_PER_WORKER)
