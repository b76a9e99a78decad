"""DAGs of the deployment test (tests/airflow_deploy/): a deferrable copy resumed by the triggerer,
a copy with retries that the test kills mid-copy (the retry resumes from the journal), and a scan and
a copy on an embedded LocalCluster, whose logs must end clean."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_pfs.operators import PfsCopyOperator, PfsScanOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
PARAMS = {"src": Param("/nonexistent", type="string"), "dst": Param("/nonexistent", type="string")}

with DAG("pfs_deploy_deferred", schedule=None, start_date=START, catchup=False, params=PARAMS):
    PfsCopyOperator(
        task_id="copy",
        src="{{ params.src }}/",
        dst="{{ params.dst }}",
        deferrable=True,  # the job runs on the Dask cluster; the triggerer waits for it
        poll_interval=1,
        progress_interval=2,
    )

with DAG("pfs_deploy_retry", schedule=None, start_date=START, catchup=False, params=PARAMS):
    PfsCopyOperator(
        task_id="copy",
        src="{{ params.src }}/",
        dst="{{ params.dst }}",
        threads=2,
        max_ops_per_second=400,  # ~20 s for the test's 8,040 entries: the kill lands mid-copy on any host
        retries=2,
        retry_delay=timedelta(seconds=1),  # a retry resumes from the copy's journal
        progress_interval=1,
    )

with DAG("pfs_deploy_local", schedule=None, start_date=START, catchup=False, params=PARAMS):
    # each task starts and closes an embedded LocalCluster (connection pfs_local): its log must end clean
    scan = PfsScanOperator(
        task_id="scan", src="{{ params.src }}", manifest="{{ params.dst }}-manifest", pfs_dask_conn_id="pfs_local"
    )
    PfsCopyOperator(task_id="copy", manifest=scan.output, dst="{{ params.dst }}", pfs_dask_conn_id="pfs_local")
