"""Engine runs that outlive the Airflow worker: the whole engine driver as one Dask task.

A deferrable operator submits :func:`drive` onto a worker (which then submits the engine's own
tasks through ``worker_client``) and *publishes* the future under a deterministic job name made
from dag/task/run/map index.  The published dataset keeps the job alive on the scheduler while
no client is connected, and lets a retry of the same task instance find the running job by name
instead of starting a second one.  The driver keeps a state record (a Dask ``Variable``: progress
counters while running, then the result or the error) that the trigger reads; a Dask ``Event``
asks the driver to stop (Dask cannot interrupt a running task).

No airflow imports here: this module is unpickled on Dask workers, which may not have Airflow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from distributed import Client, Event, Variable, get_worker, worker_client

from dask_pfs.progress import LogProgress, Reporter

log = logging.getLogger("pfs.job")

# engine name -> "module:function"; copy/remove/sync/verify are added as their engines land
ENGINES = {
    "scan": "dask_pfs.scan:scan",
    "copy": "dask_pfs.copy:copy",
    "remove": "dask_pfs.remove:remove",
    "sync": "dask_pfs.sync:sync",
    "verify": "dask_pfs.verify:verify",
}
RUNNING, FINISHED, MISSING, ERROR, CANCELLED = "running", "finished", "missing", "error", "cancelled"
DONE = (FINISHED, ERROR, CANCELLED)
RECORD_TIMEOUT = 0.3  # seconds to wait for a state record that may not exist
MAX_SAMPLES = 20


class JobCancelled(Exception):
    """Raised inside the driver when the job's cancel event is set."""


@dataclass(frozen=True)
class JobSpec:
    """One engine call: ``ENGINES[engine](*args, client=..., progress=..., **kwargs)``.

    ``engine`` may also be ``"module:function"`` for an engine outside the table.
    """

    engine: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def function(self):
        module, _, name = ENGINES.get(self.engine, self.engine).partition(":")
        return getattr(importlib.import_module(module), name)


def job_name(dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str:
    """Same task instance (any try) -> same name; readable prefix, hashed identity."""
    ident = f"{dag_id}\x00{task_id}\x00{run_id}\x00{map_index}"
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{dag_id}.{task_id}")[:60]
    return f"pfs-job-{slug}-{digest}"


def state_name(name: str) -> str:
    return f"{name}-state"


def cancel_name(name: str) -> str:
    return f"{name}-cancel"


def jsonable(value: Any) -> Any:
    """Make an engine result fit XCom and trigger payloads (JSON, small)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in list(value)[:MAX_SAMPLES]]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def summarize(result: Any) -> dict:
    """An engine result (dataclass with counts and ``exit_code``) as a JSON-able dict."""
    summary = result.summary() if hasattr(result, "summary") else dataclasses.asdict(result)
    summary.setdefault("exit_code", getattr(result, "exit_code", 0))
    return jsonable(summary)


def run_engine(spec: JobSpec, client: Client, progress: Reporter) -> dict:
    """Call the engine with an existing client; return its summary."""
    result = spec.function()(*spec.args, client=client, progress=progress, **spec.kwargs)
    return summarize(result)


class JobProgress:
    """Driver-side reporter: worker log lines, counters into the state record, the cancel check."""

    def __init__(self, name: str, key: str, client: Client, interval: float) -> None:
        self.logger = LogProgress(log, interval)
        self.record = Variable(state_name(name), client=client)
        self.cancel = Event(cancel_name(name), client=client)
        self.key = key
        self.interval = interval
        self.last = 0.0
        self.title = ""

    def start(self, title: str) -> None:
        self.title = title
        self.logger.start(title)
        self._publish({}, force=True)

    def update(self, counters: dict) -> None:
        self.logger.update(counters)
        if self._publish(counters) and self.cancel.is_set():
            raise JobCancelled(f"{self.title}: cancelled")

    def stop(self) -> None:
        self.logger.stop()

    def _publish(self, counters: dict, force: bool = False) -> bool:
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return False
        self.last = now
        self.record.set({"key": self.key, "state": RUNNING, "title": self.title, "counters": jsonable(counters)})
        return True


def drive(spec: JobSpec, name: str, interval: float) -> dict:
    """The Dask task that runs a whole engine call; seceded, so it holds no worker thread.

    The outcome goes into the job's state record before the task ends, so the result survives
    the task being released, and a recomputation of this same task (its worker died after it
    finished) sees the record and does not run the engine a second time.
    """
    key = str(get_worker().get_current_task())
    with worker_client() as client:
        record = Variable(state_name(name), client=client)
        previous = read_record(client, name)
        if previous.get("key") == key and previous.get("state") in DONE:
            return previous
        try:
            if Event(cancel_name(name), client=client).is_set():
                raise JobCancelled(f"{name}: cancelled before it started")
            result = run_engine(spec, client, JobProgress(name, key, client, interval))
        except JobCancelled as exc:
            outcome = {"key": key, "state": CANCELLED, "error": str(exc)}
            record.set(outcome)
            return outcome
        except Exception as exc:
            record.set({"key": key, "state": ERROR, "error": describe_error(exc)})
            raise
        finished: dict[str, Any] = {"key": key, "state": FINISHED, "result": result}
        record.set(finished)
        return finished


def describe_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if type(exc).__name__ == "PfsError" else f"{type(exc).__name__}: {text}"


def read_record(client: Client, name: str) -> dict:
    """The job's state record, or ``{}`` when there is none (never submitted, or forgotten)."""
    try:
        return Variable(state_name(name), client=client).get(timeout=RECORD_TIMEOUT) or {}
    except TimeoutError:
        return {}


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


def submit(client: Client, name: str, spec: JobSpec, interval: float) -> str:
    """Start the driver under a fresh task key and publish it under ``name``; return the key."""
    Event(cancel_name(name), client=client).clear()
    key = f"{name}-{uuid.uuid4().hex[:8]}"
    Variable(state_name(name), client=client).set({"key": key, "state": "submitted"})
    future = client.submit(drive, spec, name, interval, key=key, pure=False, retries=0)
    client.publish_dataset(future, name=name, override=True)
    return key


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
    release(client, name)
    Variable(state_name(name), client=client).delete()


def cancel(client: Client, name: str) -> bool:
    """Ask the driver to stop and cancel its task; True if there was a job."""
    Event(cancel_name(name), client=client).set()
    if name not in client.list_datasets():
        return False
    client.cancel([client.get_dataset(name)], force=True)
    forget(client, name)
    return True
