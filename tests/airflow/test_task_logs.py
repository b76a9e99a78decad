"""A task's whole output ends clean: an embedded LocalCluster closing at the end of each task logs no
traceback (``CommClosedError`` of a worker stream the closing scheduler cut), and the process exits
without nanobind's leak report.  Run in a process of its own under ``dag.test()``, so that the check
reads everything, to the process's exit."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import DAGS, REPO
from .test_airflow_provider import make_source

NOISE = ("Traceback", "CommClosedError", "nanobind: leaked", "Stream is closed", " ERROR ", "[error")

RUN = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("pfs_test_dags_clean", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
run = module.pfs_local_clean.test(run_conf={"src": sys.argv[2], "out": sys.argv[3]})
print("pfs-test-state", run.state)
"""


def test_task_logs_end_clean_on_embedded_cluster(airflow_db, tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    make_source(src)
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(DAGS / "pfs_test_dags.py"), str(src), str(out)],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "pfs-test-state success" in output, output[-6000:]
    assert "copy" in output and "60 files" in output, output[-6000:]  # the tasks' own log lines are in it
    noisy = [line for line in output.splitlines() if any(n in line for n in NOISE)]
    assert not noisy, "\n".join(noisy[:40])
    assert len([p for p in (out / "copy").rglob("*") if p.is_file()]) == 60
