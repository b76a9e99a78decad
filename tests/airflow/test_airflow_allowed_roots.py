"""A run's conf cannot widen what a DAG touches (issue 44, item 1): the examples pin allowed roots
(``PFS_EXAMPLE_ROOTS``, the test's temp directory here) and constrain their path Params, the operators
refuse a place outside the roots before any I/O (after resolving ``..`` and symbolic links), and the
engine checks again where the job runs, with the tree each input manifest recorded."""

from __future__ import annotations

import pytest

from .conftest import load_dag, run_states


@pytest.fixture
def victim(tmp_path_factory):
    """A tree outside the allowed roots, with files that must survive every attack."""
    root = tmp_path_factory.mktemp("victim")
    (root / "keep").mkdir()
    for i in range(3):
        (root / "keep" / f"important{i}.txt").write_text("precious")
    return root


def contents(root) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_nightly_purge_conf_cannot_leave_its_roots(airflow_db, dask_processes, tmp_path, victim):
    """'..' in the scratch param is refused by the Param's pattern; a symbolic link inside the root
    that points at the victim is refused by the scan's allowed roots: nothing is listed or removed."""
    before = contents(victim)
    climbing = {"scratch": f"{tmp_path}/../{victim.name}", "manifests": str(tmp_path / "m"), "days": 1}
    dag = load_dag("nightly_purge.py", "pfs_nightly_purge")
    with pytest.raises(Exception, match="Invalid input for param scratch"):
        dag.test(run_conf=climbing)
    (tmp_path / "scratch").symlink_to(victim)
    linked = {**climbing, "scratch": str(tmp_path / "scratch")}
    dag_run = dag.test(run_conf=linked)
    assert run_states(dag_run) == {"scan_scratch": "failed", "dry_run": "upstream_failed", "purge": "upstream_failed"}
    assert contents(victim) == before
    assert not (tmp_path / "m").exists()  # refused before any I/O: not even the manifest directory


def test_archive_landed_conf_cannot_overwrite_a_victim(airflow_db, dask_processes, tmp_path, victim):
    """landing/archive pointed at a victim (the issue's "precious" -> "ATTACKER"): refused."""
    attack = tmp_path / "landing" / "keep"
    attack.mkdir(parents=True)
    for i in range(3):
        (attack / f"important{i}.txt").write_text("ATTACKER")
    before = contents(victim)
    conf = {"landing": str(tmp_path / "landing"), "manifest": str(tmp_path / "m"), "archive": str(victim)}
    dag_run = load_dag("landed_data.py", "pfs_archive_landed").test(run_conf=conf)
    states = run_states(dag_run)
    assert states["scan_landing"] == "success"
    assert states["archive_part"] == "failed" and states["verify_archive"] != "success", states
    assert contents(victim) == before


def test_stage_dataset_conf_cannot_read_or_write_outside(airflow_db, dask_processes, tmp_path, victim):
    """A dataset outside the roots (read: staged where the attacker reads it) is refused at the scan."""
    conf = {"dataset": str(victim), "scratch": str(tmp_path / "out"), "manifests": str(tmp_path / "m")}
    dag_run = load_dag("stage_dataset.py", "pfs_stage_dataset").test(run_conf=conf)
    assert run_states(dag_run)["scan_dataset"] == "failed"
    assert not (tmp_path / "out").exists() and not (tmp_path / "m").exists()


def test_wait_for_manifest_conf_cannot_point_at_another_manifest(airflow_db, dask_processes, tmp_path, victim):
    """A manifest outside the roots is refused by the sensor before it is read; a manifest inside the
    roots that recorded a tree outside them (copied in by the attacker) is refused by the engine."""
    from distributed import Client

    from dask_pfs import scan

    with Client(dask_processes, set_as_default=False) as client:
        scan(victim, victim / "m", client=client)
        scan(victim, tmp_path / "forged", client=client)  # inside the roots, records the victim's tree
    conf = {"manifest": str(victim / "m"), "where": "type = 'file'", "min_count": 1, "archive": str(tmp_path / "a")}
    dag = load_dag("landed_data.py", "pfs_wait_for_manifest")
    dag_run = dag.test(run_conf=conf)
    assert run_states(dag_run)["wait_for_manifest"] == "failed"
    dag_run = dag.test(run_conf={**conf, "manifest": str(tmp_path / "forged")})
    states = run_states(dag_run)
    assert states["wait_for_manifest"] == "success" and states["copy_part"] == "failed", states
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").rglob("important*"))


def test_credentials_in_urls_are_redacted(airflow_db, tmp_path, caplog):
    """``sftp://bob:Pa55w0rdXYZ@host/x`` (issue 44, item 6): the task's failure and its log lines carry
    ``sftp://***@host/x``, never the password."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.operators import PfsScanOperator

    from .conftest import _free_port

    url = f"sftp://bob:Pa55w0rdXYZ@127.0.0.1:{_free_port()}/data"  # nothing listens: the connection fails
    op = PfsScanOperator(task_id="scan", path=url, manifest=str(tmp_path / "m"), pfs_dask_conn_id="pfs_local")
    with pytest.raises(AirflowException) as exc:
        op.execute({"outlet_events": {}})
    assert "Pa55w0rdXYZ" not in str(exc.value) and exc.value.__cause__ is None
    assert "sftp://***@127.0.0.1" in str(exc.value) or "127.0.0.1" in str(exc.value), str(exc.value)
    assert "Pa55w0rdXYZ" not in caplog.text


def test_manifest_where_runs_under_the_sql_bounds(tmp_path, monkeypatch, dask_client):
    """A where-clause that ``pfs query`` stops (issue 44, item 4) is stopped the same way in
    ``PfsManifest.count``/``partitions`` and in the deferrable sensor's trigger: one line, "refused"."""
    import asyncio
    import time

    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.data_triggers import PfsManifestTrigger
    from airflow_pfs.manifests import PfsManifest
    from dask_pfs import scan

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "f").write_text("x")
    scan(tmp_path / "t", tmp_path / "m", client=dask_client)
    monkeypatch.setenv("PFS_SQL_TIMEOUT", "3")
    monkeypatch.setenv("PFS_SQL_MEMORY_LIMIT", "512MB")
    heavy = "list_aggregate(range(200000000), 'sum') > 0"
    manifest = PfsManifest(str(tmp_path / "m"))
    for call in (lambda: manifest.count(heavy), lambda: manifest.partitions(heavy, n=2)):
        t0 = time.monotonic()
        with pytest.raises(AirflowException, match=r"refused|stopped after") as exc:
            call()
        assert time.monotonic() - t0 < 60 and "\n" not in str(exc.value)
    event = asyncio.run(anext(PfsManifestTrigger(str(tmp_path / "m"), heavy, 1, poll_interval=0.1).run()))
    assert event.payload["status"] == "error" and "PFS_SQL" in event.payload["error"]
