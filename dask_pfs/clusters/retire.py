"""Draining a worker before it stops: no new tasks for it, and time for its running ones to finish.

Dask's own shutdown on SIGTERM (``dask worker``) closes the worker within 10 s and the scheduler re-runs its
running tasks elsewhere: correct for pfs (tasks are idempotent; scans and removals journal what finished), but
a long chunk of a copy starts over. Retiring first, from a Kubernetes ``preStop`` hook or before a Slurm job
ends, lets running chunks finish. The scheduler keeps a retired worker out of new assignments
(``retire_workers(close_workers=False, remove=False)``); it is removed when the worker process exits.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from dask_pfs.errors import PfsError

if TYPE_CHECKING:
    from distributed import Client


def worker_address(client: Client, name: str) -> str:
    """The address of the worker called ``name`` (its ``--name``, or its address)."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    for address, info in workers.items():
        if name in (address, str(info.get("name"))):
            return address
    known = ", ".join(sorted(str(i.get("name")) for i in workers.values())) or "none"
    raise PfsError(f"no worker named {name!r} on the scheduler (workers: {known})")


def retire_worker(client: Client, name: str, timeout: float, poll: float = 0.5) -> tuple[str, int]:
    """Retire worker ``name`` and wait up to ``timeout`` seconds for its running tasks: (address, tasks left)."""
    address = worker_address(client, name)
    client.retire_workers([address], close_workers=False, remove=False)
    deadline = time.monotonic() + timeout
    while True:
        running = len(client.processing([address]).get(address, ()))
        left = deadline - time.monotonic()
        if running == 0 or left <= 0:
            return address, running
        time.sleep(min(poll, left))
