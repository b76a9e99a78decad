"""dask_pfs.clusters.jobqueue: Slurm clusters through dask-jobqueue.

The job-script tests need no Slurm (the cluster submits nothing with jobs=0). The test marked `slurm` submits
a real job and runs a real scan on its worker; it needs a running Slurm (e.g. root + Debian's slurm-wlm and
munge: `eval "$(examples/slurm/single-node-slurm.sh start)"`) and is skipped when `sinfo` cannot reach one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dask_pfs.clusters import jobqueue
from dask_pfs.clusters.jobqueue import SlurmUnavailableError, start_slurm_cluster

pytest.importorskip("dask_jobqueue")

# The console script (entry point dask_pfs.cli:main) installed beside this interpreter.
PFS_CLI = [sys.executable, "-c", "import sys; from dask_pfs.cli import main; sys.exit(main())"]
NO_DASHBOARD = {"scheduler_options": {"dashboard_address": ":0"}}


@pytest.fixture(scope="module")
def script() -> str:
    cluster = start_slurm_cluster(
        jobs=0,
        cores=8,
        memory="32GiB",
        walltime="02:30:00",
        queue="lustre",
        account="proj42",
        local_directory="/local/scratch/dask",
        processes=2,
        threads=96,
        job_extra_directives=["--constraint=lustre", "--qos=io"],
        python="/shared/venvs/pfs/bin/python",
        **NO_DASHBOARD,
    )
    try:
        return cluster.job_script()
    finally:
        cluster.close()


def test_job_script_carries_the_slurm_options(script: str) -> None:
    lines = script.splitlines()
    sbatch = [line.removeprefix("#SBATCH ").strip() for line in lines if line.startswith("#SBATCH")]
    assert "-J pfs-worker" in sbatch
    assert "-p lustre" in sbatch
    assert "-A proj42" in sbatch
    assert "--cpus-per-task=8" in sbatch
    assert "-t 02:30:00" in sbatch
    assert "--constraint=lustre" in sbatch and "--qos=io" in sbatch
    assert any(s.startswith("--mem=") for s in sbatch)


def test_job_script_sets_pfs_threads_and_worker_layout(script: str) -> None:
    lines = script.splitlines()
    export = lines.index("export PFS_THREADS=96")
    (worker,) = [line for line in lines if "dask_worker" in line or "dask worker" in line]
    assert lines.index(worker) > export  # exported before the worker starts
    assert lines.index("export DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False") < lines.index(worker)
    assert worker.startswith("/shared/venvs/pfs/bin/python ")
    args = worker.split()
    assert args[args.index("--nworkers") + 1] == "2"
    assert args[args.index("--nthreads") + 1] == "4"  # cores // processes
    assert args[args.index("--local-directory") + 1] == "/local/scratch/dask"
    assert "--memory-limit" in args


def test_defaults_and_prologue_passthrough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PFS_THREADS", "12")
    cluster = start_slurm_cluster(
        jobs=0, cores=4, memory="8GB", job_script_prologue=["module load lustre"], **NO_DASHBOARD
    )
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    lines = script.splitlines()
    assert lines.index("export PFS_THREADS=12") < lines.index("module load lustre")
    assert "#SBATCH -t 01:00:00" in lines
    assert not any(line.startswith(("#SBATCH -p", "#SBATCH -A")) for line in lines)
    assert f"{sys.executable} -m distributed.cli.dask_worker" in script
    monkeypatch.setenv("PFS_THREADS", "not-a-number")
    assert jobqueue._default_pfs_threads() == jobqueue.DEFAULT_PFS_THREADS


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"cores": 0, "memory": "1GB"}, "cores"),
        ({"cores": 2, "memory": "1GB", "processes": 3}, "processes"),
        ({"cores": 2, "memory": "lots"}, "memory"),
        ({"cores": 2, "memory": "1GB", "walltime": "1 hour"}, "walltime"),
        ({"cores": 2, "memory": "1GB", "threads": 0}, "threads"),
        ({"cores": 2, "memory": "1GB", "jobs": -1}, "jobs"),
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        start_slurm_cluster(**kwargs)


def test_missing_dask_jobqueue_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # makes `import dask_jobqueue` fail
    with pytest.raises(SlurmUnavailableError, match=r"pip install 'pfs\[slurm\]'") as info:
        start_slurm_cluster(cores=1, memory="1GB")
    assert isinstance(info.value, ImportError)


def slurm_available() -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and any(s.startswith(("idle", "mix")) for s in proc.stdout.split())


@pytest.mark.slurm
@pytest.mark.timeout(240)
def test_real_slurm_job_runs_a_scan(tmp_path: Path) -> None:
    if not slurm_available():
        pytest.skip("no reachable Slurm with an idle node (see examples/slurm/single-node-slurm.sh)")
    from distributed import Client

    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    for i in range(5):
        (tree / "a" / f"f{i}").write_text("x" * i)
    (tree / "a" / "b" / "g").write_text("g")
    logs = tmp_path / "logs"
    cluster = start_slurm_cluster(
        jobs=1,
        cores=1,
        memory="1GB",
        walltime="00:10:00",
        threads=7,
        log_directory=str(logs),
        **NO_DASHBOARD,
    )
    try:
        with Client(cluster) as client:
            client.wait_for_workers(1, timeout=180)
            env = client.run(lambda: (os.environ.get("PFS_THREADS"), os.environ.get("SLURM_JOB_ID")))
            ((threads, job_id),) = env.values()
            assert threads == "7" and job_id
            out = tmp_path / "manifest"
            proc = subprocess.run(
                [*PFS_CLI, "scan", str(tree), "-o", str(out), "--json",
                 "--no-progress", "--scheduler", cluster.scheduler_address],
                capture_output=True,
                text=True,
                timeout=120,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            counts = json.loads(proc.stdout)["counts"]
            assert counts["files"] == 6 and counts["directories"] == 2 and counts["errors"] == 0
    finally:
        cluster.close()


SBATCH = Path(__file__).resolve().parents[1] / "examples" / "slurm" / "pfs-scan.sbatch"


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_two_sbatch_recipes_share_a_node(tmp_path: Path) -> None:
    """examples/slurm/pfs-scan.sbatch twice at once on one node: each scheduler takes a free port (a fixed 8786
    made the second fail with "Address already in use") and speaks TLS with its job's own certificate."""
    if not slurm_available():
        pytest.skip("no reachable Slurm with an idle node (see examples/slurm/single-node-slurm.sh)")
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    for i in range(4):
        (tree / "a" / f"f{i}").write_text("x" * i)
    bindir = str(Path(sys.executable).parent)  # dask and pfs for the job (sbatch exports this environment)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(SBATCH.parents[2])}
    sbatch = ["sbatch", "--wait", "--nodes=1", "--cpus-per-task=1", "--mem=1G", str(SBATCH), str(tree)]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    jobs = [subprocess.Popen([*sbatch, str(tmp_path / f"m{i}")], cwd=tmp_path, env=env, **pipes) for i in range(2)]
    outs = [job.communicate(timeout=280) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outs
    addresses = set()
    for i, (stdout, _) in enumerate(outs):
        job_id = stdout.split()[-1]
        log = (tmp_path / f"pfs-scan-{job_id}.out").read_text()
        summary = json.loads(log[log.index("{\n") : log.index("\n}\n") + 2])
        assert summary["manifest"] == str(tmp_path / f"m{i}") and summary["counts"]["files"] == 4, log
        (line,) = [x for x in log.splitlines() if "Scheduler at:" in x]
        addresses.add(line.split()[-1])
    assert len(addresses) == 2 and all(a.startswith("tls://") for a in addresses), addresses
    assert not list(tmp_path.glob(".pfs-*")), "scheduler files and certificates are removed at the end"
