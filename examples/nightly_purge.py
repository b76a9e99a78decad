"""Nightly purge of node-local scratch: remove files nobody touched for N days.

scan scratch -> dry run (counts, logged, capped) -> remove the same selection (capped again).
The where-clause is plain DuckDB over manifest columns (path, name, type, size, mtime, atime,
uid, ...); the dry run shows what the real run would remove, and ``max_entries`` makes a wrong
clause fail instead of emptying scratch.  Nothing but counts goes through XCom.

Run it by hand (``airflow db migrate`` once first, which makes Airflow's metadata database):
  airflow dags test pfs_nightly_purge -c '{"scratch": "/scratch", "days": 30}'
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_pfs.operators import PfsRemoveOperator, PfsScanOperator

# What a run may touch.  A run's conf fills the paths below, so the DAG author pins where they may point:
# every pfs task gets allowed_roots (a path, after resolving '..' and symbolic links, must be one of them or
# lie below one, or the task fails before any I/O), and each path Param must be absolute, without '.' or '..'
# parts.  PFS_EXAMPLE_ROOTS (paths separated by ':') replaces the roots, to try the example elsewhere.
ROOTS = os.environ.get("PFS_EXAMPLE_ROOTS", "/scratch:/var/lib/pfs/manifests").split(":")
PATH = r"^/(?!(.*/)?[.]{1,2}(/|$)).*$"  # an absolute path without '.' or '..' parts (a Param's pattern)

# entries (files, links) not modified in `days` days; directories are left in place
STALE = "type <> 'directory' AND mtime < now() - to_days({{ params.days }})"

with DAG(
    "pfs_nightly_purge",
    schedule="30 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={
        "scratch": Param("/scratch", type="string", pattern=PATH, description="tree to purge"),
        "manifests": Param(
            "/var/lib/pfs/manifests", type="string", pattern=PATH, description="where scan manifests go"
        ),
        "days": Param(30, type="integer", minimum=1),
        "max_entries": Param(1_000_000, type="integer", minimum=0, description="refuse larger purges"),
    },
    tags=["pfs", "example"],
) as dag:
    scan = PfsScanOperator(
        task_id="scan_scratch",
        src="{{ params.scratch }}",
        manifest="{{ params.manifests }}/scratch-{{ ds_nodash }}",
        overwrite=True,  # a rerun of the same night rescans
        allowed_roots=ROOTS,
    )
    dry_run = PfsRemoveOperator(
        task_id="dry_run",
        manifest=scan.output,  # the scan's result: only its manifest URI is used
        where=STALE,
        dry_run=True,
        max_entries="{{ params.max_entries }}",
        allowed_roots=ROOTS,  # the manifest, and the tree it recorded (checked where the job runs)
    )
    purge = PfsRemoveOperator(
        task_id="purge",
        manifest=scan.output,
        where=STALE,
        max_entries="{{ params.max_entries }}",
        allowed_roots=ROOTS,
    )
    scan >> dry_run >> purge
