"""Stage a dataset from shared storage onto node-local scratch, and announce it as an Asset.

scan the dataset -> copy only the selected files (here: JPEG images under 10 MiB) -> verify them
by content checksums.  The verify task emits the ``pfs_staged_dataset`` Asset with its counts in
the event's extra, so training DAGs can be scheduled on "dataset staged and verified" (see
``use_staged_dataset`` below); a verify that finds differences fails, and emits nothing.

Run it by hand (``airflow db migrate`` once first, which makes Airflow's metadata database):
  airflow dags test pfs_stage_dataset -c '{"dataset": "/lustre/datasets/imagenet", "scratch": "/scratch/imagenet"}'
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Asset, Param, task

from airflow_pfs.operators import PfsCopyOperator, PfsScanOperator, PfsVerifyOperator

# What a run may touch.  A run's conf fills the paths below, so the DAG author pins where they may point:
# every pfs task gets allowed_roots (a path, after resolving '..' and symbolic links, must be one of them or
# lie below one, or the task fails before any I/O), and each path Param must be absolute, without '.' or '..'
# parts.  PFS_EXAMPLE_ROOTS (paths separated by ':') replaces the roots, to try the example elsewhere.
ROOTS = os.environ.get("PFS_EXAMPLE_ROOTS", "/lustre/datasets:/scratch").split(":")
PATH = r"^/(?!(.*/)?[.]{1,2}(/|$)).*$"  # an absolute path without '.' or '..' parts (a Param's pattern)
STAGED = Asset(name="pfs_staged_dataset", uri="file:///scratch/pfs/staged-dataset")
SELECT = "type = 'file' AND lower(name) LIKE '%.jpg' AND size < 10 * 1024 * 1024"

with DAG(
    "pfs_stage_dataset",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "dataset": Param("/lustre/datasets/images", type="string", pattern=PATH, description="tree on shared storage"),
        "scratch": Param("/scratch/images", type="string", pattern=PATH, description="node-local destination"),
        "manifests": Param(
            "/scratch/pfs-manifests", type="string", pattern=PATH, description="where scan manifests go"
        ),
    },
    tags=["pfs", "example"],
) as dag:
    scan = PfsScanOperator(
        task_id="scan_dataset",
        src="{{ params.dataset }}",
        manifest="{{ params.manifests }}/{{ dag.dag_id }}-{{ ts_nodash }}",
        overwrite=True,
        allowed_roots=ROOTS,
    )
    copy = PfsCopyOperator(
        task_id="copy_to_scratch",
        manifest=scan.output,  # the scan's manifest URI (the XCom holds counts, never file lists)
        where=SELECT,
        dst="{{ params.scratch }}",
        update=True,  # a rerun skips identical files and replaces changed ones (only what changed is copied)
        allowed_roots=ROOTS,
    )
    verify = PfsVerifyOperator(
        task_id="verify",
        src_manifest=scan.output,  # the same rows, checksummed at the source
        where=SELECT,  # selects on both sides: scratch's other files are not "extra"
        dst="{{ params.scratch }}",
        outlets=[STAGED],  # the asset event (same, different, missing, files, bytes) once verified
        allowed_roots=ROOTS,
    )
    scan >> copy >> verify


with DAG("use_staged_dataset", schedule=[STAGED], catchup=False, tags=["pfs", "example"]) as consumer:

    @task(inlets=[STAGED])
    def report(*, triggering_asset_events=None) -> dict:
        """A downstream DAG sees the counts the verify task put on the asset event."""
        events = list(triggering_asset_events[STAGED]) if triggering_asset_events else []
        return events[-1].extra if events else {}

    report()
