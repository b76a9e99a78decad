"""Dask clusters on HPC batch systems (Slurm) through dask-jobqueue.

`start_slurm_cluster` starts a Dask scheduler in the calling process (typically on a login node) and submits
`jobs` Slurm jobs that each run `processes` Dask worker processes. Metadata-heavy pfs work (scan, rm, du) is
bound by file-system round trips rather than CPU, so each task runs its own pool of `PFS_THREADS` threads:
keep few Dask processes and threads per node and size `threads` (PFS_THREADS) to what the metadata server
tolerates. See examples/slurm/README.md.

dask-jobqueue is an optional dependency (extra `slurm`) and is imported only when a cluster is started.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any

from dask_pfs.clusters.worker_config import WORKER_ENV

if TYPE_CHECKING:
    import dask_jobqueue

__all__ = ["DEFAULT_PFS_THREADS", "SlurmUnavailableError", "start_slurm_cluster"]

DEFAULT_PFS_THREADS = 64
_WALLTIME = re.compile(r"^(\d+-)?\d{1,3}(:\d{2}){0,2}$")
_MEMORY = re.compile(r"^\s*\d+(\.\d+)?\s*([kKmMgGtTpP]i?[bB]?|[bB])?\s*$")


class SlurmUnavailableError(ImportError):
    """dask-jobqueue is not installed."""


def _import_jobqueue() -> Any:
    try:
        import dask_jobqueue
    except ImportError as exc:
        raise SlurmUnavailableError(
            "running pfs on Slurm needs dask-jobqueue, which is not installed; "
            "install the slurm extra: pip install 'pfs[slurm]'"
        ) from exc
    return dask_jobqueue


def _default_pfs_threads() -> int:
    raw = os.environ.get("PFS_THREADS", "")
    try:
        value = int(raw)
    except ValueError:
        return DEFAULT_PFS_THREADS
    return value if value > 0 else DEFAULT_PFS_THREADS


def start_slurm_cluster(
    *,
    jobs: int = 1,
    cores: int,
    memory: str,
    walltime: str = "01:00:00",
    queue: str | None = None,
    account: str | None = None,
    interface: str | None = None,
    local_directory: str | None = None,
    processes: int = 1,
    threads: int | None = None,
    job_extra_directives: list[str] | None = None,
    python: str | None = None,
    **cluster_kwargs: Any,
) -> dask_jobqueue.SLURMCluster:
    """Start a `dask_jobqueue.SLURMCluster` for pfs and submit `jobs` worker jobs.

    cores: CPU cores requested per job (`#SBATCH --cpus-per-task`); the Dask threads of each worker process
        are `cores // processes`.
    memory: memory per job, e.g. "16GB" (`#SBATCH --mem`); split evenly between the worker processes.
    walltime: `#SBATCH -t`, e.g. "01:00:00" or "1-00:00:00".
    queue, account: Slurm partition (`-p`) and account (`-A`).
    interface: network interface the workers and the scheduler listen on (e.g. "ib0" for InfiniBand).
    local_directory: node-local scratch for Dask (never the shared file system you are scanning).
    processes: Dask worker processes per job; 1 is right for metadata work.
    threads: size of pfs's metadata thread pool in each worker (env PFS_THREADS in the job script); default:
        $PFS_THREADS of the caller, else 64.
    job_extra_directives: extra `#SBATCH` lines, e.g. ["--qos=normal", "--constraint=lustre"].
    python: Python interpreter on the compute nodes (default: this interpreter, which suits a shared
        virtualenv).
    cluster_kwargs: passed through to `SLURMCluster` (e.g. `job_script_prologue`, `log_directory`,
        `scheduler_options`).

    Returns the cluster; connect with `distributed.Client(cluster)` and close it when done.
    """
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
        raise ValueError(f"cores must be a positive integer, got {cores!r}")
    if not isinstance(processes, int) or isinstance(processes, bool) or not 1 <= processes <= cores:
        raise ValueError(f"processes must be an integer between 1 and cores ({cores}), got {processes!r}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0:
        raise ValueError(f"jobs must be a non-negative integer, got {jobs!r}")
    if not isinstance(memory, str) or not _MEMORY.match(memory):
        raise ValueError(f"memory must be a size such as '16GB' or '64GiB', got {memory!r}")
    if not _WALLTIME.match(walltime):
        raise ValueError(f"walltime must look like HH:MM:SS or D-HH:MM:SS, got {walltime!r}")
    if threads is None:
        threads = _default_pfs_threads()
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads (PFS_THREADS) must be a positive integer, got {threads!r}")

    jobqueue = _import_jobqueue()

    prologue = [f"export PFS_THREADS={threads}", *(f"export {k}={v}" for k, v in WORKER_ENV.items())]
    prologue.extend(cluster_kwargs.pop("job_script_prologue", None) or [])
    options: dict[str, Any] = {
        "cores": cores,
        "processes": processes,
        "memory": memory,
        "walltime": walltime,
        "queue": queue,
        "account": account,
        "interface": interface,
        "local_directory": local_directory,
        "job_extra_directives": list(job_extra_directives or []),
        "job_script_prologue": prologue,
        "python": python or sys.executable,
        "job_name": cluster_kwargs.pop("job_name", "pfs-worker"),
    }
    options.update(cluster_kwargs)
    cluster = jobqueue.SLURMCluster(**options)
    if jobs:
        try:
            cluster.scale(jobs=jobs)
        except BaseException:
            cluster.close()
            raise
    return cluster
