"""Adaptive concurrency: how many file-system operations one worker process keeps in flight.

The best number depends on the storage: a local disk is happy with a few, a file server with
1 ms round trips wants a hundred, an overloaded metadata server wants fewer.  Unless told a
fixed number (``--threads`` / ``PFS_THREADS``), every worker process runs one
:class:`Controller` whose limit says how many jobs the process's I/O pool
(:class:`GatedExecutor`, up to 256 threads) runs at once, and which moves that limit while the
job runs, by hill climbing on the measured completion rate:

- it measures an interval (>= 0.5 s) at a base limit, then tries a step up (x1.5);
- a step up is kept only if the rate grew by more than ``gain`` (10 %), and then it climbs on;
  otherwise (latency rose without a rate gain) it goes back and tries a step down (x0.75);
- a step down is kept if the rate lost (against where the descent began) is under ``gain`` or
  half the step, whichever is larger: about the same rate with fewer operations in flight is
  better for a shared server, while a latency-bound rate would fall as much as the step.
  When a step down loses rate, the base is where it settles; it holds there for a few
  intervals and then probes again.  After each change, one pipeline's worth of jobs (admitted
  under the old limit) finishes before the next interval is measured.

Intervals that never had the limit's number of jobs running are skipped: the limit did not
bound them.  The cost on the hot path is one lock acquire at the start of a job and one at its
end: the pool runs as many threads as the limit allows and parks the rest only when the limit
falls, so a job never waits on a gate and is never woken from one.
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import TypeVar

log = logging.getLogger("pfs.concurrency")
T = TypeVar("T")

MAX_LIMIT = 256  # threads of the gated pool, and the highest limit the controller uses
START_LIMIT = 16  # local disks: a few in flight already saturate the CPU
NETWORK_START_LIMIT = 64  # network storage: a 1 ms round trip wants many in flight from the start


def fixed_threads(threads: int | None = None) -> int | None:
    """An explicit thread count (argument, else ``PFS_THREADS``), or None for auto-tuning."""
    if threads:
        return max(1, int(threads))
    value = os.environ.get("PFS_THREADS", "").strip().lower()
    if value in ("", "auto", "0"):
        return None
    try:
        return max(1, int(value))
    except ValueError:
        return None


class Controller:
    """A resizable gate (like a semaphore whose size moves) plus the hill climber that moves it."""

    def __init__(
        self,
        start: int = START_LIMIT,
        lo: int = 1,
        hi: int = MAX_LIMIT,
        interval: float = 0.5,
        gain: float = 0.10,
        hold: int = 8,
    ) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.limit = max(lo, min(hi, start))
        self.lo, self.hi, self.interval, self.gain, self.hold = lo, hi, interval, gain, hold
        self.inflight = 0
        self._peak = 0
        self._warm = self.limit  # the first jobs only fill the pipeline
        self._reset_interval(time.monotonic())
        self.phase = "base"  # base | up | down | hold
        self._next = +1  # direction of the next trial
        self._base: tuple[int, float, float] | None = None  # (limit, ops/s, mean latency)
        self._hold_left = 0
        self._ref = 0.0
        self.settled: int | None = None
        self.completed = 0
        self.history: deque[tuple[float, int, float, float, str]] = deque(maxlen=64)

    def start_at(self, limit: int) -> None:
        """Move the starting point of a controller that has not measured anything yet (else no-op)."""
        with self._cond:
            if self.completed or self.history or self.inflight or self._base is not None:
                return
            self.limit = max(self.lo, min(self.hi, limit))
            self._warm = self.limit
            self._reset_interval(time.monotonic())
            self._cond.notify_all()

    # ---------------------------------------------------------------- jobs

    def begin(self, width: int = 1) -> float:
        """A job starts (``width`` operations in flight: a batch of the native core); return the
        start time to hand to :meth:`end`."""
        with self._cond:
            self.inflight += width
            if self.inflight > self._peak:
                self._peak = self.inflight
        return time.monotonic()

    def park(self, index: int, stop: Callable[[], bool]) -> bool:
        """Hold pool thread ``index`` while the limit is at most ``index``; False once ``stop()``."""
        with self._cond:
            while index >= self.limit and not stop():
                self._cond.wait()
        return not stop()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def end(self, started: float, done: int = 1, width: int = 1) -> None:
        """A job begun with ``width`` in flight has ended, completing ``done`` operations."""
        now = time.monotonic()
        with self._cond:
            self.inflight -= width
            if self._warm:  # jobs admitted under the previous limit are still finishing: not measured
                self._warm = max(0, self._warm - done)
                if not self._warm:
                    self._reset_interval(now)
            else:
                self._done += done
                self._latency += (now - started) * width  # each of `width` operations was in flight throughout
                if self._done >= self._min_done and now - self._t0 >= self.interval:
                    self._step(now)

    # ---------------------------------------------------------------- the climber

    def _reset_interval(self, now: float) -> None:
        self._t0 = now
        self._done = 0
        self._latency = 0.0
        self._peak = self.inflight
        self._min_done = max(8, self.limit // 2)

    def _step(self, now: float) -> None:
        before = self.limit
        rate = self._done / (now - self._t0)
        latency = self._latency / self._done
        bound = self._peak >= self.limit  # all running: jobs queued for the limit, else demand was the bound
        self.completed += self._done
        self.history.append((round(now, 3), self.limit, round(rate, 1), round(latency, 6), self.phase))
        if bound:
            self._decide(rate, latency)
        elif self.phase in ("up", "down"):
            assert self._base is not None  # a trial starts from a measured base
            self.limit, self.phase = self._base[0], "base"  # demand fell below the trial: no verdict
        self._reset_interval(now)
        if self.limit != before:
            self._warm = max(1, min(before, self.limit))  # one turnover of the pipeline
        if self.limit > before:
            self._cond.notify_all()  # parked pool threads below the new limit go back to work

    def _decide(self, rate: float, latency: float) -> None:
        if self.phase == "base":
            self._base = (self.limit, rate, latency)
            self._ref = rate  # a descent may lose at most `gain` of this rate in total
            self._trial(self._next)
        elif self.phase == "up":
            assert self._base is not None
            if rate > self._base[1] * (1 + self.gain):
                self._base = (self.limit, rate, latency)
                self._trial(+1)
            else:  # more in flight bought nothing (latency rose instead): go back, try fewer
                self.limit, self.phase, self._next = self._base[0], "base", -1
        elif self.phase == "down":
            assert self._base is not None
            step = 1 - self.limit / self._base[0]  # the fraction just taken away
            if rate >= self._ref * (1 - max(self.gain, step / 2)):
                self._base = (self.limit, rate, latency)
                self._ref = max(self._ref, rate)
                self._trial(-1)
            else:
                self._settle(self._base[0])
        elif self.phase == "hold":
            self._hold_left -= 1
            if self._hold_left <= 0:
                self.phase, self._next = "base", +1

    def _trial(self, direction: int) -> None:
        if direction > 0:
            new = min(self.hi, max(self.limit + 1, math.ceil(self.limit * 1.5)))
        else:
            new = max(self.lo, min(self.limit - 1, math.floor(self.limit * 0.75)))
        if new == self.limit:
            self._settle(self.limit)
            return
        self.limit, self.phase = new, "up" if direction > 0 else "down"

    def _settle(self, limit: int) -> None:
        self.limit, self.phase, self._hold_left = limit, "hold", self.hold
        if self.settled != limit:
            log.info("concurrency settled at %d operations in flight (pid %d)", limit, os.getpid())
        self.settled = limit

    def report(self) -> dict:
        with self._cond:
            return {
                "mode": "auto",
                "limit": self.limit,
                "settled": self.settled if self.settled is not None else self.limit,
                "phase": self.phase,
                "completed": self.completed + self._done,
            }


class GatedExecutor(Executor):
    """A thread pool running as many jobs at once as its :class:`Controller`'s limit says.

    Pool thread ``i`` takes jobs only while ``i`` is under the limit; the others park until it
    rises again.  A job costs one queue put and get, like ``ThreadPoolExecutor``.  An earlier
    design let all 256 threads take jobs and wait on a gate, which cost every job a wait and a
    wake-up: a local copy of 20,000 files used 14.5-15.4 s of CPU with it, 12.1-13.8 s without
    (11.7-12.5 s with a fixed pool of 16).  Threads start
    as jobs arrive, up to the limit.  Jobs may submit jobs (a listing hands out stat batches)
    but never wait for them, so the pool cannot deadlock on itself.
    """

    def __init__(self, controller: Controller, max_workers: int = MAX_LIMIT) -> None:
        self.controller = controller
        self._max_workers = max_workers
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        fut: Future = Future()
        # run in the submitter's context, as operators.core.pool.CarryingPool: the task's job reaches the thread
        self._queue.put((fut, contextvars.copy_context().run, (fn, *args), kwargs))
        if len(self._threads) < min(self._max_workers, self.controller.limit):
            self._start_thread()
        return fut

    def _start_thread(self) -> None:
        with self._lock:
            index = len(self._threads)
            if index >= min(self._max_workers, self.controller.limit) or self._shutdown:
                return
            t = threading.Thread(target=self._work, args=(index,), name=f"pfs-io_{index}", daemon=True)
            t.start()
            self._threads.append(t)

    def _work(self, index: int) -> None:
        ctl, jobs = self.controller, self._queue
        stopped = lambda: self._shutdown  # noqa: E731
        while True:
            if index >= ctl.limit and not ctl.park(index, stopped):
                return
            item = jobs.get()
            if item is None:
                return
            fut, fn, args, kwargs = item
            if not fut.set_running_or_notify_cancel():
                continue
            started = ctl.begin()
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                ctl.end(started)
                fut.set_exception(exc)
                del fut, exc
            else:
                ctl.end(started)
                fut.set_result(result)
                del fut, result

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shutdown = True
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(None)  # after the jobs already queued, as ThreadPoolExecutor does
        self.controller.wake()  # parked threads see the shutdown and end
        if wait:
            for t in threads:
                if t is not threading.current_thread():
                    t.join()


_lock = threading.Lock()
_controller: Controller | None = None
_mode: dict = {}  # empty until this process has made its pool


def _forget_after_fork() -> None:
    """A forked child starts with no controller: the parent's lock may have been held mid-fork."""
    global _lock, _controller, _mode
    _lock, _controller, _mode = threading.Lock(), None, {}


os.register_at_fork(after_in_child=_forget_after_fork)


def controller() -> Controller:
    """The process-wide controller, shared by every task in the process."""
    global _controller
    with _lock:
        if _controller is None:
            _controller = Controller()
        return _controller


def hint_storage(*paths: tuple[str, str]) -> None:
    """Start the process's controller high when any ``(protocol, path)`` is network storage.

    Object stores and sftp always are; a local path is when its mount is NFS, Lustre, CephFS,
    SMB or a FUSE network mount (``operators.mounts``).  Only a fresh controller moves.
    """
    from operators.mounts import is_network

    network = any(proto not in ("file", "local") or is_network(path) for proto, path in paths)
    controller().start_at(NETWORK_START_LIMIT if network else START_LIMIT)


def note_mode(threads: int | None) -> None:
    """Record what the process pool is running with (pool.get_pool calls this)."""
    global _mode
    _mode = {"mode": "fixed", "threads": threads} if threads else {"mode": "auto"}


def in_flight_cap(threads: int | None) -> int | Callable[[], int]:
    """What bounds a walk's in-flight listings: the fixed count, or the controller's current limit."""
    fixed = fixed_threads(threads)
    if fixed:
        return fixed
    ctl = controller()
    return lambda: ctl.limit


def fanned(threads: int | None, n: int | None, call: Callable[[int], T], count: Callable[[T], int] | None = None) -> T:
    """Run a native-core batch of ``n`` operations (None: the core finds out, and ``count`` of the
    result says) as ``call(fanout)``: the core keeps up to ``fanout`` of them in flight on its own
    threads, not a Python thread each.  With a fixed count (``--threads N``) ``fanout`` is what the
    process's N permits (``operators.core.inflight``) have free, so concurrent batches and pool jobs of
    one process together keep at most N in flight; auto-tuned, it is the controller's limit, and the
    controller measures the batch like that many pool jobs, so the hill climber tunes the core's
    fan-out as it tunes the pool.
    """
    from operators.core.inflight import permits

    fixed = fixed_threads(threads)
    if fixed:
        with permits(fixed).holding(max(1, min(fixed, n if n is not None else fixed))) as width:
            return call(width)
    ctl = controller()
    width = max(1, min(ctl.limit, n if n is not None else ctl.limit))
    started = ctl.begin(width)
    done = n or 0
    try:
        result = call(width)
        if count is not None:
            done = count(result)
        return result
    finally:
        ctl.end(started, max(1, done), width)


def report() -> dict:
    """This process's concurrency: ``{"mode": "fixed", "threads": n}``, the controller's state, or
    ``{}`` when the process has run no pool work yet (a worker idle for the whole job)."""
    if _mode.get("mode") == "fixed":
        return dict(_mode)
    return controller().report() if _mode and _controller is not None else {}


def summarize(per_worker: dict[str, dict]) -> dict:
    """One job-level figure from every worker's :func:`report` (the median of the settled limits)."""
    reports = [r for r in per_worker.values() if r]
    fixed = [r["threads"] for r in reports if r.get("mode") == "fixed"]
    if fixed and len(fixed) == len(reports):
        return {"mode": "fixed", "threads": max(fixed)}
    settled = sorted(r["settled"] for r in reports if r.get("settled"))
    if not settled:
        return {"mode": "auto", "settled": None}
    return {"mode": "auto", "settled": settled[len(settled) // 2], "per_worker": settled}
