"""Engine runs that outlive the Airflow worker: the whole driver as one Dask task (``dask_pfs.remote.driver``).

A deferrable operator starts :func:`~dask_pfs.remote.driver.drive` on a worker and *publishes* the future
under a deterministic job name made from dag/task/run/map index (:func:`job_name`).  The published
dataset keeps the job alive on the scheduler while no client is connected, and lets a retry of the
same task instance find the running job by name instead of starting a second one.  The driver
keeps a state record (progress counters while running, then the result or the error) that the
trigger reads; a Dask ``Event`` asks the driver to stop.  The mechanism is the one ``pfs
--scheduler`` uses for a client that does not mount the data; this module only names the jobs.

No airflow imports here: this module is unpickled on Dask workers, which may not have Airflow.
"""

from __future__ import annotations

import hashlib
import hmac
import re

from dask_pfs.remote.control import (
    TASK_STATES,
    attach_or_submit,
    cancel,
    decide,
    forget,
    release,
    status,
    submit,
    task_status,
)
from dask_pfs.remote.driver import (
    CANCELLED,
    DONE,
    ENGINES,
    ERROR,
    FINISHED,
    FORGED,
    MISSING,
    RECORD_TIMEOUT,
    RUNNING,
    JobCancelled,
    JobSpec,
    cancel_name,
    describe_error,
    drive,
    read_record,
    run_engine,
    state_name,
    summarize,
    verified,
)

__all__ = [
    "CANCELLED",
    "DONE",
    "ENGINES",
    "ERROR",
    "FINISHED",
    "FORGED",
    "MISSING",
    "RECORD_TIMEOUT",
    "RUNNING",
    "TASK_STATES",
    "JobCancelled",
    "JobSpec",
    "attach_or_submit",
    "cancel",
    "cancel_name",
    "decide",
    "describe_error",
    "drive",
    "forget",
    "job_name",
    "job_token",
    "read_record",
    "release",
    "run_engine",
    "state_name",
    "status",
    "submit",
    "summarize",
    "task_status",
    "verified",
]


def job_name(dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str:
    """Same task instance (any try) -> same name; readable prefix, hashed identity."""
    ident = f"{dag_id}\x00{task_id}\x00{run_id}\x00{map_index}"
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{dag_id}.{task_id}")[:60]
    return f"pfs-job-{slug}-{digest}"


def job_token(name: str, secret: str) -> str:
    """The token that signs job ``name``'s state record (``dask_pfs.remote.driver.sign``): an HMAC of the
    name under a secret of this Airflow deployment, so every try of a task instance (a retry re-attaches)
    derives the same token while a peer of the Dask scheduler, who knows the name, cannot."""
    return hmac.new(secret.encode(), f"pfs-job\x00{name}".encode(), hashlib.sha256).hexdigest()
