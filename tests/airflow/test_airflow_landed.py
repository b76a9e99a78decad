"""examples/landed_data.py through dag.test() on the Dask scheduler/worker processes: the fan-out
over a manifest (mapped copies), the deferrable PfsManifestSensor with a row threshold, and the
OpenLineage events every pfs task emits (captured by the provider's file transport)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time

from .conftest import asset_events, lineage_events, load_dag, xcom_results


def make_landing(root, dirs: int = 3, files: int = 7) -> dict[str, bytes]:
    """``dirs`` directories (one nested) of ``files`` files each; returns {relative path: content}."""
    content = {}
    for d in range(dirs):
        for i in range(files):
            rel = f"run{d}/{'deep/' if d == 0 else ''}f{i:02d}.h5"
            content[rel] = f"{d}-{i}".encode() * (i + 1)
    for rel, data in content.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return content


def task_states(dag_run) -> dict[str, list[str]]:
    """{task_id: [state of each (mapped) instance]}."""
    from airflow.utils.session import create_session

    states: dict[str, list[str]] = {}
    with create_session() as session:
        for ti in sorted(dag_run.get_task_instances(session=session), key=lambda t: t.map_index):
            states.setdefault(ti.task_id, []).append(str(ti.state))
    return states


def test_archive_landed(airflow_db, dask_processes, tmp_path):
    """Scan, split into parts of at most 8 files, one mapped copy per part, verify; each task's
    lineage names the landing tree, the manifest and the archive, with the pfs counts."""
    landing, archive, manifest = tmp_path / "landing", tmp_path / "archive", tmp_path / "manifests" / "landing"
    content = make_landing(landing)
    conf = {"landing": str(landing), "manifest": str(manifest), "archive": str(archive), "max_entries": 8}
    dag_run = load_dag("landed_data.py", "pfs_archive_landed").test(run_conf=conf)

    states = task_states(dag_run)
    assert states["archive_part"] == ["success"] * 3, states  # 21 files in parts of <= 8
    assert states["scan_landing"] == states["split"] == states["verify_archive"] == ["success"]
    assert {str(p.relative_to(archive)): p.read_bytes() for p in archive.rglob("*") if p.is_file()} == content
    results = xcom_results(dag_run)
    assert (results["verify_archive"]["same"], results["verify_archive"]["errors"]) == (len(content), 0)
    # the asset's URI is fixed when the DAG file is parsed (PFS_ARCHIVE, default /archive/landing)
    assert results["verify_archive"] in asset_events("file:///archive/landing")

    (scan,) = lineage_events("pfs_archive_landed.scan_landing", within=str(tmp_path))
    assert [(d["namespace"], d["name"]) for d in scan["inputs"]] == [("file", str(landing))]
    (written,) = scan["outputs"]
    assert (written["namespace"], written["name"]) == ("file", str(manifest))
    assert written["outputFacets"]["outputStatistics"]["rowCount"] == len(content) + 4  # files + 4 directories
    assert "path" in [f["name"] for f in written["facets"]["schema"]["fields"]]
    facet = scan["run"]["facets"]["pfs"]
    assert facet["engine"] == "scan" and facet["exitCode"] == 0
    assert (facet["counts"]["files"], facet["counts"]["directories"]) == (len(content), 4)

    copies = lineage_events("pfs_archive_landed.archive_part", within=str(tmp_path))
    assert len(copies) == 3
    for event in copies:
        names = sorted((d["namespace"], d["name"]) for d in event["inputs"])
        assert names == [("file", str(landing)), ("file", str(manifest))]
        assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("file", str(archive))]
    files = [e["outputs"][0]["outputFacets"]["outputStatistics"]["fileCount"] for e in copies]
    assert files == [7, 7, 7]  # 21 files in ceil(21 / 8) = 3 parts of equal size
    assert sum(e["run"]["facets"]["pfs"]["counts"]["bytes"] for e in copies) == sum(map(len, content.values()))

    (verify,) = lineage_events("pfs_archive_landed.verify_archive", within=str(tmp_path))
    assert sorted(d["name"] for d in verify["inputs"]) == sorted([str(archive), str(manifest)])
    assert verify["run"]["facets"]["pfs"]["counts"]["same"] == len(content)


def test_wait_for_manifest(airflow_db, dask_processes, tmp_path, monkeypatch):
    """The sensor defers while the manifest selects too few rows; a rescan that adds the missing
    file fires it, and the selection is copied in 3 mapped parts."""
    from distributed import Client

    from dask_pfs import scan

    landing, archive, manifest = tmp_path / "landing", tmp_path / "archive", tmp_path / "manifests" / "run42"
    content = make_landing(landing, dirs=2, files=4)  # 8 .h5 files
    (landing / "notes.txt").write_text("not selected")
    with Client(dask_processes, set_as_default=False) as client:
        scan(landing, manifest, client=client)
    where = "type = 'file' AND name LIKE '%.h5'"
    conf = {"manifest": str(manifest), "where": where, "min_count": 9, "archive": str(archive), "parts": 3}
    monkeypatch.setenv("PFS_POKE_SECONDS", "0.2")
    seen = {}

    def land_the_ninth_file():
        """Once the sensor is deferred, add a 9th file and rescan: the trigger then fires."""
        deadline = time.monotonic() + 120
        with sqlite3.connect(f"file:{airflow_db / 'airflow.db'}?mode=ro", uri=True, timeout=30) as db:
            while time.monotonic() < deadline and "deferred" not in seen:
                row = db.execute(  # this run's sensor: the newest (ids are UUIDv7), not an earlier test's run
                    "SELECT state, next_method FROM task_instance WHERE dag_id = ? AND task_id = ? "
                    "ORDER BY id DESC LIMIT 1",
                    ("pfs_wait_for_manifest", "wait_for_manifest"),
                ).fetchone()
                if row and row[1] == "execute_complete":  # set when it deferred
                    seen["deferred"] = row[0]
                time.sleep(0.2)
        content["run1/late.h5"] = b"late"
        (landing / "run1" / "late.h5").write_bytes(b"late")
        with Client(dask_processes, set_as_default=False) as client:
            scan(landing, manifest, client=client, overwrite=True)

    writer = threading.Thread(target=land_the_ninth_file, daemon=True)
    writer.start()
    dag_run = load_dag("landed_data.py", "pfs_wait_for_manifest").test(run_conf=conf)
    writer.join(timeout=60)

    assert "deferred" in seen, seen
    states = task_states(dag_run)
    assert states == {"wait_for_manifest": ["success"], "split_selection": ["success"], "copy_part": ["success"] * 3}
    results = xcom_results(dag_run)
    assert results["wait_for_manifest"]["selected"] == 9
    assert results["wait_for_manifest"]["manifest"] == str(manifest)
    copied = {str(p.relative_to(archive)): p.read_bytes() for p in archive.rglob("*") if p.is_file()}
    assert copied == content  # the .h5 files, the late one included; notes.txt was not selected
    copies = lineage_events("pfs_wait_for_manifest.copy_part", within=str(tmp_path))
    assert sorted(e["run"]["facets"]["pfs"]["counts"]["files"] for e in copies) == [3, 3, 3]
    assert json.dumps(results["split_selection"])  # the selections are plain JSON
