"""The CLI's side of remote driving (``dask_pfs.remote.driver``): run a job's driver here or on the cluster.

:func:`run_job` decides (``--driver auto|local|cluster``), and for a driver on the cluster
:func:`follow` shows its record on the client's progress bar, answers its confirmations on this
terminal, turns Ctrl-C into a cancel (the journal is kept for ``--resume``) and returns the engine's
result object, so a command prints and exits as it would after a local run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dask_pfs.clusters.client import ClusterOptions, connect, dashboard_link, wants_dashboard
from dask_pfs.errors import PfsError
from dask_pfs.places import local_path, local_text
from dask_pfs.remote.control import Heartbeat, forget, start
from dask_pfs.remote.driver import (
    ASKING,
    CANCEL_GRACE,
    CANCELLED,
    POLL,
    RUNNING,
    JobSpec,
    RemoteConfirm,
    answer_name,
    cancel_name,
    read_record,
    sign,
)
from dask_pfs.runtime.progress import Reporter, describe, human_bytes

if TYPE_CHECKING:
    from distributed import Client


def local_paths(locations: Iterable[str | os.PathLike | None]) -> list[str]:
    """The plain paths (and ``file://`` URLs) among a command's inputs: what a client may not see."""
    paths = []
    for loc in locations:
        if loc is None:
            continue
        path = local_path(loc)  # the one reading of a place (dask_pfs.urls)
        if path is not None:
            paths.append(path)
    return paths


def remote_driver(cluster: ClusterOptions, inputs: Iterable[str | os.PathLike | None]) -> bool:
    """Run the driver on the cluster?  ``cluster.driver``: ``local`` never; ``cluster`` always (a
    scheduler is needed); ``auto`` when a scheduler is given and one of the command's input paths is
    not there on this host (the data is mounted on the workers only)."""
    given = bool(cluster.scheduler or cluster.scheduler_file)
    if cluster.driver == "local":
        return False
    if cluster.driver == "cluster":
        if not given:
            raise PfsError("--driver cluster needs a running cluster: --scheduler, --scheduler-file or PFS_SCHEDULER")
        return True
    return given and not all(os.path.lexists(p) for p in local_paths(inputs))


def run_job(
    spec: JobSpec,
    cluster: ClusterOptions,
    progress: Reporter,
    *,
    inputs: Iterable[str | os.PathLike | None],
    outputs: Iterable[str | os.PathLike | None] = (),
    confirm: Callable[[str], bool] | None = None,
    on_dashboard: Callable[[str], None] | None = None,
) -> Any:
    """Run ``spec`` here (driving ``cluster``) or as a task on it (see :func:`remote_driver`);
    return the engine's result object either way.  ``inputs`` are the paths the job reads (they
    decide ``auto``), ``outputs`` the others it is given: on the cluster every one must be absolute.
    ``confirm`` and ``on_dashboard`` are passed to a local engine; a remote one asks through this client."""
    inputs = list(inputs)
    if not remote_driver(cluster, inputs):
        if cluster.detach:
            raise PfsError("--detach needs the driver on the cluster: --driver cluster and a scheduler")
        extra: dict[str, Any] = {"cluster": cluster}
        if confirm is not None:
            extra["confirm"] = confirm
        if on_dashboard is not None:
            extra["on_dashboard"] = on_dashboard
        return spec.call(None, progress, **extra)
    written = (local_text(p) for p in [*inputs, *outputs] if p is not None)  # as given, before resolving
    relative = [p for p in written if p is not None and not os.path.isabs(p)]
    if relative:
        raise PfsError(
            f"{relative[0]}: the driver runs on the cluster (--driver {cluster.driver}), where this host's "
            "directory means nothing: give absolute paths, as the workers see them"
        )
    with connect(cluster) as client:
        if cluster.detach:
            from dask_pfs.remote.detached import detach

            detach(client, spec, cluster, confirm)  # ends the command
        link = dashboard_link(client)
        if link and on_dashboard is not None:
            on_dashboard(link)
        elif link and cluster.announce and wants_dashboard(cluster.dashboard):
            print(f"dashboard: {link}", file=sys.stderr, flush=True)
        return follow(client, spec, cluster, progress, confirm)


def follow(
    client: Client,
    spec: JobSpec,
    cluster: ClusterOptions,
    progress: Reporter,
    confirm: Callable[[str], bool] | None,
) -> Any:
    """Start the driver on the cluster, show its progress, answer its questions, return its result.

    The job is leased to this client (``dask_pfs.remote.driver.Watcher``): a heartbeat thread renews it
    every ``LEASE_BEAT`` seconds, and a client that is killed, frozen or cut off stops the job within
    ``LEASE_TIMEOUT`` seconds.  Ctrl-C and SIGTERM stop it at once and wait for its report."""
    from distributed import Variable

    name = f"pfs-cli-{spec.engine.replace(':', '.')}-{uuid.uuid4().hex[:12]}"
    key = f"{name}-driver"
    token = secrets.token_hex(16)  # signs the job's state record: a peer on the scheduler cannot forge it
    kwargs = dict(spec.kwargs)
    # on the worker the job-wide caps and threads still apply; the client's own settings do not
    kwargs["cluster"] = ClusterOptions(threads=cluster.threads, limits=cluster.limits)
    if confirm is not None:
        kwargs["confirm"] = RemoteConfirm(name, key, token)
    future = start(client, name, dataclasses.replace(spec, kwargs=kwargs), POLL, token, key, leased=True)
    heartbeat = Heartbeat(client, name, token)
    shown = None
    answered = None
    try:
        with _sigterm_as_interrupt():
            while future.status == "pending":
                record = read_record(client, name, token)
                if record.get("state") == RUNNING and record.get("title"):
                    shown = _show(progress, shown, record)
                elif record.get("state") == ASKING and record.get("asked") != answered and confirm is not None:
                    answered = record["asked"]
                    yes = confirm(record.get("question", ""))
                    Variable(answer_name(name), client=client).set(sign({"asked": answered, "yes": yes}, token))
                with contextlib.suppress(TimeoutError):
                    future.exception(timeout=POLL)  # returns when the driver ends
            outcome = future.result()
        if outcome.get("title"):  # the last counters (a short job may have ended before the first poll)
            shown = _show(progress, shown, outcome)
    except KeyboardInterrupt:
        if shown is not None:
            progress.stop()
            shown = None
        stopped = _stop(client, name, future)
        if stopped is not None:
            _report_stop(stopped)
        raise
    finally:
        heartbeat.close()
        if shown is not None:
            progress.stop()
        with contextlib.suppress(Exception):
            forget(client, name)
    if outcome.get("state") == CANCELLED:
        _report_stop(outcome)
        raise KeyboardInterrupt(outcome.get("error"))
    if "value" not in outcome:  # a recomputed task found the record of its first run
        raise PfsError(f"the driver on the cluster finished but its result was lost: {outcome.get('result')}")
    return outcome["value"]


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM while following a job is a stop like Ctrl-C (the job is stopped and its report waited for),
    not a silent death that would leave the driver to notice the lost lease."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield  # not the CLI's main thread, or a host with its own SIGTERM handling (an Airflow task runner)
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt("terminated")

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _show(progress: Reporter, shown: str | None, record: dict) -> str:
    """Show a record's title and counters on the client's reporter; return the title shown."""
    if record["title"] != shown:
        if shown is not None:
            progress.stop()
        progress.start(record["title"])
    progress.update(record.get("counters") or {})
    return record["title"]


def _stop(client: Client, name: str, future) -> dict | None:
    """Ctrl-C or SIGTERM: ask the driver to stop, and wait (a second Ctrl-C does not) until it has: its
    tasks in flight refused their next batch and ended, its journal is consistent for ``--resume``.
    The driver's outcome, or None if it was not back within ``CANCEL_GRACE`` seconds."""
    from distributed import Event

    print("pfs: stopping the driver on the cluster (Ctrl-C again to leave it)...", file=sys.stderr, flush=True)
    Event(cancel_name(name), client=client).set()
    with contextlib.suppress(Exception):
        future.exception(timeout=CANCEL_GRACE)
        outcome = future.result(timeout=1)
        return outcome if isinstance(outcome, dict) else None
    return None


def stop_report(outcome: dict) -> str:
    """What a stopped job did, in one line: why it stopped, the counters it had reached, its tasks' ends."""
    counters = outcome.get("counters") or {}
    parts = describe(counters, 0.0).split(", ") if counters else []
    done = ", ".join(p for p in parts if not p.endswith("/s")) or "no task had finished"  # a rate means nothing here
    stop = outcome.get("stop") or {}
    tasks = f"{stop.get('stopped_tasks', 0)} task(s) in flight stopped before their next batch"
    if stop.get("finished_tasks"):
        tasks += f", {stop['finished_tasks']} ended on their own"
    if stop.get("granted_ops") or stop.get("granted_bytes"):
        tasks += (
            f" (the caps had granted them {stop.get('granted_ops', 0):,} operations and "
            f"{human_bytes(stop.get('granted_bytes', 0))}: their partial work, not in the counts)"
        )
    if stop.get("left_running"):
        tasks += f", {stop['left_running']} still running (stuck on storage)"
    title = outcome.get("title") or "the job"
    return f"stopped ({outcome.get('error') or 'cancelled'}): {title}: {done}; {tasks}"


def _report_stop(outcome: dict) -> None:
    print(f"pfs: {stop_report(outcome)}", file=sys.stderr, flush=True)
