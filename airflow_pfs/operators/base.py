"""What every pfs operator shares: cluster connection, deferral, progress logs, reporting.

A concrete operator is small: it names its engine and turns its (templated) arguments into a
:class:`~airflow_pfs.jobs.JobSpec` in :meth:`PfsBaseOperator.job_spec` (raising a clear error for
bad values).  Every engine returns a ``dask_pfs.runtime.results.JobResult``, so one :meth:`report` serves
them all: its plain values and counters, with ``errors`` (the entries that failed) and ``exit_code``.
Results are small dicts (manifest URI, counts, bytes, errors): file lists never go through XCom.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

from airflow.sdk import Asset, BaseOperator, Context
from airflow.sdk.exceptions import AirflowException
from distributed import Client

from dask_pfs.clusters.client import client_of_scheduler
from dask_pfs.errors import PfsError
from dask_pfs.options import Option, of_job
from dask_pfs.redact import redact
from dask_pfs.remote.client import follow, remote_driver, run_job
from dask_pfs.remote.driver import job_places
from dask_pfs.runtime.allowed import check_allowed, normalise_roots
from dask_pfs.runtime.progress import LogProgress
from operators.ratelimit import Limits, parse_bandwidth

from .. import jobs
from ..hooks import PfsDaskHook
from ..lineage import LineageRef
from ..triggers import PfsJobTrigger

INPUT_KWARGS = ("url", "manifest", "src_manifest", "dst_manifest")
DEFER_CONNECT_TIMEOUT = "10s"  # reaching the scheduler to submit a deferred job


def job_inputs(spec: jobs.JobSpec) -> list[str]:
    """The paths a job reads (its first argument: the tree scanned, copied, synced or verified; its
    manifests; the tree a remove takes): when one is not on this host, the driver runs on the cluster."""
    found = [spec.args[0]] if spec.args and isinstance(spec.args[0], str) else []
    return found + [spec.kwargs[k] for k in INPUT_KWARGS if isinstance(spec.kwargs.get(k), str)]


def take_options(job: str, kwargs: dict[str, Any], skip: Sequence[str] = ()) -> dict[str, Any]:
    """Pop from an operator's keyword arguments the options of the engine ``job`` (``dask_pfs.options.of_job``,
    by their Airflow names: ``keep_owner`` for ``owner``, BaseOperator's task owner) -> engine name -> value;
    ``skip``: the ones the operator takes itself."""
    return {o.name: kwargs.pop(o.airflow_name) for o in own_options(job, skip) if o.airflow_name in kwargs}


def with_options(job: str, skip: Sequence[str] = ()) -> Callable[[Callable], Callable]:
    """An operator's ``__init__`` taking ``job``'s options in ``**kwargs`` (:func:`take_options`) shows them in its
    signature: Airflow's ``partial()``/``expand()`` accept only the arguments a signature names, and ``help()``
    lists them."""

    def wrap(init: Callable) -> Callable:
        sig = inspect.signature(init)
        params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        rest = [p for p in sig.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
        have = {p.name for p in params}
        extra = [
            inspect.Parameter(str(o.airflow_name), inspect.Parameter.KEYWORD_ONLY, default=o.default,
                              annotation=o.annotation)
            for o in own_options(job, skip)
            if o.airflow_name not in have
        ]  # fmt: skip
        init.__signature__ = sig.replace(parameters=[*params, *extra, *rest])  # type: ignore[attr-defined]
        return init

    return wrap


def own_options(job: str, skip: Sequence[str] = ()) -> tuple[Option, ...]:
    return tuple(o for o in of_job(job) if o.airflow_name is not None and o.name not in skip)


def engine_kwargs(job: str, given: dict[str, Any], skip: Sequence[str] = ()) -> dict[str, Any]:
    """Every option of ``job`` the operator passes on (``given``, else the default), True/False ones checked."""
    values = {}
    for o in own_options(job, skip):
        value = values[o.name] = given.get(o.name, o.default)
        if o.annotation.startswith("bool"):
            allowed: tuple = (None, True, False) if "None" in o.annotation else (True, False)
            if value not in allowed or not (value is None or isinstance(value, bool)):
                words = "True, False or None" if None in allowed else "True or False"
                raise AirflowException(f"{o.airflow_name} must be {words}, got {value!r}")
    return values


QUIET_LOGGERS = ("distributed", "bokeh", "tornado")  # an embedded cluster's INFO lines: not the task's story


@contextlib.contextmanager
def cluster_logs_quiet() -> Iterator[None]:
    """Keep Dask's own INFO lines (scheduler and worker start, "please install jupyter-server-proxy",
    closing streams) out of the task log for the block: its warnings and errors still show."""
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        if lg.getEffectiveLevel() < logging.WARNING:
            lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def result_line(summary: dict) -> str:
    """The engine's counts as one log line ("5,002 same, 0 different, ..."): the task log tells the result,
    whether the job ran in the task or resumed from a deferral."""
    counts = summary.get("counts") or {}
    parts = [f"{v:,} {k}" for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)]
    for key in ("manifest", "log"):
        if summary.get(key):
            parts.append(f"{key} {summary[key]}")
    if summary.get("seconds") is not None:
        parts.append(f"{float(summary['seconds']):.1f} s")
    return ", ".join(parts) or "done"


class PfsBaseOperator(BaseOperator):
    """Run one pfs engine call on the ``pfs_dask`` cluster.

    :param pfs_dask_conn_id: the ``pfs_dask`` connection (a scheduler address, or local mode).
    :param workers: worker processes for an embedded LocalCluster.
    :param threads: I/O threads per worker process (operations in flight per process).
    :param deferrable: run the job on the cluster and free the Airflow worker while it runs.
        Needs a running scheduler; a retry re-attaches to the job still running.  Without it, the
        driver runs in the task, or (with a scheduler connection, like the CLI's ``--driver auto``)
        on the cluster when an input path is not on this host; the task then follows its progress.
    :param poll_interval: seconds between job status checks when deferred.
    :param progress_interval: seconds between progress lines in the task log.
    :param max_ops_per_second: job-wide cap on entry operations per second (the CLI's
        ``--max-ops-per-second``): a job that shares a metadata server with others stays polite.
    :param max_bandwidth: job-wide cap on bytes read per second, e.g. ``"200M"`` (``--max-bandwidth``).
    :param fail_on_errors: fail the task when the engine reports per-entry errors.
    :param allowed_roots: the places this task may touch (paths or URLs): every path it is given, after
        templating and after resolving ``..`` and symbolic links, must be one of them or lie below one, or
        the task fails before any I/O; the engine checks again where it runs, with the roots the input
        manifests recorded.  Not templated: a run's conf cannot widen it.  The ``pfs_dask`` connection's
        extra ``allowed_roots`` (a list, or one string separated by commas) applies as well: a place must
        then satisfy both.
    """

    engine: ClassVar[str]
    fail_on_errors_default: ClassVar[bool] = True
    template_fields: Sequence[str] = ()
    ui_color = "#e2f0d9"

    def __init__(
        self,
        *,
        pfs_dask_conn_id: str = PfsDaskHook.default_conn_name,
        workers: int | None = None,
        threads: int | None = None,
        deferrable: bool = False,
        poll_interval: float = 5.0,
        progress_interval: float = 30.0,
        fail_on_errors: bool | None = None,
        max_ops_per_second: float | None = None,
        max_bandwidth: str | None = None,
        allowed_roots: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        try:
            self.allowed_roots = normalise_roots(allowed_roots)
        except PfsError as exc:
            raise AirflowException(f"{kwargs.get('task_id')}: {exc}") from None
        self.pfs_dask_conn_id = pfs_dask_conn_id
        self.workers = workers
        self.threads = threads
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.progress_interval = progress_interval
        self.fail_on_errors = self.fail_on_errors_default if fail_on_errors is None else fail_on_errors
        self.max_ops_per_second = max_ops_per_second
        self.max_bandwidth = max_bandwidth
        self._client: Client | None = None
        self._pfs_result: dict | None = None

    # --- what a concrete operator provides -------------------------------------------------------

    def job_spec(self, context: Context) -> jobs.JobSpec:
        """Validate the rendered arguments and describe the engine call."""
        raise NotImplementedError

    def report(self, summary: dict) -> dict:
        """The small dict returned to XCom and put on outlet asset events: the summary's plain values,
        its counters (``type-changed`` as ``type_changed``) and ``errors``, the entries that failed."""
        result = {k: v for k, v in summary.items() if not isinstance(v, list | tuple | set | dict)}
        counts = summary.get("counts") or {}
        result |= {k.replace("-", "_"): v for k, v in counts.items() if not isinstance(v, list | tuple | set | dict)}
        if "failed" in summary:
            result["errors"] = summary["failed"]
        if "seconds" in result:
            result["seconds"] = round(float(result["seconds"] or 0), 3)
        return result

    def error_samples(self, summary: dict) -> list[str]:
        """A few "path: error" lines from the engine's summary, for the log and the failure message."""
        return [": ".join(map(str, s)) for s in summary.get("samples") or []]

    def lineage(self, result: dict) -> tuple[list[LineageRef], list[LineageRef]]:
        """(inputs, outputs): the datasets this call read and wrote, from the rendered arguments and
        its result (``{}`` when it failed before reporting)."""
        return [], []

    def get_openlineage_facets_on_complete(self, task_instance: Any):
        """OpenLineage datasets and the ``pfs`` run facet (called by the OpenLineage provider)."""
        from ..lineage_facets import operator_lineage

        inputs, outputs = self.lineage(self._pfs_result or {})
        return operator_lineage(self.engine, inputs, outputs, self._pfs_result)

    # --- shared machinery ------------------------------------------------------------------------

    @property
    def hook(self) -> PfsDaskHook:
        return PfsDaskHook(self.pfs_dask_conn_id, workers=self.workers, threads=self.threads)

    def limits(self) -> Limits | None:
        """The job-wide caps, checked (a bad value fails the task before anything runs)."""
        if self.max_ops_per_second is None and self.max_bandwidth is None:
            return None
        ops = self.max_ops_per_second
        if ops is not None and (isinstance(ops, bool) or not isinstance(ops, int | float) or ops <= 0):
            raise AirflowException(f"max_ops_per_second must be a number above 0, got {ops!r}")
        try:
            rate = parse_bandwidth(str(self.max_bandwidth)) if self.max_bandwidth is not None else None
        except ValueError as exc:
            raise AirflowException(f"max_bandwidth: {exc}") from None
        return Limits(float(ops) if ops is not None else None, rate)

    def confine(self, spec: jobs.JobSpec, hook: PfsDaskHook) -> jobs.JobSpec:
        """Refuse a place outside the allowed roots (the operator's and the connection's) before any I/O,
        and hand the roots to the engine, which checks again where it runs (``JobSpec.allowed_roots``)."""
        sets = tuple(roots for roots in (self.allowed_roots, hook.allowed_roots()) if roots)
        if not sets:
            return spec
        try:
            check_allowed(job_places(spec), *sets)
        except PfsError as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from None
        return dataclasses.replace(spec, allowed_roots=sets)

    def execute(self, context: Context) -> dict:
        spec = self.job_spec(context)
        limits = self.limits()
        if limits is not None:
            spec = dataclasses.replace(spec, kwargs={**spec.kwargs, "limits": limits})
        hook = self.hook
        spec = self.confine(spec, hook)
        if self.deferrable:
            self._submit_and_defer(context, hook, spec)
        progress = LogProgress(self.log, self.progress_interval)
        try:
            with cluster_logs_quiet():
                if hook.is_local:
                    # as the CLI: the driver runs the job's tasks itself, and an embedded cluster starts
                    # only for a job that lasts (dask_pfs.runtime.here) or when workers are asked for
                    self.log.info("Dask cluster: none unless the job lasts (the driver runs its tasks)")
                    summary = jobs.summarize(run_job(spec, hook.get_conn(), progress, inputs=job_inputs(spec)))
                else:
                    summary = self._run_on_cluster(hook, spec, progress)
        except PfsError as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from None
        except (OSError, ValueError, RuntimeError, TypeError, KeyError) as exc:
            # a storage library's own error may quote a URL with its credentials: the task log and the
            # OpenLineage FAIL event (errorMessage, stackTrace) get the redacted line only
            raise AirflowException(redact(f"{self.task_id}: {type(exc).__name__}: {exc}")) from None
        return self._finish(context, summary)

    def _run_on_cluster(self, hook: PfsDaskHook, spec: jobs.JobSpec, progress: LogProgress) -> dict:
        """The job on the connection's running scheduler (its client kept for :meth:`on_kill`)."""
        try:
            with hook.client() as client:
                self._client = client
                if remote_driver(hook.get_conn(), job_inputs(spec)):
                    # like the CLI's --driver auto: an input this Airflow worker does not mount is read
                    # by a driver on the cluster, whose progress this task follows
                    inputs = redact(str(job_inputs(spec)))
                    self.log.info("%s not on this host; the job's driver runs on the cluster", inputs)
                    return jobs.summarize(follow(client, spec, hook.get_conn(), progress, None))
                return jobs.run_engine(spec, client, progress)
        finally:
            self._client = None

    def _submit_and_defer(self, context: Context, hook: PfsDaskHook, spec: jobs.JobSpec) -> None:
        address = hook.scheduler_address()
        ti = context["ti"]
        name = jobs.job_name(ti.dag_id, ti.task_id, ti.run_id, -1 if ti.map_index is None else ti.map_index)
        token = jobs.job_token(name, job_secret())
        import dask

        try:  # an unreachable scheduler is one line within DEFER_CONNECT_TIMEOUT, not a traceback after 30 s
            with (
                dask.config.set({"distributed.comm.timeouts.connect": DEFER_CONNECT_TIMEOUT}),
                client_of_scheduler(hook.get_conn(), untrusted=True) as client,
            ):
                action = jobs.attach_or_submit(client, name, spec, self.progress_interval, token)
        except (PfsError, OSError, TimeoutError) as exc:
            raise AirflowException(redact(f"{self.task_id}: {exc}")) from None
        self.log.info("pfs job %s on %s: %s", name, address, action)
        trigger = PfsJobTrigger(
            address, name, self.poll_interval, self.progress_interval, tls=hook.tls_settings(), token=token
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    def execute_complete(self, context: Context, event: dict) -> dict:
        """Resume after the trigger fired: forget the job on the scheduler, then report."""
        name, status = event.get("name"), event.get("status")
        if status != jobs.MISSING and name is not None:
            try:
                with client_of_scheduler(self.hook.get_conn(), untrusted=True) as client:
                    jobs.forget(client, name)
            except (OSError, PfsError) as exc:
                self.log.warning("Could not clean up pfs job %s on the scheduler: %s", name, exc)
        if status != jobs.FINISHED:
            detail = event.get("error") or "no result recorded"
            raise AirflowException(redact(f"{self.task_id}: pfs job {name} {status}: {detail}"))
        return self._finish(context, event["result"])

    def _finish(self, context: Context, summary: dict) -> dict:
        result = self.report(summary)
        self._pfs_result = result
        self.log.info("%s: %s", self.task_id, result_line(summary))
        errors = int(result.get("errors") or 0)
        samples = self.error_samples(summary)
        if errors:
            self.log.warning("%s: %d errors, e.g. %s", self.task_id, errors, "; ".join(samples[:5]))
            if self.fail_on_errors:
                raise AirflowException(f"{self.task_id}: {errors} errors, e.g. {'; '.join(samples[:3])}")
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = dict(result)
        return result

    def on_kill(self) -> None:
        """The task was killed while running in the worker: drop the client, which cancels its tasks."""
        client = self._client
        if client is not None:
            self.log.info("Killed: closing the Dask client, which cancels the running tasks")
            client.close()


def job_secret() -> str:
    """This Airflow deployment's secret for job tokens (``jobs.job_token``): its ``[core] fernet_key``, which
    every Airflow process of the deployment shares and no Dask peer has; without one, a random secret (then a
    retry cannot re-attach to the job its first try started, and says so)."""
    import secrets

    from airflow.sdk.configuration import conf

    key = conf.get("core", "fernet_key", fallback="") or ""
    if not key or key.startswith("{"):  # unset: the default config's placeholder ("{FERNET_KEY}") is no secret
        return secrets.token_hex(32)
    return key
