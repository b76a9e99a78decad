"""Nightly purge of node-local scratch: remove files nobody touched for N days.

scan scratch -> dry run (counts, logged, capped) -> remove the same selection (capped again).
The where-clause is plain DuckDB over manifest columns (path, name, type, size, mtime, atime,
uid, ...); the dry run shows what the real run would remove, and ``max_entries`` makes a wrong
clause fail instead of emptying scratch.  Nothing but counts goes through XCom.

Run it by hand (``airflow db migrate`` once first, which makes Airflow's metadata database):
  airflow dags test pfs_nightly_purge -c '{"scratch": "/scratch", "days": 30}'
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_pfs.operators import PfsRemoveOperator, PfsScanOperator

# entries (files, links) not modified in `days` days; directories are left in place
STALE = "type <> 'directory' AND mtime < now() - to_days({{ params.days }})"

with DAG(
    "pfs_nightly_purge",
    schedule="30 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={
        "scratch": Param("/scratch", type="string", description="tree to purge"),
        "manifests": Param("/var/lib/pfs/manifests", type="string", description="where scan manifests go"),
        "days": Param(30, type="integer", minimum=1),
        "max_entries": Param(1_000_000, type="integer", minimum=0, description="refuse larger purges"),
    },
    tags=["pfs", "example"],
) as dag:
    scan = PfsScanOperator(
        task_id="scan_scratch",
        path="{{ params.scratch }}",
        manifest="{{ params.manifests }}/scratch-{{ ds_nodash }}",
        overwrite=True,  # a rerun of the same night rescans
    )
    dry_run = PfsRemoveOperator(
        task_id="dry_run",
        manifest=scan.output,  # the scan's result: only its manifest URI is used
        where=STALE,
        dry_run=True,
        max_entries="{{ params.max_entries }}",
    )
    purge = PfsRemoveOperator(
        task_id="purge",
        manifest=scan.output,
        where=STALE,
        max_entries="{{ params.max_entries }}",
    )
    scan >> dry_run >> purge
