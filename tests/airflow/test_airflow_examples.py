"""The examples, run for real: DAGs through dag.test() on the Dask scheduler/worker processes
(the default pfs_dask connection), the notebook script in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .conftest import REPO, asset_events, load_dag, run_states, xcom_results

DAY = 86400


def test_stage_dataset(airflow_db, dask_processes, tmp_path):
    """Only small JPEGs are staged; the copy's counts land on the pfs_staged_dataset asset event."""
    dataset, scratch = tmp_path / "dataset", tmp_path / "scratch"
    wanted = {"a/x.jpg": 100, "a/b/y.JPG": 2000, "c/w.jpg": 5}
    others = {"a/z.png": 100, "c/notes.txt": 10}
    for rel, size in {**wanted, **others}.items():
        (dataset / rel).parent.mkdir(parents=True, exist_ok=True)
        (dataset / rel).write_bytes(b"j" * size)
    with open(dataset / "a" / "big.jpg", "wb") as f:
        f.truncate(11 * 2**20)  # over the 10 MiB limit (sparse: costs nothing)
    conf = {"dataset": str(dataset), "scratch": str(scratch), "manifests": str(tmp_path / "manifests")}
    dag_run = load_dag("stage_dataset.py", "pfs_stage_dataset").test(run_conf=conf)
    assert run_states(dag_run) == {"scan_dataset": "success", "copy_to_scratch": "success", "verify": "success"}
    staged = sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*") if p.is_file())
    assert staged == sorted(wanted)
    assert all((scratch / rel).read_bytes() == (dataset / rel).read_bytes() for rel in wanted)
    copied = xcom_results(dag_run)["copy_to_scratch"]
    assert (copied["files"], copied["bytes"], copied["failed"], copied["exit_code"]) == (3, 2105, 0, 0)
    verified = xcom_results(dag_run)["verify"]
    assert (verified["same"], verified["bytes"], verified["errors"]) == (3, 2105, 0)
    assert verified in asset_events("file:///scratch/pfs/staged-dataset")


def test_nightly_purge(airflow_db, dask_processes, tmp_path):
    """Entries older than `days` go (dry run first, same counts); recent ones and directories stay."""
    scratch = tmp_path / "scratch"
    old = [scratch / "old" / f"o{i}.dat" for i in range(10)] + [scratch / "mixed" / "stale.dat"]
    new = [scratch / "new" / f"n{i}.dat" for i in range(5)] + [scratch / "mixed" / "fresh.dat"]
    for path in old + new:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"s" * 10)
    past = time.time() - 40 * DAY
    for path in old:
        os.utime(path, (past, past))
    conf = {"scratch": str(scratch), "manifests": str(tmp_path / "manifests"), "days": 30, "max_entries": 20}
    dag_run = load_dag("nightly_purge.py", "pfs_nightly_purge").test(run_conf=conf)
    assert run_states(dag_run) == {"scan_scratch": "success", "dry_run": "success", "purge": "success"}
    results = xcom_results(dag_run)
    assert results["dry_run"]["dry_run"] is True and results["dry_run"]["selected"] == len(old)
    assert results["purge"]["selected"] == len(old)
    assert (results["purge"]["removed_files"], results["purge"]["bytes"], results["purge"]["errors"]) == (11, 110, 0)
    assert not any(p.exists() for p in old)
    assert all(p.exists() for p in new) and (scratch / "old").is_dir()


def test_nightly_purge_cap(airflow_db, dask_processes, tmp_path):
    """A selection over max_entries fails the dry run; nothing is removed."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    past = time.time() - 40 * DAY
    for i in range(5):
        (scratch / f"f{i}").write_text("x")
        os.utime(scratch / f"f{i}", (past, past))
    conf = {"scratch": str(scratch), "manifests": str(tmp_path / "manifests"), "days": 30, "max_entries": 3}
    dag_run = load_dag("nightly_purge.py", "pfs_nightly_purge").test(run_conf=conf)
    assert run_states(dag_run) == {"scan_scratch": "success", "dry_run": "failed", "purge": "upstream_failed"}
    assert len(list(scratch.iterdir())) == 5


def test_notebook_scan(dask_processes, tmp_path):
    """The notebook script scans, prints DuckDB summaries and writes the PNG."""
    data = tmp_path / "data"
    for name, count, size in [("images", 12, 50_000), ("logs", 30, 300), ("models", 2, 400_000)]:
        (data / name).mkdir(parents=True)
        for i in range(count):
            (data / name / f"f{i}.{name[:3]}").write_bytes(b"\0" * (size + i))
    (data / "README").write_text("hi")
    png = tmp_path / "summary.png"
    env = {**os.environ, "PFS_SCHEDULER": dask_processes, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "notebook_scan.py"), str(data), str(tmp_path / "m"), str(png)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "files 45  directories 3" in proc.stdout
    assert "models" in proc.stdout.split("top directories:")[1].splitlines()[1]  # the biggest comes first
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
