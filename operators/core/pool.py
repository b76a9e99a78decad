"""One thread pool per process for blocking file-system calls.

Metadata syscalls release the GIL, so on network storage the useful concurrency is the
number of operations in flight, not the number of cores.  Every task running in a worker
process shares this pool, which bounds the process's in-flight operations however many
Dask tasks run at once.
"""

from __future__ import annotations

import contextvars
import os
import threading
from concurrent.futures import Executor, ThreadPoolExecutor

from operators.core.concurrency import GatedExecutor, controller, fixed_threads, hint_storage, note_mode
from operators.core.inflight import Permits, permits

DEFAULT_THREADS = 64

_lock = threading.Lock()
_pool: Executor | None = None
_size = 0


def _forget_after_fork() -> None:
    """A forked child (a worker forked while the driver walks) makes its own pool: the parent's threads are gone."""
    global _lock, _pool, _size
    _lock, _pool, _size = threading.Lock(), None, 0


os.register_at_fork(after_in_child=_forget_after_fork)


def default_threads() -> int:
    """``PFS_THREADS`` from the environment (set per worker by clusters and the Helm chart), else 64."""
    try:
        return max(1, int(os.environ.get("PFS_THREADS", DEFAULT_THREADS)))
    except ValueError:
        return DEFAULT_THREADS


class CarryingPool(ThreadPoolExecutor):
    """A thread pool whose jobs run in the submitter's context: a task's job (``operators.stopgate``)
    reaches the threads doing its I/O, so a stopped job's pooled batches are refused as its own."""

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)


class _Permitted(CarryingPool):
    """The fixed pool (``--threads N``): each job holds one of the process's N permits
    (``operators.core.inflight``), shared with the native core's fan-out, so both together keep N in flight."""

    def __init__(self, n: int) -> None:
        super().__init__(max_workers=n, thread_name_prefix="pfs-io")
        self.permits = permits(n)

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(_holding, self.permits, fn, *args, **kwargs)


def _holding(gate: Permits, fn, /, *args, **kwargs):
    with gate.holding():
        return fn(*args, **kwargs)


def get_pool(threads: int | None = None, storage: tuple[tuple[str, str], ...] = ()) -> Executor:
    """The process-wide pool, (re)made when a different size is asked for.

    With no count given (argument or ``PFS_THREADS``) it is the auto-tuned pool: 256 threads
    gated by the process's :class:`operators.core.concurrency.Controller`, which starts higher when
    ``storage`` (``(protocol, path)`` pairs the job touches) is network storage.
    """
    global _pool, _size
    want = fixed_threads(threads)
    with _lock:
        if _pool is None or _size != (want or 0):
            old = _pool
            if want:
                _pool = _Permitted(want)
            else:
                hint_storage(*storage)  # where the controller starts: local disk or network storage
                _pool = GatedExecutor(controller())
            _size = want or 0
            note_mode(want)
            if old is not None:
                old.shutdown(wait=False)
        pool = _pool
    return pool
