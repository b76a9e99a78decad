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
    chatter = [line for line in output.splitlines() if "distributed." in line and "INFO" in line]
    assert not chatter, "\n".join(chatter[:20])  # the cluster the task started keeps its INFO lines to itself
    assert len([p for p in (out / "copy").rglob("*") if p.is_file()]) == 60


SMALL_RUN = """
import importlib.util, sys
import distributed.deploy.spec as spec_module

started = []  # every Dask cluster this process starts (LocalCluster is a SpecCluster)
real_init = spec_module.SpecCluster.__init__


def counting_init(self, *args, **kwargs):
    started.append(type(self).__name__)
    real_init(self, *args, **kwargs)


spec_module.SpecCluster.__init__ = counting_init
spec = importlib.util.spec_from_file_location("pfs_test_dags_bare", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
run = module.pfs_no_connection.test(run_conf={"src": sys.argv[2], "out": sys.argv[3]})
for ti in run.get_task_instances():
    print("pfs-test-task", ti.task_id, ti.state)
print("pfs-test-clusters", len(started))
"""


def test_small_task_without_connection_starts_no_cluster(airflow_db, tmp_path):
    """No pfs_dask connection: a small task runs like the CLI, on its driver alone (no cluster starts),
    its log holds pfs's lines and none of Dask's INFO chatter, and results are in it (verify's counts).
    A deferrable task with no scheduler anywhere fails with words about that, not a connection name."""
    src, out = tmp_path / "src", tmp_path / "out"
    make_source(src)
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("AIRFLOW_CONN_PFS_DASK_DEFAULT", "PFS_SCHEDULER")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", SMALL_RUN, str(DAGS / "pfs_test_dags.py"), str(src), str(out)],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    output = done.stdout + done.stderr
    states = dict(line.split()[1:3] for line in output.splitlines() if line.startswith("pfs-test-task "))
    assert states == {"scan": "success", "copy": "success", "verify": "success", "deferred": "failed"}, output[-6000:]
    assert "pfs-test-clusters 0" in output, output[-6000:]
    chatter = [line for line in output.splitlines() if "distributed." in line and "INFO" in line]
    assert not chatter, "\n".join(chatter[:20])
    assert "verify: 60 same" in output or "verify: 63 same" in output, output[-6000:]
    assert "no 'pfs_dask_default' connection is defined and PFS_SCHEDULER is not set" in output, output[-6000:]
    assert len([p for p in (out / "copy").rglob("*") if p.is_file()]) == 60
