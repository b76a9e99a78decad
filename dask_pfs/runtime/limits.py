"""Job-wide caps over a Dask cluster, and the concurrency each worker settled on.

``--max-ops-per-second`` and ``--max-bandwidth`` cap the whole job, not each worker.  Design:
the job's token buckets live on the Dask scheduler (installed with ``run_on_scheduler`` and
served by one ``pfs_lease`` handler); a worker plugin gives every worker process, including
ones that join mid-job, a leased bucket (``operators.ratelimit.LeasedBucket``) that fetches
about 50 ms worth of the job's rate per request.  The scheduler's bucket never grants more
than the rate (plus a 250 ms burst), whatever the number of workers, and a busy worker can
use what an idle one does not, so nothing needs re-dividing when workers come and go.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from operators import ratelimit
from operators.core import concurrency
from operators.ratelimit import Limits, TokenBucket

if TYPE_CHECKING:
    from distributed import Client

log = logging.getLogger("pfs.limits")

_BUCKETS: dict[tuple[str, str], TokenBucket] = {}  # on the scheduler: (job, kind) -> bucket


def _lease(job: str = "", kind: str = "ops", n: float = 1.0, **_) -> float:
    """Scheduler handler: reserve ``n`` tokens of ``job``'s bucket; seconds to wait for them."""
    bucket = _BUCKETS.get((job, kind))
    return bucket.reserve(n) if bucket is not None else 0.0


def _install(job: str, ops: float | None, nbytes: float | None, dask_scheduler=None) -> None:
    dask_scheduler.handlers.setdefault("pfs_lease", _lease)
    for kind, rate in (("ops", ops), ("bytes", nbytes)):
        if rate:
            burst = rate * 0.25  # absorbs late wake-ups and slow lease round trips on a busy host
            _BUCKETS[(job, kind)] = TokenBucket(rate, max(1.0, burst))


def _uninstall(job: str, dask_scheduler=None) -> None:
    for kind in ("ops", "bytes"):
        _BUCKETS.pop((job, kind), None)


def _plugin_class() -> Any:
    """The worker plugin class, made on first use so that a job which never starts a cluster never
    imports ``distributed`` (0.7 s of a small scan).  Module ``__getattr__`` hands the same class to
    pickle on the workers, by its name ``dask_pfs.runtime.limits._LimitsPlugin``."""
    made = globals().get("_LimitsPlugin")
    if made is not None:
        return made
    from distributed.diagnostics.plugin import WorkerPlugin

    class _LimitsPlugin(WorkerPlugin):
        """Points a worker's rate limits at the job's buckets on the scheduler."""

        def __init__(self, job: str, limits: Limits) -> None:
            self.job = job
            self.limits = limits

        def setup(self, worker) -> None:
            from distributed.utils import sync

            job, rate = self.job, self.limits

            def lease(kind: str, n: float) -> float:
                try:
                    return sync(worker.loop, worker.scheduler.pfs_lease, job=job, kind=kind, n=n)
                except Exception:  # scheduler unreachable: pace as if this worker had the whole rate
                    return n / ((rate.ops_per_second if kind == "ops" else rate.bytes_per_second) or n)

            ratelimit.configure(self.limits, lease=lease)

        def teardown(self, worker) -> None:
            ratelimit.configure(None)

    _LimitsPlugin.__qualname__ = "_LimitsPlugin"
    globals()["_LimitsPlugin"] = _LimitsPlugin
    return _LimitsPlugin


def __getattr__(name: str) -> Any:
    if name == "_LimitsPlugin":
        return _plugin_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.contextmanager
def job_limits(client: Client, limits: Limits | None) -> Iterator[None]:
    """Hold ``limits`` over every worker of ``client`` (present and joining) for the block."""
    if not limits:
        yield
        return
    job = f"pfs-limits-{uuid.uuid4().hex[:8]}"
    client.run_on_scheduler(_install, job, limits.ops_per_second, limits.bytes_per_second)
    client.register_plugin(_plugin_class()(job, limits), name=job)
    log.info("job-wide caps %s held by the scheduler", limits)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            client.unregister_worker_plugin(job)
        with contextlib.suppress(Exception):
            client.run_on_scheduler(_uninstall, job)


def concurrency_report(client: Client, threads: int | None = None) -> dict:
    """What the I/O concurrency of each worker process was: fixed, or where auto-tuning settled.

    ``threads`` given to the job fixes it for every task; otherwise the workers are asked (their
    ``PFS_THREADS``, or their controllers).
    """
    if threads:
        return {"mode": "fixed", "threads": threads}
    try:
        per_worker = client.run(concurrency.report)
    except Exception as exc:  # a worker died at the very end: the figure is informative only
        log.debug("no concurrency report: %s", exc)
        return {"mode": "unknown"}
    summary = concurrency.summarize(per_worker)
    if summary.get("mode") == "auto" and summary.get("settled") is not None:
        log.info("concurrency auto-tuned: settled at %s in flight per worker", summary["settled"])
    elif summary.get("mode") == "auto":  # no worker ran pool work long enough to have a figure
        log.debug("concurrency auto-tuned: no worker settled (the job was too short)")
    return summary
