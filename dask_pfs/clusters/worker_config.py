"""Dask configuration every pfs worker gets, wherever it runs (embedded, Slurm, Kubernetes, the Helm chart)."""

from __future__ import annotations

TASKS_PER_WORKER = 4  # Dask tasks a worker process runs at once (its I/O threads are PFS_THREADS)

# Dask's statistical profiler samples every thread's stack (``sys._current_frames()``) 100 times a
# second.  pfs workers run hundreds of I/O threads, so it costs CPU that the storage client needs,
# and on CPython < 3.11.9 it deadlocks the worker (CPython gh-106883: a GC callback that releases
# the GIL inside ``sys._current_frames()``, here distributed's GC diagnosis, against a thread
# starting or ending; seen as a `pfs rm` hung with every thread waiting for the GIL).  Off for the
# embedded cluster (its nannies hand the config to forked and spawned workers alike); the Slurm
# script and the Kubernetes worker pods export WORKER_ENV, and the Helm chart sets the same variables.
#
# Every batched stream (client -> scheduler, scheduler -> each worker, worker -> scheduler) keeps
# its last ``low-level-log-length`` (default 1,000) message batches for debugging, and a scan task's
# message carries its directories (up to 512 with their rows, ~100 KB): the embedded scheduler held
# ~100 MB per worker that way (benchmarks/RESULTS-scale.md).  A short log keeps the driver's memory
# flat whatever the number of workers and tasks.
WORKER_CONFIG = {"distributed.worker.profile.enabled": False, "distributed.admin.low-level-log-length": 20}
DRIVER_CONFIG = {"distributed.admin.low-level-log-length": 20}  # the client's own stream to a remote scheduler
WORKER_ENV = {
    "DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value) for key, value in WORKER_CONFIG.items()
}
