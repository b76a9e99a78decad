"""DAGs the provider tests run with dag.test(): paths come in as params (run_conf)."""

from __future__ import annotations

import os

from airflow.sdk import DAG, Asset, ObjectStoragePath, task

from airflow_pfs.operators import PfsCopyOperator, PfsRemoveOperator, PfsScanOperator, PfsVerifyOperator

MANIFEST_ASSET = Asset(name="pfs_test_manifest", uri="file:///pfs-test/manifest")
DEFERRED_ASSET = Asset(name="pfs_test_deferred", uri="file:///pfs-test/deferred")
PARAMS = {"src": "/nonexistent", "out": "/nonexistent", "where": "false"}
LOCAL = {"pfs_dask_conn_id": "pfs_local", "progress_interval": 0}


@task
def count_rows(result: dict) -> dict:
    """Read the manifest the scan wrote (the XCom holds only its URI and counts)."""
    from dask_pfs import open_manifest
    from dask_pfs.manifests.sql import connect

    manifest = open_manifest(result["manifest"])
    rows = connect(manifest).execute(f"SELECT count(*) FROM {manifest.relation_sql()}").fetchall()[0][0]
    return {"rows": rows, "entries": result["entries"]}


with DAG("pfs_local", schedule=None, params=PARAMS) as pfs_local:
    scan = PfsScanOperator(
        task_id="scan", src="{{ params.src }}", manifest="{{ params.out }}/scan", outlets=[MANIFEST_ASSET], **LOCAL
    )
    count_rows(scan.output)
    PfsRemoveOperator(task_id="remove_over_cap", manifest=scan.output, where="type = 'file'", max_entries=5, **LOCAL)
    # the copy's cap reaches the engine: 60 files are over 5 (nothing written) and within 60 (all copied)
    for task_id, cap in (("copy_over_cap", 5), ("copy_at_cap", 60)):
        PfsCopyOperator(
            task_id=task_id, manifest=scan.output, where="type = 'file'", max_entries=cap,
            dst=f"{{{{ params.out }}}}/{task_id}", **LOCAL,
        )  # fmt: skip
    # job-wide caps reach the engine (60 files and their dirs at 8 ops/s: 9 s or more); a bad one fails before I/O
    PfsCopyOperator(task_id="copy_paced", src="{{ params.src }}/", dst="{{ params.out }}/copy_paced",
                    max_ops_per_second=8, **LOCAL)  # fmt: skip
    PfsCopyOperator(task_id="copy_bad_bandwidth", src="{{ params.src }}/", dst="{{ params.out }}/copy_bad_bandwidth",
                    max_bandwidth="fast", **LOCAL)  # fmt: skip
    PfsRemoveOperator(task_id="remove_path_and_manifest", path="{{ params.src }}", manifest=scan.output, **LOCAL)
    PfsRemoveOperator(task_id="remove_bad_where", manifest=scan.output, where="no_such_column > 1", **LOCAL)
    # a templated where from a run's conf may only filter: a second statement is refused, nothing is written
    PfsRemoveOperator(task_id="remove_injected_where", manifest=scan.output, where="{{ params.where }}", **LOCAL)
    PfsScanOperator(task_id="relative_path", src="data/project", manifest="{{ params.out }}/rel", **LOCAL)
    PfsScanOperator(task_id="missing_root", src="{{ params.src }}/no-such-dir", manifest="{{ params.out }}/x", **LOCAL)
    PfsScanOperator(
        task_id="deferrable_local", src="{{ params.src }}", manifest="{{ params.out }}/d", deferrable=True, **LOCAL
    )


with DAG("pfs_remote", schedule=None, params=PARAMS) as pfs_remote:
    # the default pfs_dask connection: the test points it at a separately started scheduler
    PfsScanOperator(task_id="scan_sync", src="{{ params.src }}", manifest="{{ params.out }}/sync")
    deferred = PfsScanOperator(
        task_id="scan_deferred",
        src="{{ params.src }}",
        manifest="{{ params.out }}/deferred",
        deferrable=True,
        poll_interval=0.2,
        progress_interval=0.2,
        outlets=[DEFERRED_ASSET],
    )
    count_rows.override(task_id="count_deferred")(deferred.output)
    PfsScanOperator(
        task_id="deferred_missing",
        src="{{ params.src }}/no-such-dir",
        manifest="{{ params.out }}/missing",
        deferrable=True,
        poll_interval=0.2,
    )
    # not deferrable, but the path is not on this host: the driver runs on the cluster (--driver auto)
    PfsScanOperator(task_id="driver_on_cluster", src="{{ params.src }}/not-here", manifest="{{ params.out }}/nh")
    PfsRemoveOperator(task_id="remove_tree_deferred", path="{{ params.out }}/junk", deferrable=True, poll_interval=0.2)
    # the engine counts the selection and caps it; the count reaches XCom through execute_complete
    PfsRemoveOperator(
        task_id="remove_rows_deferred",
        manifest=deferred.output,
        where="type = 'file'",
        max_entries="100%",
        dry_run=True,
        deferrable=True,
        poll_interval=0.2,
    )
    PfsScanOperator(
        task_id="scan_object_storage_path",
        src=ObjectStoragePath(f"file://{os.environ.get('PFS_TEST_SRC', '/nonexistent')}"),
        manifest="{{ params.out }}/osp",
    )


with DAG("pfs_local_clean", schedule=None, params=PARAMS) as pfs_local_clean:
    # each task starts and closes its own embedded LocalCluster: its log must end clean (test_task_logs)
    clean_scan = PfsScanOperator(task_id="scan", src="{{ params.src }}", manifest="{{ params.out }}/scan", **LOCAL)
    PfsCopyOperator(task_id="copy", manifest=clean_scan.output, dst="{{ params.out }}/copy", **LOCAL)


with DAG("pfs_no_connection", schedule=None, params=PARAMS) as pfs_no_connection:
    # no pfs_dask connection at all: tasks run as the CLI does, small jobs on the driver alone (test_task_logs)
    bare_scan = PfsScanOperator(task_id="scan", src="{{ params.src }}", manifest="{{ params.out }}/scan")
    bare_copy = PfsCopyOperator(task_id="copy", manifest=bare_scan.output, dst="{{ params.out }}/copy")
    bare_copy >> PfsVerifyOperator(task_id="verify", src_manifest=bare_scan.output, dst="{{ params.out }}/copy/")
    PfsScanOperator(task_id="deferred", src="{{ params.src }}", manifest="{{ params.out }}/d", deferrable=True)
