"""The provider under a real deployment (deployment.py): PostgreSQL, scheduler with LocalExecutor
(parallelism 8), triggerer, dag-processor and api-server as separate processes; the example DAGs
triggered and checked through the REST API.  One deployment serves every check of this module."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from ..conftest import make_balanced, run_pfs, tree_digest
from .deployment import REPO, Deployment, Postgres, deploy_env, free_port, start_dask, stop_all, temp_root

pytestmark = [pytest.mark.airflow_deploy, pytest.mark.timeout(1500)]

DAG_FILES = [
    REPO / "examples" / "landed_data.py",
    REPO / "examples" / "stage_dataset.py",
    REPO / "tests" / "airflow_deploy" / "dags" / "pfs_deploy_dags.py",
]


@pytest.fixture(scope="module")
def deployment():
    root = temp_root()
    pg = Postgres(root / "pg")
    dask_procs = []
    dep = None
    try:
        db_url = pg.start()
        home, data = root / "airflow", root / "data"
        logs = home / "logs-processes"
        for d in (home / "dags", logs, data):
            d.mkdir(parents=True)
        for src in DAG_FILES:
            shutil.copy(src, home / "dags" / src.name)
        (home / "dags" / "readme_fan_out.py").write_text(readme_dag(data))
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PFS_"))}
        address, dask_procs = start_dask(logs, {**base_env, "PYTHONPATH": str(REPO)})
        port = free_port()
        landing = data / "landing"
        make_balanced(landing, dirs=3, files_per_dir=20)
        extra = {
            "PFS_LANDING": str(landing),
            "PFS_LANDING_MANIFEST": str(data / "landing-manifest"),
            "PFS_ARCHIVE": str(data / "landing-archive"),
            "PFS_WATCH_SECONDS": "2",
            "PFS_POKE_SECONDS": "2",
            "PFS_EXAMPLE_ROOTS": str(data),  # what a run of the examples may touch (their allowed_roots)
        }
        dep = Deployment(home, f"http://127.0.0.1:{port}", deploy_env(home, db_url, port, address, extra), logs)
        dep.data, dep.dask = data, address  # type: ignore[attr-defined]
        dep.airflow("db", "migrate")
        # the api-server first: tasks report to its execution API from their first second (the
        # watcher's first event may schedule a run as soon as the triggerer is up)
        dep.start("api-server", "airflow", "api-server", "--port", str(port))
        dep.wait_api()
        dep.login()
        for name in ("scheduler", "triggerer", "dag-processor"):
            dep.start(name, "airflow", name)
        yield dep
    finally:
        if dep is not None:
            dep.stop()
        stop_all(dask_procs)
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


def readme_dag(data: Path) -> str:
    """The fan-out DAG of examples/README.md as a reader copies it, with this test's places for its paths."""
    text = (REPO / "examples" / "README.md").read_text()
    section = text[text.index("### Fan-out over a manifest") :]
    code = section[section.index("```python\n") + len("```python\n") :]
    code = code[: code.index("```")]
    for path, mine in README_PATHS.items():
        assert path in code, f"examples/README.md's fan-out DAG no longer uses {path}"
        code = code.replace(path, str(data / mine))
    return code


README_PATHS = {
    "/data/pfs-manifests/landing": "readme-manifest",
    "/data/landing": "readme-landing",
    "/archive/landing": "readme-archive",
}


def _interval(ti: dict) -> tuple[float, float]:
    return (datetime.fromisoformat(ti["start_date"]).timestamp(), datetime.fromisoformat(ti["end_date"]).timestamp())


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals running at one moment."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def _wait_state(dep: Deployment, dag_id: str, run_id: str, task_id: str, wanted: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while (state := dep.states(dag_id, run_id).get(task_id)) != wanted:
        assert state not in ("failed", "upstream_failed"), dep.failure_report(dag_id, run_id)
        assert time.monotonic() < deadline, f"{task_id} still {state}\n{dep.log_tail()}"
        time.sleep(1)


def test_sensor_deferred_then_mapped_copies_at_once(deployment: Deployment):
    """``pfs_wait_for_manifest`` triggered with ``airflow dags trigger``: the deferrable sensor waits in
    the triggerer until the manifest appears, then 8 mapped copies into one archive run at once."""
    dep, data = deployment, deployment.data  # type: ignore[attr-defined]
    src, manifest, archive = data / "fan-src", data / "fan-manifest", data / "fan-archive"
    make_balanced(src, dirs=8, files_per_dir=40)
    dep.wait_dag("pfs_wait_for_manifest")
    conf = {"manifest": str(manifest), "where": "type = 'file'", "min_count": 1, "archive": str(archive), "parts": 8}
    out = dep.airflow("dags", "trigger", "pfs_wait_for_manifest", "-c", json.dumps(conf), "-o", "json").stdout
    run_id = json.loads(out[out.index("[{") :])[0]["dag_run_id"]
    _wait_state(dep, "pfs_wait_for_manifest", run_id, "wait_for_manifest", "deferred")
    run_pfs("scan", src, "-o", manifest, "--scheduler", dep.dask, "--no-progress", check=True)  # type: ignore[attr-defined]
    run = dep.wait_run("pfs_wait_for_manifest", run_id, timeout=900)
    states = dep.states("pfs_wait_for_manifest", run_id)
    assert run["state"] == "success", dep.failure_report("pfs_wait_for_manifest", run_id)
    parts = [ti for ti in dep.task_instances("pfs_wait_for_manifest", run_id) if ti["task_id"] == "copy_part"]
    assert len(parts) == 8 and all(ti["state"] == "success" for ti in parts), states
    assert _most_at_once([_interval(ti) for ti in parts]) >= 2, "mapped copies ran one at a time"
    results = [dep.xcom("pfs_wait_for_manifest", run_id, "copy_part", ti["map_index"]) for ti in parts]
    assert sum(r["files"] for r in results) == 8 * 40 and not any(r["errors"] for r in results)
    selections = dep.xcom("pfs_wait_for_manifest", run_id, "split_selection")
    assert all("\n" not in s["where"] for s in selections), selections
    assert tree_digest(archive) == tree_digest(src)
    part_log = dep.log("pfs_wait_for_manifest", run_id, "copy_part", map_index=parts[0]["map_index"])
    assert f"{results[0]['files']:,} files" in part_log and "0 entries" not in part_log  # the real counts
    assert "nanobind: leaked" not in part_log and "CommClosedError" not in part_log


def test_tree_watcher_fires_runs(deployment: Deployment):
    """``pfs_archive_landed``: the AssetWatcher's first event (no manifest yet) archives the landing
    tree; files landing later fire another run, which archives them too."""
    dep, data = deployment, deployment.data  # type: ignore[attr-defined]
    landing, archive = data / "landing", data / "landing-archive"
    dep.wait_dag("pfs_archive_landed")
    deadline = time.monotonic() + 600
    while not [r for r in dep.runs("pfs_archive_landed") if r["state"] == "success"]:
        assert time.monotonic() < deadline, f"no run of pfs_archive_landed\n{dep.log_tail()}"
        time.sleep(2)
    assert tree_digest(archive) == tree_digest(landing)
    first = len(dep.runs("pfs_archive_landed"))
    while any(r["state"] not in ("success", "failed") for r in dep.runs("pfs_archive_landed")):
        time.sleep(1)
    (landing / "new").mkdir()
    for i in range(5):
        (landing / "new" / f"landed{i}.dat").write_bytes(b"n" * (100 + i))
    deadline = time.monotonic() + 600
    while not (archive / "new" / "landed4.dat").exists() or any(
        r["state"] not in ("success", "failed") for r in dep.runs("pfs_archive_landed")
    ):
        assert time.monotonic() < deadline, f"landed files not archived\n{dep.log_tail()}"
        time.sleep(2)
    runs = dep.runs("pfs_archive_landed")
    assert len(runs) > first and all(r["state"] == "success" for r in runs), runs
    assert all(r["run_type"] == "asset_triggered" for r in runs), runs
    assert tree_digest(archive) == tree_digest(landing)


def test_deferrable_copy_resumed_by_triggerer(deployment: Deployment):
    dep, data = deployment, deployment.data  # type: ignore[attr-defined]
    src, dst = data / "deferred-src", data / "deferred-dst"
    make_balanced(src, dirs=4, files_per_dir=30)
    dep.wait_dag("pfs_deploy_deferred")
    run_id = dep.trigger("pfs_deploy_deferred", {"src": str(src), "dst": str(dst)})
    run = dep.wait_run("pfs_deploy_deferred", run_id)
    assert run["state"] == "success", dep.log("pfs_deploy_deferred", run_id, "copy")[-6000:]
    result = dep.xcom("pfs_deploy_deferred", run_id, "copy")
    assert result["files"] == 4 * 30 and result["errors"] == 0
    log = dep.log("pfs_deploy_deferred", run_id, "copy")
    assert "pfs job pfs-job-pfs_deploy_deferred.copy-" in log and "submitted" in log, log
    assert tree_digest(dst) == tree_digest(src)
    # lineage of the job the cluster drove: the task's COMPLETE event names both trees, with the counts
    event = _wait_lineage(dep, "pfs_deploy_deferred.copy")[-1]
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [("file", str(src))]
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("file", str(dst))]
    assert event["outputs"][0]["outputFacets"]["outputStatistics"]["fileCount"] == 4 * 30
    assert event["run"]["facets"]["pfs"]["counts"]["files"] == 4 * 30


def _wait_lineage(dep: Deployment, job: str, timeout: float = 120) -> list[dict]:
    """The events of ``job`` (emitted in a thread as the task ends: they may land a moment after its state)."""
    deadline = time.monotonic() + timeout
    while not (events := dep.lineage(job)) and time.monotonic() < deadline:
        time.sleep(1)
    return events


def test_task_killed_mid_copy_is_retried_and_resumes(deployment: Deployment):
    """SIGKILL the task's process once the copy has journaled a chunk: the retry resumes (skips the
    journaled chunks) and the destination ends byte-identical to the source."""
    dep, data = deployment, deployment.data  # type: ignore[attr-defined]
    src, dst = data / "retry-src", data / "retry-dst"
    make_balanced(src, dirs=40, files_per_dir=200, size=2000)
    dep.wait_dag("pfs_deploy_retry")
    run_id = dep.trigger("pfs_deploy_retry", {"src": str(src), "dst": str(dst)})
    deadline = time.monotonic() + 600
    while not any(os.path.getsize(p) for p in glob.glob(f"{dst}/.pfs-journal-*/done.jsonl")):
        ti = dep.task_instances("pfs_deploy_retry", run_id)[0]
        assert ti["state"] not in ("success", "failed"), f"the copy ended before it could be killed: {ti}"
        assert time.monotonic() < deadline, dep.log_tail()
        time.sleep(0.05)
    ti = dep.task_instances("pfs_deploy_retry", run_id)[0]
    assert ti["state"] == "running" and ti["pid"], ti
    os.kill(ti["pid"], signal.SIGKILL)
    run = dep.wait_run("pfs_deploy_retry", run_id, timeout=900)
    ti = dep.task_instances("pfs_deploy_retry", run_id)[0]
    assert run["state"] == "success" and ti["try_number"] == 2, (ti, dep.log_tail())
    result = dep.xcom("pfs_deploy_retry", run_id, "copy")
    assert result["resumed"] >= 1 and result["errors"] == 0, result
    assert tree_digest(dst) == tree_digest(src)
    assert not glob.glob(f"{dst}/.pfs-journal-*") and not glob.glob(f"{dst}/**/.*.pfs-tmp-*", recursive=True)


NOISE = ("Traceback", "error_detail", "CommClosedError", "nanobind: leaked", "Stream is closed")


def test_embedded_cluster_tasks_log_clean(deployment: Deployment):
    """A scan and a copy with the local connection (``pfs_local``) as LocalExecutor runs them: as the CLI,
    the driver runs a small job's tasks itself (a LocalCluster only for a job that lasts, issue 46); each
    task's log, to its process's exit, holds no traceback, CommClosedError or leak report."""
    dep, data = deployment, deployment.data  # type: ignore[attr-defined]
    src, dst = data / "local-src", data / "local-dst"
    make_balanced(src, dirs=3, files_per_dir=20)
    dep.wait_dag("pfs_deploy_local")
    run_id = dep.trigger("pfs_deploy_local", {"src": str(src), "dst": str(dst)})
    run = dep.wait_run("pfs_deploy_local", run_id)
    assert run["state"] == "success", dep.failure_report("pfs_deploy_local", run_id)
    assert tree_digest(dst) == tree_digest(src)
    for task_id in ("scan", "copy"):
        log = dep.log("pfs_deploy_local", run_id, task_id)
        assert "Dask cluster: none unless the job lasts" in log, log[-4000:]
        noisy = [line for line in log.splitlines() if any(n in line for n in NOISE) or '"level": "error"' in line]
        assert not noisy, "\n".join(noisy[:40])


def test_dag_from_the_readme_runs_unchanged(deployment: Deployment):
    """examples/README.md's fan-out DAG (imports and all), only its paths pointed at this test's tree."""
    dep, data = deployment, deployment.data  # type: ignore[attr-defined]
    landing, archive = data / "readme-landing", data / "readme-archive"
    make_balanced(landing, dirs=3, files_per_dir=20)
    dep.wait_dag("archive_in_parts")
    run_id = dep.trigger("archive_in_parts", {})
    run = dep.wait_run("archive_in_parts", run_id, timeout=900)
    assert run["state"] == "success", dep.states("archive_in_parts", run_id)
    assert tree_digest(archive) == tree_digest(landing)
