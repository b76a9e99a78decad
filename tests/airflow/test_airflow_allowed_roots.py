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
