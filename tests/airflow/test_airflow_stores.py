"""Object stores from Airflow: an ObjectStoragePath with its storage options (what a DAG author writes) and
templated storage_options, through scan, cp and rm on obstore (operators.stores maps the fsspec-style options
once), in one dag.test() against a real S3 server (moto)."""

from __future__ import annotations

import os
import uuid

import obstore
import pyarrow.parquet as pq

from operators.stores import store_of

from .conftest import DAGS, load_dag, run_states, xcom_results

DAG_FILE = """
import os
import pendulum
from airflow.sdk import DAG, ObjectStoragePath, Param

from airflow_pfs.operators import PfsCopyOperator, PfsRemoveOperator, PfsScanOperator

# set by the test; a DAG folder parsed by another test's run must still import this file cleanly
ENDPOINT = os.environ.get("PFS_TEST_S3_ENDPOINT", "http://127.0.0.1:9")
BUCKET = os.environ.get("PFS_TEST_S3_BUCKET", "unset")
OPTIONS = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": ENDPOINT}}

with DAG(
    "pfs_test_stores",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"out": Param("/nonexistent", type="string"), "endpoint": Param("", type="string")},
) as dag:
    scan = PfsScanOperator(task_id="scan", src=ObjectStoragePath(f"s3://{BUCKET}/t", **OPTIONS),
                           manifest="{{ params.out }}/m")
    copy = PfsCopyOperator(task_id="copy", src=f"s3://{BUCKET}/t/", dst="{{ params.out }}/copy",
                           storage_options={"key": "testing", "secret": "testing",
                                            "client_kwargs": {"endpoint_url": "{{ params.endpoint }}"}})
    remove = PfsRemoveOperator(task_id="remove", manifest=scan.output, where="path LIKE 'd/%'",
                               storage_options=OPTIONS)
    scan >> copy >> remove
"""


def test_scan_copy_and_remove_on_s3_from_a_dag(airflow_db, s3_server, s3fs_fs, tmp_path, monkeypatch):
    endpoint = s3_server["client_kwargs"]["endpoint_url"]
    bucket = f"af{uuid.uuid4().hex[:10]}"
    s3fs_fs.mkdir(bucket)
    store = store_of("s3", bucket, s3_server)
    want = {"a.txt": b"a", "d/b.bin": os.urandom(3000), "d/e/c.txt": b"c" * 10}
    for key, data in want.items():
        obstore.put(store, f"t/{key}", data)
    monkeypatch.setenv("PFS_TEST_S3_ENDPOINT", endpoint)
    monkeypatch.setenv("PFS_TEST_S3_BUCKET", bucket)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (DAGS / "pfs_test_stores.py").write_text(DAG_FILE)
    out = tmp_path / "out"
    out.mkdir()
    dag_run = load_dag("pfs_test_stores.py", "pfs_test_stores").test(run_conf={"out": str(out), "endpoint": endpoint})
    assert run_states(dag_run) == {"scan": "success", "copy": "success", "remove": "success"}
    rows = {r["path"]: r for r in pq.read_table(out / "m").to_pylist()}
    assert {p for p, r in rows.items() if r["type"] == "file"} == set(want)
    copied = {str(p.relative_to(out / "copy")): p.read_bytes() for p in (out / "copy").rglob("*") if p.is_file()}
    assert copied == want
    left = sorted(m["path"] for page in obstore.list(store, "t") for m in page)
    assert left == ["t/a.txt"], left  # the rows the where clause chose are gone, the rest kept
    assert xcom_results(dag_run)["remove"]["removed_files"] == 2
