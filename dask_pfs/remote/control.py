"""Starting, finding and stopping a remote driver (:mod:`dask_pfs.remote.driver`) from a client.

A job is known by a name: its state record and cancel event live on the scheduler under names
derived from it, and the driver's future may be *published* under it so that it outlives the
client (the Airflow provider re-attaches to it after a retry).  The CLI's side is
:mod:`dask_pfs.remote.client`; the Airflow provider's is ``airflow_pfs.jobs``.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING

from dask_pfs.remote.driver import (
    DONE,
    ERROR,
    FINISHED,
    MISSING,
    RUNNING,
    JobSpec,
    answer_name,
    cancel_name,
    drive,
    read_record,
    state_name,
)

if TYPE_CHECKING:
    from distributed import Client


def decide(record: dict, future_status: str | None) -> str:
    """Job state from the record the driver keeps and the published future (None: unpublished)."""
    if record.get("state") in DONE:
        return record["state"]
    if future_status is None:
        return MISSING
    if future_status == "pending":
        return RUNNING
    return ERROR  # the driver died without writing its outcome (killed worker, cancelled task)


def status(client: Client, name: str, wait_seconds: float = 1.0) -> tuple[str, dict]:
    """(state, record): state is ``missing``, ``running``, ``finished``, ``error`` or ``cancelled``."""
    record = read_record(client, name)
    future_status = None
    if name in client.list_datasets():
        future = client.get_dataset(name)
        with contextlib.suppress(TimeoutError):  # the scheduler reports a finished/erred key shortly
            future.exception(timeout=wait_seconds)
        future_status = future.status
        if future_status not in ("pending", "finished"):
            record = {"error": f"driver task {future_status}", **record}
    return decide(record, future_status), record


def start(client: Client, name: str, spec: JobSpec, interval: float, key: str | None = None):
    """Start the driver under ``key`` (default: a fresh one); return its future (held by this client only)."""
    from distributed import Event, Variable

    Event(cancel_name(name), client=client).clear()
    key = key or f"{name}-{uuid.uuid4().hex[:8]}"
    Variable(state_name(name), client=client).set({"key": key, "state": "submitted"})
    return client.submit(drive, spec, name, interval, key=key, pure=False, retries=0)


def submit(client: Client, name: str, spec: JobSpec, interval: float) -> str:
    """Start the driver and publish it under ``name`` (it outlives this client); return its key."""
    future = start(client, name, spec, interval)
    client.publish_dataset(future, name=name, override=True)
    return str(future.key)


def attach_or_submit(client: Client, name: str, spec: JobSpec, interval: float) -> str:
    """Re-attach to a running or finished job of this name, else (re)start it; say which."""
    state, _ = status(client, name)
    if state in (RUNNING, FINISHED):
        return f"attached ({state})"
    if state != MISSING:
        forget(client, name)
    submit(client, name, spec, interval)
    return "submitted"


def release(client: Client, name: str) -> None:
    """Unpublish the driver task: its outcome is in the record, and a held result would be
    recomputed (re-running the engine) if the worker holding it died."""
    if name in client.list_datasets():
        client.unpublish_dataset(name)


def forget(client: Client, name: str) -> None:
    """Drop everything the job left on the scheduler (after its result was reported)."""
    from distributed import Variable

    release(client, name)
    Variable(state_name(name), client=client).delete()
    Variable(answer_name(name), client=client).delete()


def cancel(client: Client, name: str) -> bool:
    """Ask the driver to stop and cancel its task; True if there was a job."""
    from distributed import Event

    Event(cancel_name(name), client=client).set()
    if name not in client.list_datasets():
        return False
    client.cancel([client.get_dataset(name)], force=True)
    forget(client, name)
    return True
