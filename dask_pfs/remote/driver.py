"""Remote driving: a whole driver (scan, cp, rm, sync, verify, diff, du...) as one Dask task.

A client that does not mount the data (a laptop behind ``kubectl port-forward``, a ``kubectl run``
pod, an Airflow worker) cannot probe the root, read a manifest, keep a journal or write the
completion marker itself.  So the driver runs on a worker: :func:`drive` is the task, which
secedes (``worker_client``) and submits the engine's own tasks from there, so it holds no worker
thread and a one-worker cluster does not deadlock.

The driver keeps a state record (a Dask ``Variable``: the progress title and counters while
running, a question while it waits for a confirmation, then the outcome).  A watcher thread
(:class:`Watcher`) stops the job, within :data:`WATCH` seconds, when its cancel ``Event`` is set, when
nobody wants its result any more (the scheduler released the driver task: its client went away), or,
for a *leased* job (the CLI's, unless ``--detach``), when its client's heartbeat (a signed counter the
client bumps every :data:`LEASE_BEAT` seconds) has not moved for :data:`LEASE_TIMEOUT` seconds: a client
that was killed, frozen or cut off.  The stop shuts the job's gate on every worker
(``dask_pfs.runtime.stopping``): no task starts another batch of I/O, the caps hold until the last task
has ended, and the outcome says how many tasks were stopped and the counters reached.  Two users:

* the CLI (``dask_pfs.remote.client.run_job``): ``--driver auto|local|cluster``; it follows the record with the same
  progress bar as a local run, answers ``rm``/``sync`` confirmations on its terminal, turns
  Ctrl-C into a cancel (the journal is kept for ``--resume``) and gets the engine's result object
  back, so it prints and exits exactly as a local run;
* the Airflow provider (``airflow_pfs.jobs``): the driver is *published* under a deterministic
  name, so it outlives the Airflow worker and a retry re-attaches to it; a trigger polls the record.

No Airflow imports here: this module is unpickled on Dask workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import importlib
import json
import logging
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from dask_pfs.errors import PfsError
from dask_pfs.runtime import stopping
from dask_pfs.runtime.allowed import check_allowed
from dask_pfs.runtime.progress import LogProgress, Reporter
from dask_pfs.runtime.stopping import JobCancelled, Stop, job_stop, reopen

if TYPE_CHECKING:
    from distributed import Client

# distributed is imported inside the functions that use it: a local-driver command (the common
# case) never needs it unless it starts a cluster, and it costs ~0.35 s to import.

log = logging.getLogger("pfs.job")

# engine name -> "module:function"; any other "module:function" works as well
ENGINES = {
    "scan": "dask_pfs.scan.api:scan",
    "copy": "dask_pfs.copy:copy",
    "remove": "dask_pfs.remove.api:remove",
    "sync": "dask_pfs.compare.sync:sync",
    "verify": "dask_pfs.compare.verify:verify",
    "diff": "dask_pfs.compare.diff:diff",
}
RUNNING, FINISHED, MISSING, ERROR, CANCELLED = "running", "finished", "missing", "error", "cancelled"
ASKING = "asking"  # the driver waits for the client's answer to a confirmation
FORGED = "forged"  # a state record this job's token did not sign (dask_pfs.remote.driver.verified)
DONE = (FINISHED, ERROR, CANCELLED)
RECORD_TIMEOUT = 0.3  # seconds to wait for a state record that may not exist
MAX_SAMPLES = 20
POLL = 0.2  # seconds between the CLI's reads of the state record
CANCEL_GRACE = 60.0  # seconds the CLI waits, after Ctrl-C, for the driver to stop and keep its journal
WATCH = 0.2  # seconds between the driver's looks at its cancel event, its task and its client's lease
LEASE_BEAT = 1.0  # seconds between a leased job's heartbeats from its client
LEASE_TIMEOUT = 4.0  # seconds without a new heartbeat after which a leased job stops (its client is gone)

__all__ = ["JobCancelled"]  # raised inside the driver when the job is stopped (dask_pfs.runtime.stopping)


@dataclass(frozen=True)
class JobSpec:
    """One engine call: ``ENGINES[engine](*args, client=..., progress=..., **kwargs)``.

    ``engine`` may also be ``"module:function"`` for an engine outside the table.  ``allowed_roots``: sets
    of roots (an Airflow operator's, its connection's) every place of the call must lie under
    (:mod:`dask_pfs.runtime.allowed`), checked here, where the I/O happens, before the engine runs.
    """

    engine: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    allowed_roots: tuple[tuple[str, ...], ...] = ()

    def function(self) -> Callable[..., Any]:
        module, _, name = ENGINES.get(self.engine, self.engine).partition(":")
        return getattr(importlib.import_module(module), name)

    def call(self, client: Client | None, progress: Reporter, **extra: Any) -> Any:
        """Run the engine; ``extra`` keyword arguments go with the spec's."""
        if self.allowed_roots:
            check_allowed(job_places(self, with_manifest_roots=True), *self.allowed_roots)
        return self.function()(*self.args, client=client, progress=progress, **self.kwargs, **extra)


PLACE_KWARGS = ("url", "manifest", "src_manifest", "dst_manifest", "manifest_out", "plan", "report")
MANIFEST_KWARGS = ("manifest", "src_manifest", "dst_manifest")


def job_places(spec: JobSpec, with_manifest_roots: bool = False) -> dict[str, str]:
    """``{what: path or URL}`` a job touches: its positional places (the tree scanned, copied, synced or
    verified, the destination), its place keywords and, ``with_manifest_roots``, the tree each input
    manifest recorded (what a remove or copy by manifest acts on; read from its marker)."""
    places = {f"argument {i + 1}": a for i, a in enumerate(spec.args) if isinstance(a, str | os.PathLike)}
    places |= {k: spec.kwargs[k] for k in PLACE_KWARGS if isinstance(spec.kwargs.get(k), str | os.PathLike)}
    if with_manifest_roots:
        from dask_pfs.manifests.manifest import open_manifest

        for k in MANIFEST_KWARGS:
            if isinstance(spec.kwargs.get(k), str | os.PathLike):
                options = spec.kwargs.get("dst_storage_options" if k == "dst_manifest" else "storage_options")
                try:
                    with warnings.catch_warnings():  # an incomplete one has no root yet: nothing to check
                        warnings.simplefilter("ignore")
                        root = open_manifest(spec.kwargs[k], allow_incomplete=True, storage_options=options).root
                except PfsError:  # no such manifest: the engine says so in its own words
                    continue
                if isinstance(root, str):
                    places[f"the root recorded in {k}"] = root
    return {k: os.fspath(v) for k, v in places.items()}


def state_name(name: str) -> str:
    return f"{name}-state"


def cancel_name(name: str) -> str:
    return f"{name}-cancel"


def answer_name(name: str) -> str:
    return f"{name}-answer"


def lease_name(name: str) -> str:
    return f"{name}-lease"


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
    """An engine result (dataclass with counts and ``exit_code``, or a dict) as a JSON-able dict;
    anything else (rows for ``pfs query``) only by its type."""
    if hasattr(result, "summary"):
        summary = result.summary()
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        summary = dataclasses.asdict(result)
    elif isinstance(result, dict):
        summary = dict(result)
    else:
        summary = {"type": type(result).__name__}
    summary.setdefault("exit_code", getattr(result, "exit_code", 0))
    return jsonable(summary)


def run_engine(spec: JobSpec, client: Client, progress: Reporter) -> dict:
    """Call the engine with an existing client; return its summary."""
    return summarize(spec.call(client, progress))


def orphaned(key: str) -> bool:
    """True when the scheduler released this driver task: no client holds it any more (Ctrl-C'd,
    killed, disconnected) and it is not published.  Dask cannot stop a running task; the driver asks."""
    from distributed import get_worker

    try:
        ts = get_worker().state.tasks.get(key)
    except (ValueError, AttributeError):  # not on a worker, or another worker state API
        return False
    return ts is None or ts.state in ("cancelled", "released", "forgotten")


class JobProgress:
    """Driver-side reporter: worker log lines, counters into the state record, the stop check."""

    def __init__(self, name: str, key: str, client: Client, interval: float, token: str, stop: Stop) -> None:
        from distributed import Variable

        self.token = token
        self.logger = LogProgress(log, interval)
        self.record = Variable(state_name(name), client=client)
        self.stop_ = stop
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
        self._publish(counters)
        if self.stop_.stopped:  # the watcher stopped the job: no more tasks
            raise JobCancelled(f"{self.title}: {self.stop_.reason}")

    def stop(self) -> None:
        self.logger.stop()

    def _publish(self, counters: dict, force: bool = False) -> bool:
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return False
        self.last = now
        record = {"key": self.key, "state": RUNNING, "title": self.title, "counters": jsonable(counters)}
        self.record.set(sign(record, self.token))
        return True


@dataclass(frozen=True)
class RemoteConfirm:
    """The ``confirm`` callback of a remote driver: the question goes into the state record, the
    client asks its user and answers through a Variable; a cancel or a vanished client stops it."""

    name: str
    key: str
    token: str = field(repr=False)

    def __call__(self, message: str) -> bool:
        from distributed import Event, Variable, worker_client

        with worker_client() as client:
            asked = uuid.uuid4().hex
            Variable(state_name(self.name), client=client).set(
                sign({"key": self.key, "state": ASKING, "question": message, "asked": asked}, self.token)
            )
            answer = Variable(answer_name(self.name), client=client)
            cancel = Event(cancel_name(self.name), client=client)
            while True:
                with contextlib.suppress(TimeoutError):
                    reply = verified(answer.get(timeout=1), self.token) or {}  # a peer cannot answer
                    if reply.get("asked") == asked:
                        answer.delete()
                        return bool(reply.get("yes"))
                stop = stopping.current()
                if cancel.is_set() or orphaned(self.key) or (stop is not None and stop.stopped):
                    raise JobCancelled("cancelled while asking for confirmation")


class Watcher:
    """The driver's watch over its job (see the module docstring): a thread that stops it when it is
    cancelled, orphaned or, ``leased``, when its client's heartbeat stops."""

    def __init__(self, client: Client, name: str, key: str, token: str, stop: Stop, leased: bool) -> None:
        self.client, self.name, self.key, self.token = client, name, key, token
        self.stop, self.leased = stop, leased
        self.done = threading.Event()
        self.fired = False  # this watcher stopped the job (not the engine's own failure)
        self.beat: Any = None
        self.moved = time.monotonic()  # when the heartbeat last moved, on this host's clock (clocks may differ)
        self.thread = threading.Thread(target=self._run, name=f"pfs-watch-{name}", daemon=True)

    def start(self) -> Watcher:
        self.thread.start()
        return self

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        from distributed import Event

        cancel = Event(cancel_name(self.name), client=self.client)
        while not self.done.wait(WATCH):
            try:
                reason = self.reason(cancel)
            except Exception as exc:  # the scheduler did not answer this time: look again
                log.debug("%s: watch: %s", self.name, exc)
                continue
            if reason is not None:
                log.warning("%s: stopping the job: %s", self.name, reason)
                self.fired = True
                self.stop.request(reason, self.client)
                return

    def reason(self, cancel) -> str | None:
        """Why the job must stop now, or None."""
        if cancel.is_set():
            return "cancelled"
        if orphaned(self.key):
            return "its client is gone (the scheduler released the driver task)"
        if self.leased and self._lease_ran_out():
            return f"its client's lease ran out (no heartbeat for {LEASE_TIMEOUT:g} s)"
        return None

    def _lease_ran_out(self) -> bool:
        from distributed import Variable

        now = time.monotonic()
        try:
            raw = Variable(lease_name(self.name), client=self.client).get(timeout=RECORD_TIMEOUT)
        except TimeoutError:
            raw = None
        beat = (verified(raw, self.token) or {}).get("beat") if raw is not None else None  # a peer cannot renew it
        if beat is not None and beat != self.beat:
            self.beat, self.moved = beat, now
        return now - self.moved > LEASE_TIMEOUT


def drive(spec: JobSpec, name: str, interval: float, token: str, leased: bool = False) -> dict:
    """The Dask task that runs a whole engine call; seceded, so it holds no worker thread.

    The outcome goes into the job's state record before the task ends, so the result survives
    the task being released, and a recomputation of this same task (its worker died after it
    finished) sees the record and does not run the engine a second time.  The returned dict is
    the record plus ``value``, the engine's result object (for the CLI, which prints it).
    ``leased``: the job stops when its client's heartbeat stops (:class:`Watcher`); else it runs
    to its end whatever happens to the client that started it (a detached job, Airflow's).
    """
    from distributed import Event, Variable, get_worker, worker_client

    key = str(get_worker().get_current_task())
    with worker_client() as client:
        record = Variable(state_name(name), client=client)
        previous = read_record(client, name, token)
        if previous.get("key") == key and previous.get("state") in DONE:
            return previous
        stop = Stop()
        watcher = Watcher(client, name, key, token, stop, leased).start()
        progress = JobProgress(name, key, client, interval, token, stop)
        try:
            if Event(cancel_name(name), client=client).is_set():
                raise JobCancelled(f"{name}: cancelled before it started")
            with job_stop(stop):
                value = spec.call(client, progress)
        except Exception as exc:
            if isinstance(exc, JobCancelled) or watcher.fired:
                outcome = {
                    "key": key,
                    "state": CANCELLED,
                    "error": stop.reason or str(exc),
                    "title": progress.title,
                    "counters": jsonable(progress.logger.counters),
                    "stop": stop.report(),
                }
                record.set(sign(outcome, token))
                return outcome
            record.set(sign({"key": key, "state": ERROR, "error": describe_error(exc)}, token))
            raise
        finally:
            watcher.close()
            if stop.stopped and not stop.left_running:
                reopen(client, stop.gate)
        finished: dict[str, Any] = {"key": key, "state": FINISHED, "result": summarize(value)}
        record.set(sign(finished, token))
        # the last counters (the record had them only every ``interval``), for the client's progress bar
        last = {"title": progress.title, "counters": jsonable(progress.logger.counters)}
        return {**finished, "value": value, **last}


def describe_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, PfsError) else f"{type(exc).__name__}: {text}"


def sign(record: dict, token: str) -> dict:
    """The record as the scheduler keeps it: plain JSON text and an HMAC over it keyed by the job's token,
    which only the submitter and its driver know.  Readers never unpickle it and trust only what verifies."""
    body = json.dumps(jsonable(record), sort_keys=True, separators=(",", ":"))
    return {"body": body, "mac": hmac.new(token.encode(), body.encode(), hashlib.sha256).hexdigest()}


def verified(raw: Any, token: str) -> dict | None:
    """The record inside a signed value, or None when it is not one this job's token signed (a peer's
    forgery, a record of another job under the same name)."""
    if not (isinstance(raw, dict) and isinstance(raw.get("body"), str) and isinstance(raw.get("mac"), str)):
        return None
    mac = hmac.new(token.encode(), raw["body"].encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac, raw["mac"]):
        return None
    try:
        record = json.loads(raw["body"])
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def read_record(client: Client, name: str, token: str) -> dict:
    """The job's state record, or ``{}`` when there is none (never submitted, or forgotten); a value that
    does not verify (``verified``) reads as ``{"state": FORGED}``."""
    from distributed import Variable

    try:
        raw = Variable(state_name(name), client=client).get(timeout=RECORD_TIMEOUT)
    except TimeoutError:
        return {}
    except TypeError:  # pickled data (a peer's object) that a msgpack-only client refused to load
        return {"state": FORGED}
    if raw is None:
        return {}
    record = verified(raw, token)
    return {"state": FORGED} if record is None else record
