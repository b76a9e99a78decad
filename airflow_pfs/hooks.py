"""The ``pfs_dask`` connection: which Dask cluster pfs operators run on.

Two modes.  ``local`` (host ``local``, or extra ``{"mode": "local", "workers": N, "threads": N}``)
runs the job in the task as the CLI does: the driver runs its tasks itself and an embedded LocalCluster
starts only for a job that lasts (or at once when ``workers`` is given), stopped afterwards.  Otherwise host and
port name a running Dask scheduler (``tcp://host:8786``; extra ``protocol`` for tls/ws, or
extra ``scheduler_file``); only that mode can run deferrable jobs, which must outlive the task.
A secured (``tls://``, mutual TLS) scheduler such as the Helm chart's takes the extras ``tls_ca_file``,
``tls_cert`` and ``tls_key``: each a path on the Airflow worker or the PEM text itself (the chart's
connection Secret embeds them); with them the protocol defaults to ``tls``.
With no ``pfs_dask_default`` connection defined, the default behaves like the CLI:
``PFS_SCHEDULER`` if set, else local mode.

The connection form's fields are declared in ``get_provider_info`` (``conn-fields``), as
Airflow 3.2+ reads them; ``test_connection`` reaches the scheduler and reports its workers.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException
from distributed import Client

from dask_pfs.clusters.client import ClusterOptions, connect, default_workers
from dask_pfs.clusters.security import TlsFiles
from dask_pfs.errors import PfsError
from dask_pfs.runtime.allowed import normalise_roots

DEFAULT_PORT = 8786
LOCAL_HOSTS = ("local", "localcluster", "embedded")
CONN_TYPE = "pfs_dask"  # the connection form's fields are declared in airflow_pfs.get_provider_info
TEST_TIMEOUT = "10s"


def _positive_int(value: Any, what: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise AirflowException(f"pfs_dask connection: {what} must be a whole number, got {value!r}") from None
    if number < 1:
        raise AirflowException(f"pfs_dask connection: {what} must be at least 1, got {number}")
    return number


def options_from_connection(
    host: str | None, port: int | None, schema: str | None, extra: dict[str, Any]
) -> ClusterOptions:
    """ClusterOptions for a connection's fields (pure, so it is easy to reason about and test)."""
    mode = str(extra.get("mode") or "").lower()
    host = (host or "").strip()
    workers = _positive_int(extra.get("workers"), "workers")
    threads = _positive_int(extra.get("threads"), "threads")
    try:
        tls = TlsFiles.from_values(extra.get("tls_ca_file"), extra.get("tls_cert"), extra.get("tls_key"))
    except PfsError as exc:
        raise AirflowException(f"pfs_dask connection: {exc}") from None
    if mode not in ("", "local", "scheduler"):
        raise AirflowException(f"pfs_dask connection: mode must be 'local' or 'scheduler', got {mode!r}")
    if mode == "local" or host.lower() in LOCAL_HOSTS or (not host and not extra.get("scheduler_file")):
        if mode == "scheduler":
            raise AirflowException("pfs_dask connection: mode 'scheduler' needs a host (or scheduler_file)")
        return ClusterOptions(workers=workers, threads=threads)
    if extra.get("scheduler_file"):
        return ClusterOptions(scheduler_file=str(extra["scheduler_file"]), threads=threads, security=tls)
    if "://" in host:
        address = host if host.rsplit(":", 1)[-1].isdigit() else f"{host}:{port or DEFAULT_PORT}"
    else:
        protocol = extra.get("protocol") or schema or ("tls" if tls else "tcp")
        address = f"{protocol}://{host}:{port or DEFAULT_PORT}"
    return ClusterOptions(scheduler=address, threads=threads, security=tls)


class PfsDaskHook(BaseHook):
    """Owns connecting to the cluster: ``with hook.client() as client: ...``."""

    conn_name_attr = "pfs_dask_conn_id"
    default_conn_name = "pfs_dask_default"
    conn_type = CONN_TYPE
    hook_name = "pfs (Dask cluster)"

    def __init__(
        self,
        pfs_dask_conn_id: str = default_conn_name,
        *,
        workers: int | None = None,
        threads: int | None = None,
    ) -> None:
        super().__init__()
        self.pfs_dask_conn_id = pfs_dask_conn_id
        self.workers = workers
        self.threads = threads
        self._options: ClusterOptions | None = None
        self._roots: tuple[str, ...] = ()
        self._defined = True  # whether the connection exists (else the CLI's default: PFS_SCHEDULER or none)

    def get_conn(self) -> ClusterOptions:
        """The cluster options this connection stands for (looked up once)."""
        if self._options is None:
            try:
                conn = self.get_connection(self.pfs_dask_conn_id)
            except AirflowNotFoundException:
                if self.pfs_dask_conn_id != self.default_conn_name:
                    raise
                options = ClusterOptions.from_env()
                self._defined = False
                self.log.info("No %s connection: using %s", self.default_conn_name, options.scheduler or "local")
            else:
                options = options_from_connection(conn.host, conn.port, conn.schema, conn.extra_dejson)
                try:
                    self._roots = normalise_roots(conn.extra_dejson.get("allowed_roots"), "allowed_roots")
                except PfsError as exc:
                    raise AirflowException(f"pfs_dask connection: {exc}") from None
            overrides = {"workers": self.workers, "threads": self.threads}
            if options.scheduler or options.scheduler_file:
                overrides.pop("workers")  # a running cluster has the workers it has
            self._options = ClusterOptions(**{**options.__dict__, **{k: v for k, v in overrides.items() if v}})
        return self._options

    def allowed_roots(self) -> tuple[str, ...]:
        """The connection's extra ``allowed_roots`` (an admin's limit on what any task using it may
        touch, ``dask_pfs.runtime.allowed``); ``()`` when it sets none."""
        self.get_conn()
        return self._roots

    @property
    def is_local(self) -> bool:
        options = self.get_conn()
        return not (options.scheduler or options.scheduler_file)

    def tls_settings(self) -> dict | None:
        """The connection's client certificates as plain values (for the trigger), or None."""
        security = self.get_conn().security
        return security.as_dict() if isinstance(security, TlsFiles) else None

    def scheduler_address(self) -> str:
        """The running scheduler's address; an error for the embedded mode (it dies with the task)."""
        options = self.get_conn()
        if options.scheduler:
            return options.scheduler
        if options.scheduler_file:
            with open(options.scheduler_file) as f:
                return json.load(f)["address"]
        if not self._defined:
            raise AirflowException(
                f"deferrable=True needs a running Dask scheduler, and there is none: no {self.pfs_dask_conn_id!r} "
                "connection is defined and PFS_SCHEDULER is not set (define the connection with the scheduler's "
                "host and port, or leave deferrable off to run the job in the task)"
            )
        raise AirflowException(
            f"connection {self.pfs_dask_conn_id!r} is in local mode, whose jobs run in the task and end with it: "
            "deferrable=True needs a running Dask scheduler (set the connection's host and port)"
        )

    @contextlib.contextmanager
    def client(self) -> Iterator[Client]:
        """A Dask client for the whole task; an embedded cluster is shut down on exit."""
        options = self.get_conn()
        self.log.info("Dask cluster: %s", options.scheduler or options.scheduler_file or "embedded LocalCluster")
        with connect(options) as client:
            yield client

    def test_connection(self) -> tuple[bool, str]:
        """Reach the scheduler and report its workers (the UI's "Test" button)."""
        import dask

        where = "the Dask scheduler"
        try:
            options = self.get_conn()
            if not (options.scheduler or options.scheduler_file):
                workers = options.workers or default_workers()
                if options.workers:
                    return True, f"local mode: each task starts an embedded LocalCluster of {workers} worker processes"
                return True, (
                    "local mode: each task runs its job itself; a job that lasts starts an embedded "
                    f"LocalCluster of {workers} worker processes"
                )
            where = options.scheduler or f"the address in {options.scheduler_file}"
            with dask.config.set({"distributed.comm.timeouts.connect": TEST_TIMEOUT}), self.client() as client:
                info = client.scheduler_info(n_workers=-1)
        except AirflowException as exc:
            return False, str(exc)
        except PfsError as exc:  # dask_pfs.connect's own words: unreachable, refused, unreadable certificates
            return False, str(exc)
        except (OSError, TimeoutError, ValueError, KeyError) as exc:
            return False, f"cannot reach {where}: {type(exc).__name__}: {exc}"
        return True, describe_cluster(info)

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["login", "password"],
            "relabeling": {"host": "Scheduler host (or 'local')", "schema": "Protocol (tcp, tls, ws)"},
            "placeholders": {
                "host": "dask-scheduler.example.org or local",
                "port": str(DEFAULT_PORT),
                "schema": "tcp",
                "extra": '{"mode": "local", "workers": 4, "threads": 32}',
            },
        }


def describe_cluster(info: dict) -> str:
    """One line about a scheduler's workers, from ``Client.scheduler_info()``."""
    workers = info.get("workers") or {}
    threads = sum(w.get("nthreads", 0) for w in workers.values())
    memory = sum(w.get("memory_limit") or 0 for w in workers.values())
    line = f"Dask scheduler {info.get('address')}: {len(workers)} workers, {threads} threads"
    if memory:
        line += f", {memory / 2**30:.1f} GiB memory"
    if not workers:
        line += " (no workers yet: jobs wait until some join)"
    return line
