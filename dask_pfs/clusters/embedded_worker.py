"""Preload of the embedded cluster's worker processes: a terminal's Ctrl-C is the driver's, never theirs.

A Ctrl-C signals the whole foreground process group, the embedded workers too.  A worker that takes
it prints its nanny's KeyboardInterrupt traceback and breaks its task, while the driver is already
stopping the job through the stop gate (``dask_pfs.runtime.stopping``) and then closes the cluster
(which ends the workers).  ``ctrl_c_for_the_driver`` blocks SIGINT while the cluster starts, which
reaches forked workers; a worker made by the forkserver (the start method once an object-store
client's runtime is up, ``clusters.client.start_method``) is forked from a server process started
without that mask and gets Python's default handler back: this preload ignores SIGINT in every
embedded worker, whatever started it.  Workers of a real cluster (``dask worker``, Slurm, Kubernetes)
do not load it: there a Ctrl-C is their operator's.
"""

from __future__ import annotations

import signal
import threading
from typing import Any


def dask_setup(worker: Any) -> None:
    """Called by Dask in the worker process (its main thread) before it takes tasks."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
