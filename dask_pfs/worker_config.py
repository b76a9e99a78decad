"""Dask configuration every pfs worker gets, wherever it runs (embedded, Slurm, the Helm chart)."""

from __future__ import annotations

# Dask's statistical profiler samples every thread's stack (``sys._current_frames()``) 100 times a
# second.  pfs workers run hundreds of I/O threads, so it costs CPU that the storage client needs,
# and on CPython < 3.11.9 it deadlocks the worker (CPython gh-106883: a GC callback that releases
# the GIL inside ``sys._current_frames()``, here distributed's GC diagnosis, against a thread
# starting or ending; seen as a `pfs rm` hung with every thread waiting for the GIL).  Off for the
# embedded cluster (its nannies hand the config to forked and spawned workers alike); the Slurm
# script exports WORKER_ENV, and the Helm chart sets the same variable.
WORKER_CONFIG = {"distributed.worker.profile.enabled": False}
WORKER_ENV = {"DASK_" + key.upper().replace(".", "__"): str(value) for key, value in WORKER_CONFIG.items()}
