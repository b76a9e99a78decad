"""The ``pfs_dask`` connection: which Dask cluster pfs operators run on.

Two modes.  ``local`` (host ``local``, or extra ``{"mode": "local", "workers": N, "threads": N}``)
starts an embedded LocalCluster inside the task and stops it afterwards.  Otherwise host and
port name a running Dask scheduler (``tcp://host:8786``; extra ``protocol`` for tls/ws, or
extra ``scheduler_file``); only that mode can run deferrable jobs, which must outlive the task.
A scheduler that requires TLS takes extras ``tls_ca_file``, ``tls_cert`` and ``tls_key`` (file
paths on the Airflow workers; the protocol then defaults to ``tls``): the task's client and
``test_connection`` present them (``PfsJobTrigger``, the deferral's client, does not yet).
With no ``pfs_dask_default`` connection defined, the default behaves like the CLI:
``PFS_SCHEDULER`` if set, else an embedded cluster.

The connection form's fields are declared in ``get_provider_info`` (``conn-fields``), as
Airflow 3.2+ reads them; ``test_connection`` reaches the scheduler and reports its workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException
from distributed import Client, Security

from dask_pfs.cluster import ClusterOptions, connect, default_workers

DEFAULT_PORT = 8786
LOCAL_HOSTS = ("local", "localcluster", "embedded")
CONN_TYPE = "pfs_dask"  # the connection form's fields are declared in airflow_pfs.get_provider_info
TLS_FIELDS = ("tls_ca_file", "tls_cert", "tls_key")
TEST_TIMEOUT = "10s"


def tls_files(extra: dict[str, Any]) -> dict[str, str] | None:
    """``{tls_ca_file, tls_cert, tls_key}`` from the extras, or None when TLS is not configured.

    Dask's TLS is mutual: the client needs the CA that signed the scheduler's certificate and
    its own certificate and key, so all three are required, and each must be a readable file.
    """
    files = {name: extra.get(name) for name in TLS_FIELDS}
    if not any(files.values()):
        return None
    missing = [name for name, path in files.items() if not path]
    if missing:
        raise AirflowException(f"pfs_dask connection: TLS needs {', '.join(TLS_FIELDS)}; missing {', '.join(missing)}")
    for name, path in files.items():
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise AirflowException(f"pfs_dask connection: {name} {path!r} is not a readable file")
    return {name: str(path) for name, path in files.items()}


def security_for(tls: dict[str, str] | None) -> Security | None:
    """The Dask ``Security`` a client presents for these TLS files (None: plain connection)."""
    if not tls:
        return None
    return Security(
        tls_ca_file=tls["tls_ca_file"],
        tls_client_cert=tls["tls_cert"],
        tls_client_key=tls["tls_key"],
        require_encryption=True,
    )


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
    if mode not in ("", "local", "scheduler"):
        raise AirflowException(f"pfs_dask connection: mode must be 'local' or 'scheduler', got {mode!r}")
    if mode == "local" or host.lower() in LOCAL_HOSTS or (not host and not extra.get("scheduler_file")):
        if mode == "scheduler":
            raise AirflowException("pfs_dask connection: mode 'scheduler' needs a host (or scheduler_file)")
        return ClusterOptions(workers=workers, threads=threads)
    if extra.get("scheduler_file"):
        return ClusterOptions(scheduler_file=str(extra["scheduler_file"]), threads=threads)
    if "://" in host:
        address = host if host.rsplit(":", 1)[-1].isdigit() else f"{host}:{port or DEFAULT_PORT}"
    else:
        tls = any(extra.get(name) for name in TLS_FIELDS)
        protocol = extra.get("protocol") or schema or ("tls" if tls else "tcp")
        address = f"{protocol}://{host}:{port or DEFAULT_PORT}"
    return ClusterOptions(scheduler=address, threads=threads)


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
        self._tls: dict[str, str] | None = None

    def get_conn(self) -> ClusterOptions:
        """The cluster options this connection stands for (looked up once)."""
        if self._options is None:
            try:
                conn = self.get_connection(self.pfs_dask_conn_id)
            except AirflowNotFoundException:
                if self.pfs_dask_conn_id != self.default_conn_name:
                    raise
                options = ClusterOptions.from_env()
                self.log.info("No %s connection: using %s", self.default_conn_name, options.scheduler or "local")
            else:
                options = options_from_connection(conn.host, conn.port, conn.schema, conn.extra_dejson)
                if options.scheduler or options.scheduler_file:
                    self._tls = tls_files(conn.extra_dejson)
            overrides = {"workers": self.workers, "threads": self.threads}
            if options.scheduler or options.scheduler_file:
                overrides.pop("workers")  # a running cluster has the workers it has
            self._options = ClusterOptions(**{**options.__dict__, **{k: v for k, v in overrides.items() if v}})
        return self._options

    @property
    def is_local(self) -> bool:
        options = self.get_conn()
        return not (options.scheduler or options.scheduler_file)

    def scheduler_address(self) -> str:
        """The running scheduler's address; an error for the embedded mode (it dies with the task)."""
        options = self.get_conn()
        if options.scheduler:
            return options.scheduler
        if options.scheduler_file:
            with open(options.scheduler_file) as f:
                return json.load(f)["address"]
        raise AirflowException(
            f"connection {self.pfs_dask_conn_id!r} starts an embedded LocalCluster, which dies with the task: "
            "deferrable=True needs a running Dask scheduler (set the connection's host and port)"
        )

    @contextlib.contextmanager
    def client(self, timeout: str = "30s") -> Iterator[Client]:
        """A Dask client for the whole task; an embedded cluster is shut down on exit."""
        options = self.get_conn()
        self.log.info("Dask cluster: %s", options.scheduler or options.scheduler_file or "embedded LocalCluster")
        if self._tls is None:
            with connect(options) as client:
                yield client
            return
        tls_options = cluster_options_with_tls(options, self._tls)
        if tls_options is not None:
            with connect(tls_options) as client:
                yield client
            return
        with Client(
            options.scheduler,
            scheduler_file=options.scheduler_file,
            security=security_for(self._tls),
            set_as_default=False,
            timeout=timeout,
        ) as client:
            yield client

    def test_connection(self) -> tuple[bool, str]:
        """Reach the scheduler and report its workers (the UI's "Test" button)."""
        where = "the Dask scheduler"
        try:
            options = self.get_conn()
            if not (options.scheduler or options.scheduler_file):
                workers = options.workers or default_workers()
                return True, f"local mode: each task starts an embedded LocalCluster of {workers} worker processes"
            where = options.scheduler or f"the address in {options.scheduler_file}"
            with self.client(timeout=TEST_TIMEOUT) as client:
                info = client.scheduler_info(n_workers=-1)
        except AirflowException as exc:
            return False, str(exc)
        except (OSError, TimeoutError, ValueError, KeyError) as exc:
            return False, f"cannot reach {where}: {type(exc).__name__}: {exc}"
        return True, describe_cluster(info)


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


def cluster_options_with_tls(options: ClusterOptions, tls: dict[str, str]) -> ClusterOptions | None:
    """``options`` carrying the client's TLS ``Security``, once ``ClusterOptions`` has a ``security``
    field (then ``dask_pfs.connect`` builds the secured client); None while it has not."""
    if "security" not in {f.name for f in dataclasses.fields(ClusterOptions)}:
        return None
    return dataclasses.replace(options, security=security_for(tls))
