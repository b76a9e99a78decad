"""Getting a Dask client: the embedded default, an existing scheduler, a Slurm or a Kubernetes cluster.

With no scheduler given pfs starts a ``LocalCluster`` of worker *processes* sized for the
machine and shuts it down afterwards.  On Linux the workers are forked from the driver, which has
already imported everything they need: 1.1 s to start two workers here instead of 3.3 s with
Dask's default ``spawn`` (each spawned worker re-imports distributed, pyarrow and numpy).
``PFS_START_METHOD=spawn`` (or ``forkserver``) restores the default.  Each worker runs a few Dask tasks at a time; the
concurrency that matters on network storage (operations in flight) comes from the per-process
I/O thread pool, sized by ``PFS_THREADS`` (see ``operators.core.pool``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask_pfs.clusters.security import TlsFiles, check_client_certificate, scheduler_address, warn_if_open
from dask_pfs.clusters.stall import abandon_stuck_workers, worker_ttl
from dask_pfs.clusters.worker_config import DRIVER_CONFIG, TASKS_PER_WORKER, WORKER_CONFIG
from dask_pfs.errors import PfsError
from dask_pfs.options import named

if TYPE_CHECKING:
    from distributed import Client
    from distributed.security import Security

    from dask_pfs.clusters.kubernetes import KubernetesOptions
    from operators.ratelimit import Limits


@dataclass(frozen=True)
class ClusterOptions:
    scheduler: str | None = None  # tcp://host:8786
    scheduler_file: str | None = None
    workers: int | None = None  # embedded cluster: worker processes
    threads: int | None = None  # I/O threads per worker process
    slurm: dict | None = None  # options for dask_pfs.clusters.jobqueue.start_slurm_cluster
    kubernetes: KubernetesOptions | None = None  # a DaskCluster of the job's own (dask_pfs.clusters.kubernetes)
    limits: Limits | None = None  # job-wide --max-ops-per-second / --max-bandwidth (dask_pfs.runtime.limits)
    dashboard: bool | None = None  # embedded cluster: serve the dashboard (None: PFS_DASHBOARD, else a TTY)
    # a running tls:// scheduler: the client's certificates (None: PFS_TLS_* via from_env, or Dask's config)
    security: TlsFiles | Security | None = None
    # where the driver runs with a scheduler given: auto, local or cluster (dask_pfs.remote.client.remote_driver)
    driver: str = "auto"
    # a driver on the cluster runs to its end without this client (--detach: dask_pfs.remote.client.detach)
    detach: bool = False
    announce: bool = False  # the CLI: print the dashboard link of a cluster it starts on stderr

    @property
    def embedded(self) -> bool:
        """Whether :func:`connect` starts a LocalCluster in this process (no scheduler, Slurm or Kubernetes)."""
        return not (self.scheduler or self.scheduler_file or self.slurm is not None or self.kubernetes is not None)

    @property
    def dashboard_asked(self) -> bool:
        """A dashboard asked for in so many words (``--dashboard``, ``PFS_DASHBOARD=1``), not just a terminal."""
        if self.dashboard is not None:
            return self.dashboard
        return os.environ.get("PFS_DASHBOARD", "").strip().lower() in ("1", "true", "yes", "on")

    @classmethod
    def from_env(cls, **overrides) -> ClusterOptions:
        values: dict[str, Any] = {"scheduler": os.environ.get("PFS_SCHEDULER") or None, "security": TlsFiles.from_env()}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def start_method() -> str:
    """How embedded workers are started: ``fork`` where the platform has it, unless PFS_START_METHOD says."""
    wanted = os.environ.get("PFS_START_METHOD")
    if wanted:
        return wanted
    from operators.stores import runtime_started

    if runtime_started():  # a fork would hang on its first object-store request (operators.stores)
        return "forkserver"
    return "fork" if sys.platform.startswith("linux") else "spawn"


def preload_for_fork() -> None:
    """Import what tasks use before forking workers, so each worker has it instead of importing it.

    pyarrow imports pandas the first time it converts a Python list (its pandas shim), 0.5 s
    per process here; done once in the driver, the forked workers start with it (in a ``pfs``
    command's process ``operators.pandas_gate`` refuses that import, and this is a no-op).
    """
    import importlib

    import pyarrow as pa

    for module in ("scan.task", "remove.tasks", "copy.tasks", "copy.plan", "checksum", "journal", "parts"):
        importlib.import_module(f"operators.{module}")
    pa.array([], pa.string())  # triggers pyarrow's lazy `import pandas`


def wants_dashboard(option: bool | None) -> bool:
    """Serve the embedded cluster's dashboard? Asked, else ``PFS_DASHBOARD``, else when stderr is a terminal.

    The dashboard costs 0.6 s of every command here (the scheduler runs in the driver, which must
    import bokeh); a batch run (Airflow, cron, a benchmark) has nobody to look at it.
    """
    if option is not None:
        return option
    env = os.environ.get("PFS_DASHBOARD", "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("0", "false", "no", "off"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


@contextlib.contextmanager
def connect(options: ClusterOptions | None = None) -> Iterator[Client]:
    """A client for the whole job; anything this started is shut down on exit."""
    from distributed import Client, LocalCluster  # imported here: `pfs query` never needs it

    options = options or ClusterOptions.from_env()
    if options.scheduler or options.scheduler_file:
        import dask

        with dask.config.set(DRIVER_CONFIG):  # read when the client's stream opens
            client = client_of_scheduler(options)
        try:
            yield client
        finally:
            client.close()
        return
    with contextlib.ExitStack() as stack:
        if options.slurm is not None:
            from dask_pfs.clusters.jobqueue import start_slurm_cluster

            cluster: Any = start_slurm_cluster(**options.slurm)
            stack.callback(_shut_down, cluster)
        elif options.kubernetes is not None:
            from dask_pfs.clusters.kubernetes import start_kubernetes_cluster

            cluster = start_kubernetes_cluster(options.kubernetes)
            stack.callback(_shut_down, cluster)
        else:
            import dask

            env = {"PFS_THREADS": str(options.threads)} if options.threads else {}
            # Set for the whole run, not just the start: a nanny restarting a killed worker reads it again.
            method = start_method()
            config = {"distributed.worker.multiprocessing-method": method, **WORKER_CONFIG}
            config["distributed.worker.preload"] = ["dask_pfs.clusters.embedded_worker"]  # Ctrl-C is the driver's
            config["distributed.scheduler.worker-ttl"] = worker_ttl()  # a hung worker's tasks go elsewhere
            stack.enter_context(dask.config.set(config))
            if method == "fork":
                preload_for_fork()
            dashboard = wants_dashboard(options.dashboard)
            with ctrl_c_for_the_driver():
                cluster = LocalCluster(
                    n_workers=options.workers or default_workers(),
                    threads_per_worker=TASKS_PER_WORKER,
                    processes=True,
                    dashboard_address=":0",  # off, this still serves health and metrics routes: not port 8787
                    scheduler_kwargs={"dashboard": dashboard},
                    silence_logs=logging.ERROR,
                    env=env,
                )
                cluster.pfs_dashboard = dashboard  # read by dashboard_link()
                stack.callback(_shut_down, cluster)  # a Ctrl-C held during the start is raised on leaving the block
        with Client(cluster, set_as_default=False) as client:
            if options.announce and (link := dashboard_link(client)):
                print(f"dashboard: {link}", file=sys.stderr, flush=True)
            yield client


def _shut_down(cluster: Any) -> None:
    mine = {n.pid for n in getattr(cluster, "workers", {}).values() if getattr(n, "pid", None)}
    with contextlib.suppress(Exception):
        cluster.close(timeout=10)
    abandon_stuck_workers(mine)  # workers stuck on hung storage must not hold the driver's exit


@contextlib.contextmanager
def ctrl_c_for_the_driver() -> Iterator[None]:
    """Start an embedded cluster whose worker processes never see a Ctrl-C: the driver takes it and shuts them down.

    A terminal's Ctrl-C signals the whole foreground process group, the forked workers too, and a
    worker interrupted prints its nanny's KeyboardInterrupt traceback, its plugins' failed teardowns
    and the scheduler's broken streams, while the driver is already closing the cluster.  SIGINT is
    blocked in this thread for the block: the threads started meanwhile (the cluster's event loop,
    its nannies' process watchers) inherit the mask, and so do the processes they fork or spawn,
    restarted workers included.  A Ctrl-C during the start itself is held until the cluster is up
    (one half started would fail ``close_clusters`` at exit) and raised when the block is left.
    """
    import signal
    import threading

    from dask_pfs.interrupts import raises_keyboard_interrupt

    main = threading.current_thread() is threading.main_thread()
    held: list[int] = []
    previous = signal.getsignal(signal.SIGINT) if main else None
    deferring = raises_keyboard_interrupt(previous)
    if deferring:  # another thread of the driver may take the signal meanwhile: only noted, not raised mid-start
        signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending Ctrl-C is delivered (to the handler above)
        if deferring:
            signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


def client_of_scheduler(options: ClusterOptions, untrusted: bool = False) -> Client:
    """A client of the running scheduler ``options`` names; bad settings and an unreachable scheduler are PfsErrors.

    ``untrusted``: the client unpickles nothing it receives (``deserializers=["msgpack"]``), for a process
    that only reads job records and statuses (the Airflow triggerer, a deferred task's resume): a peer
    of the scheduler can put a pickled object wherever a reader looks (a Variable, a published dataset).

    Waits up to Dask's ``distributed.comm.timeouts.connect`` (30 s; the Helm chart's Job sets more).
    """
    from distributed import Client

    if options.scheduler:
        address = options.scheduler
    elif options.scheduler_file:
        address = _address_in(options.scheduler_file)
    else:
        raise PfsError("give ", named("scheduler"), " ADDR, ", named("scheduler_file"), " FILE or PFS_SCHEDULER")
    address = scheduler_address(address, secured=options.security is not None)
    warn_if_open(address)
    security = options.security
    if isinstance(security, TlsFiles):
        security = security.to_security()
    check_client_certificate(address, security)
    try:
        deserializers = ["msgpack"] if untrusted else None
        return Client(address, security=security, set_as_default=False, deserializers=deserializers)
    except OSError as exc:  # refused, timed out, TLS handshake rejected
        raise PfsError(f"cannot reach the Dask scheduler {address}: {exc}") from None


def _address_in(scheduler_file: str) -> str:
    import json

    try:
        with open(scheduler_file) as f:
            return json.load(f)["address"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PfsError(f"scheduler file {scheduler_file}: no scheduler address in it ({exc})") from None


def dashboard_link(client: Client) -> str | None:
    """The dashboard's address, or None when the scheduler serves none (Dask still formats a default link)."""
    try:
        if not getattr(getattr(client, "cluster", None), "pfs_dashboard", True):
            return None  # our embedded scheduler serves only its health and metrics routes
        return client.dashboard_link
    except Exception:  # no dashboard (bokeh missing or disabled)
        return None


def cluster_shape(client: Client) -> tuple[int, int]:
    """(worker processes, task slots: their threads) of ``client``'s cluster, from one call to the scheduler."""
    nthreads = client.nthreads()
    return len(nthreads), max(1, sum(nthreads.values()))
