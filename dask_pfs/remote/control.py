"""Starting, finding and stopping a remote driver (:mod:`dask_pfs.remote.driver`) from a client.

A job is known by a name: its state record and cancel event live on the scheduler under names
derived from it, and the driver's future may be *published* under it so that it outlives the
client (the Airflow provider re-attaches to it after a retry).  The CLI's side is
:mod:`dask_pfs.remote.client`; the Airflow provider's is ``airflow_pfs.jobs``.

Nothing here unpickles what the scheduler holds: the state record is JSON text signed with the job's token
(``dask_pfs.remote.driver.sign``), and the driver task is looked at by its key (a bare ``Future`` handle,
whose status the scheduler reports), never fetched with ``get_dataset`` (a peer may publish any object
under a job's name).  A reader that must not unpickle anything uses a client made with
``deserializers=["msgpack"]`` (``dask_pfs.clusters.client.client_of_scheduler(..., untrusted=True)``).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from dask_pfs.errors import PfsError
from dask_pfs.remote.driver import (
    DONE,
    ERROR,
    FINISHED,
    FORGED,
    LEASE_BEAT,
    MISSING,
    RUNNING,
    JobSpec,
    answer_name,
    cancel_name,
    drive,
    lease_name,
    read_record,
    sign,
    state_name,
)

if TYPE_CHECKING:
    from distributed import Client


TASK_STATES = {"memory": "finished", "erred": "error", "released": "cancelled", "forgotten": "cancelled"}


def decide(record: dict, future_status: str | None) -> str:
    """Job state from the record the driver keeps and its task's status (None: no such task)."""
    if record.get("state") == FORGED:
        return ERROR  # not this job's record: trust nothing it says
    if record.get("state") in DONE:
        return record["state"]
    if future_status is None:
        return MISSING
    if future_status == "pending":
        return RUNNING
    return ERROR  # the driver died without writing its outcome (killed worker, cancelled task)


def task_status(client: Client, name: str, key: str | None) -> str | None:
    """The driver task's status as a future would say it (``pending``, ``finished``, ``error``,
    ``cancelled``), from the scheduler's plain task state; None when the job is not published or ``key``
    is unknown.  Never fetches the published object (``get_dataset`` unpickles what a peer put there)."""
    if not key or name not in client.list_datasets():
        return None
    state = client.sync(client.scheduler.get_task_status, keys=[key]).get(key)
    return TASK_STATES.get(state, "pending") if state is not None else "cancelled"


def status(client: Client, name: str, token: str) -> tuple[str, dict]:
    """(state, record): state is ``missing``, ``running``, ``finished``, ``error`` or ``cancelled``; a record
    the job's token did not sign is an ``error`` that says so."""
    record = read_record(client, name, token)
    if record.get("state") == FORGED:
        return ERROR, {"error": f"the state record of {name} is not signed by its submitter (forged?)"}
    future_status = task_status(client, name, record.get("key"))
    if future_status not in (None, "pending", "finished"):
        record = {"error": f"driver task {future_status}", **record}
    return decide(record, future_status), record


def start(
    client: Client,
    name: str,
    spec: JobSpec,
    interval: float,
    token: str,
    key: str | None = None,
    leased: bool = False,
):
    """Start the driver under ``key`` (default: a fresh one); return its future (held by this client only).
    ``token`` signs its state record: keep it to yourself.  ``leased``: the job stops when this client's
    heartbeat (:class:`Heartbeat`, started here) stops; the caller closes the heartbeat it returns."""
    from distributed import Event, Variable

    Event(cancel_name(name), client=client).clear()
    key = key or f"{name}-{uuid.uuid4().hex[:8]}"
    Variable(state_name(name), client=client).set(sign({"key": key, "state": "submitted"}, token))
    if leased:
        beat(client, name, token, 0)
    return client.submit(drive, spec, name, interval, token, leased, key=key, pure=False, retries=0)


def beat(client: Client, name: str, token: str, n: int) -> None:
    """One heartbeat of a leased job: a new counter, signed (a peer cannot keep a job alive)."""
    from distributed import Variable

    Variable(lease_name(name), client=client).set(sign({"beat": n}, token))


class Heartbeat:
    """A client's heartbeat for its leased job, every ``LEASE_BEAT`` seconds on a thread of its own (the
    client may be waiting on its user's answer meanwhile).  Stopped with :meth:`close` or by the
    process's end: the driver then stops the job within ``LEASE_TIMEOUT`` seconds."""

    def __init__(self, client: Client, name: str, token: str) -> None:
        import threading

        self.client, self.name, self.token = client, name, token
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"pfs-heartbeat-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self.done.wait(LEASE_BEAT):
            n += 1
            try:
                beat(self.client, self.name, self.token, n)
            except Exception:  # the scheduler did not answer this time; the lease allows a few misses
                continue

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=5)


def submit(client: Client, name: str, spec: JobSpec, interval: float, token: str) -> str:
    """Start the driver and publish it under ``name`` (it outlives this client); return its key."""
    future = start(client, name, spec, interval, token)
    client.publish_dataset(future, name=name, override=True)
    return str(future.key)


def attach_or_submit(client: Client, name: str, spec: JobSpec, interval: float, token: str) -> str:
    """Re-attach to a running or finished job of this name, else (re)start it; say which."""
    if read_record(client, name, token).get("state") == FORGED:
        raise PfsError(
            f"a job named {name} is on the scheduler, but its state record is not signed with this submitter's "
            "token (another Airflow, a peer's forgery, or no [core] fernet_key to derive it): not attaching to it"
        )
    state, _ = status(client, name, token)
    if state in (RUNNING, FINISHED):
        return f"attached ({state})"
    if state != MISSING:
        forget(client, name)
    submit(client, name, spec, interval, token)
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
    Variable(lease_name(name), client=client).delete()


def cancel(client: Client, name: str, token: str) -> bool:
    """Ask the driver to stop and cancel its task; True if there was a job."""
    from distributed import Event, Future

    Event(cancel_name(name), client=client).set()
    if name not in client.list_datasets():
        return False
    key = read_record(client, name, token).get("key")
    if key:
        client.cancel([Future(key, client)], force=True)
    forget(client, name)
    return True
