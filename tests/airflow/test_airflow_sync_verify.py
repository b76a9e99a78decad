"""PfsSyncOperator and PfsVerifyOperator in one dag.test() on the Dask scheduler/worker processes."""

from __future__ import annotations

import os

from .conftest import DAGS, load_dag, run_states, xcom_results

DAG_FILE = """
import pendulum
from airflow.sdk import DAG, Param

from airflow_pfs.operators import PfsSyncOperator, PfsVerifyOperator

with DAG(
    "pfs_test_sync_verify",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"src": Param("/nonexistent", type="string"), "dst": Param("/nonexistent", type="string")},
) as dag:
    sync = PfsSyncOperator(task_id="sync", src="{{ params.src }}", dst="{{ params.dst }}", delete=True,
                           max_delete="50%", plan="{{ params.dst }}.plan")
    verify = PfsVerifyOperator(task_id="verify", src="{{ params.src }}", dst="{{ params.dst }}")
    sync >> verify
"""


def test_sync_then_verify(airflow_db, dask_processes, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (DAGS / "pfs_test_sync_verify.py").write_text(DAG_FILE)
    src, dst = tmp_path / "src", tmp_path / "dst"
    for rel, data in {"a/1.txt": b"one", "a/2.bin": os.urandom(50_000), "b.txt": b"bee"}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    (dst / "a").mkdir(parents=True)
    (dst / "a/1.txt").write_bytes(b"old one")
    (dst / "stale.txt").write_bytes(b"gone at the source")
    conf = {"src": str(src), "dst": str(dst)}
    dag_run = load_dag("pfs_test_sync_verify.py", "pfs_test_sync_verify").test(run_conf=conf)
    assert run_states(dag_run) == {"sync": "success", "verify": "success"}
    results = xcom_results(dag_run)
    synced = results["sync"]
    # changed: a/1.txt and the directory a (its mtime)
    assert (synced["new"], synced["changed"], synced["extra"], synced["deleted"]) == (2, 2, 1, 1)
    assert synced["plan"] == f"{dst}.plan" and synced["errors"] == 0
    checked = results["verify"]
    assert (checked["same"], checked["files"], checked["errors"], checked["exit_code"]) == (4, 3, 0, 0)
    assert not (dst / "stale.txt").exists() and (dst / "a/1.txt").read_bytes() == b"one"
