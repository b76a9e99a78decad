"""Detached jobs (``--detach``): a driver on the cluster that runs to its end without its client.

A job started by the CLI is leased to its client and stops when the client stops (``dask_pfs.remote.driver``).
``--detach`` is the explicit opposite: the driver is *published* under the job's name (it outlives the
client, as an Airflow job does), it takes no lease, and the client leaves at once after saving the job's
name and token in a job file only its user can read (:func:`job_dir`, mode 0600).  ``pfs job NAME`` reads
the job's signed state record with that token (``dask_pfs.remote.control.status``): running with its
counters, finished with its result, or the error; ``pfs job NAME --cancel`` stops it (the same stop as
Ctrl-C: no new I/O, caps held until its last task ends).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dask_pfs.errors import PfsError
from dask_pfs.remote.control import submit
from dask_pfs.remote.driver import POLL, JobSpec

if TYPE_CHECKING:
    from distributed import Client

    from dask_pfs.clusters.client import ClusterOptions

NAME = re.compile(r"pfs-cli-[A-Za-z0-9._-]{1,100}")


def job_dir() -> Path:
    """Where job files go: ``PFS_JOB_DIR``, else ``$XDG_STATE_HOME/pfs/jobs`` (``~/.local/state/pfs/jobs``)."""
    given = os.environ.get("PFS_JOB_DIR")
    if given:
        return Path(given)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "pfs" / "jobs"


def job_file(name: str) -> Path:
    if not NAME.fullmatch(name):
        raise PfsError(f"{name!r}: not a detached job's name (pfs-cli-...)")
    return job_dir() / f"{name}.json"


def save(name: str, token: str) -> Path:
    """Write the job file (new, 0600, never through a symlink) in a directory only its owner can enter."""
    from operators.core import outputs

    path = job_file(name)
    data = json.dumps({"name": name, "token": token}).encode()
    with outputs.private_dir(path.parent) as where:  # the one writer: every directory above checked
        if not where.create_new(path.name, data, outputs.PRIVATE_FILE):
            raise PfsError(f"{path}: a job file of that name exists already; not overwritten")
    return path


def load(name: str) -> str:
    """The token of job ``name`` from its job file."""
    path = job_file(name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise PfsError(f"{name}: no job file {path} (started by another user, or PFS_JOB_DIR differs)") from None
    with os.fdopen(fd) as f:
        try:
            data = json.load(f)
        except ValueError:
            data = None
    if not (isinstance(data, dict) and isinstance(data.get("token"), str) and data.get("name") == name):
        raise PfsError(f"{path}: not a pfs job file")
    return data["token"]


def detach(client: Client, spec: JobSpec, cluster: ClusterOptions, confirm: Any) -> None:
    """Start ``spec``'s driver on the cluster, published and without a lease, save its job file, say how
    to follow it, and end the command (exit 0)."""
    from dask_pfs.clusters.client import ClusterOptions

    if confirm is not None:
        raise PfsError("--detach: a detached job cannot ask for confirmation: give -y")
    name = f"pfs-cli-{spec.engine.replace(':', '.')}-{uuid.uuid4().hex[:12]}"
    token = secrets.token_hex(16)
    kwargs = dict(spec.kwargs)
    kwargs["cluster"] = ClusterOptions(threads=cluster.threads, limits=cluster.limits)
    path = save(name, token)
    submit(client, name, JobSpec(spec.engine, spec.args, kwargs, spec.allowed_roots), POLL, token)
    print(name)
    print(f"pfs: detached job {name} (job file {path}); its state: pfs job {name}", file=sys.stderr, flush=True)
    raise SystemExit(0)
