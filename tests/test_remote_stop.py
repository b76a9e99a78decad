"""Stopping a job whose driver runs on the cluster (issue 44, item 2): Ctrl-C, SIGTERM, SIGKILL or a frozen
client stop its I/O at once, caps kept; ``--detach`` is the one way to leave a job running.

A real ``dask scheduler`` and worker process (``tests/test_remote.py``'s fixture); every client runs in a
mount namespace where the data is not there.  The caps make ``rm`` slow enough to watch: each test counts the
files left at the client's exit (or its death) and again seconds later.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .test_remote import REPO, pfs, pfs_argv, remote  # noqa: F401  # the fixture

DIRS, PER_DIR = 6, 120
RATE = "40"  # ops/s: the core removes a directory's files 64 at a time, each batch's tokens taken first


def make_victim(root: Path) -> int:
    for i in range(DIRS):
        (root / f"d{i}").mkdir(parents=True)
        for j in range(PER_DIR):
            (root / f"d{i}" / f"f{j}").write_bytes(b"")
    return DIRS * PER_DIR


def left(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def start_rm(remote, tree: Path, *extra: str) -> subprocess.Popen:  # noqa: F811
    env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_CLEAN_EXIT": "0"}
    argv = pfs_argv(remote, "rm", str(tree), "-y", "--driver", "cluster", "--max-ops-per-second", RATE, *extra)
    # own session: a signal reaches pfs itself, not only the unshare/sh in front of it (they exec into it)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)


def wait_started(proc: subprocess.Popen, tree: Path, total: int) -> None:
    deadline = time.monotonic() + 60
    while left(tree) > total - 64:  # a first batch removed: tasks are in flight
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        time.sleep(0.05)


def steady(tree: Path, first: float, then: float) -> tuple[int, int]:
    """Files left ``first`` s from now and ``then`` s from now."""
    t0 = time.monotonic()
    time.sleep(first)
    a = left(tree)
    time.sleep(max(0.0, then - (time.monotonic() - t0)))
    return a, left(tree)


def running(dask_scheduler) -> int:
    return sum(ts.state in ("processing", "waiting", "queued", "no-worker") for ts in dask_scheduler.tasks.values())


def no_tasks_left(sched: Path, timeout: float = 30) -> None:
    """No task runs or waits on the cluster (a frozen client may still hold its driver's outcome)."""
    from distributed import Client

    with Client(scheduler_file=str(sched), timeout="30s") as client:
        deadline = time.monotonic() + timeout
        while client.run_on_scheduler(running):
            assert time.monotonic() < deadline, "tasks kept running on the cluster"
            time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_client_stops_the_rm_at_once(remote, sig):  # noqa: F811
    """Ctrl-C or SIGTERM: the client waits for the driver to stop, says what was done, exits 130; nothing
    more is removed after it (the count at exit+1 s and exit+5 s are equal), and little between the
    signal and the exit: the batches already granted by the cap, no uncapped rush."""
    sched, data = remote
    tree = data / f"victim-{sig.name}"
    total = make_victim(tree)
    proc = start_rm(remote, tree)
    wait_started(proc, tree, total)
    at_signal = left(tree)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    at_exit = left(tree)
    later = steady(tree, 1.0, 5.0)
    stderr = err.decode()
    assert proc.returncode == 130, stderr
    assert later == (at_exit, at_exit), (at_signal, at_exit, later)
    assert at_exit > 0 and at_signal - at_exit <= 4 * 64, (at_signal, at_exit)  # the walk's 4 threads' batches
    assert "pfs: stopped (cancelled): rm " in stderr and "stopped before their next batch" in stderr, stderr
    no_tasks_left(sched)


def test_ctrl_c_stops_an_rm_by_manifest_in_small_chunks(remote):  # noqa: F811
    """The issue's second case: ``rm --manifest --chunk-files 50``, Ctrl-C: nothing removed after the exit."""
    sched, data = remote
    tree, manifest = data / "victim-manifest", data / "victim-manifest.m"
    total = make_victim(tree)
    r = pfs(remote, "scan", str(tree), "-o", str(manifest))
    assert r.returncode == 0, r.stderr
    env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_CLEAN_EXIT": "0"}
    argv = pfs_argv(remote, "rm", "--manifest", str(manifest), "--chunk-files", "50", "-y", "--driver", "cluster",
                    "--max-ops-per-second", RATE)  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    wait_started(proc, tree, total)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    at_exit = left(tree)
    assert proc.returncode == 130, err.decode()
    assert steady(tree, 1.0, 5.0) == (at_exit, at_exit) and at_exit > 0
    no_tasks_left(sched)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSTOP"])
def test_a_vanished_client_stops_the_rm_within_the_lease(remote, how):  # noqa: F811
    """A client killed (the scheduler drops it) or frozen (its connection stays up: only the lease tells)
    stops the job within the lease's bound, 5 s: the count 5 s after and 9 s after are equal."""
    sched, data = remote
    tree = data / f"victim-{how}"
    total = make_victim(tree)
    proc = start_rm(remote, tree)
    wait_started(proc, tree, total)
    os.kill(proc.pid, getattr(signal, how))
    try:
        at5, at9 = steady(tree, 5.0, 9.0)
        assert at5 == at9 and at9 > 0, (at5, at9)
        no_tasks_left(sched)
    finally:
        proc.kill()
        proc.communicate()


def test_a_detached_rm_finishes_without_its_client(remote, tmp_path):  # noqa: F811
    """--detach: the client leaves at once; the job runs to its end (caps kept), and ``pfs job NAME``
    reads its result with the token saved in the job file."""
    _, data = remote
    tree = data / "victim-detached"
    make_victim(tree)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_CLEAN_EXIT": "0", "PFS_JOB_DIR": str(tmp_path / "jobs")}
    argv = pfs_argv(remote, "rm", str(tree), "-y", "--driver", "cluster", "--max-ops-per-second", "400", "--detach")
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    name = r.stdout.strip()
    assert name.startswith("pfs-cli-remove-") and f"pfs job {name}" in r.stderr
    job_file = tmp_path / "jobs" / f"{name}.json"
    assert oct(job_file.stat().st_mode & 0o777) == "0o600"
    deadline = time.monotonic() + 60
    while True:
        st = subprocess.run(pfs_argv(remote, "job", name), capture_output=True, text=True, env=env, timeout=60)
        shown = json.loads(st.stdout)
        if shown["state"] != "running":
            break
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
    assert st.returncode == 0 and shown["state"] == "finished", (st.stderr, shown)
    assert shown["result"]["counts"]["removed_files"] == DIRS * PER_DIR, shown
    assert not tree.exists()
    other = subprocess.run(pfs_argv(remote, "job", name), capture_output=True, text=True,
                           env={**env, "PFS_JOB_DIR": str(tmp_path / "elsewhere")}, timeout=60)  # fmt: skip
    assert other.returncode == 2 and "no job file" in other.stderr  # no token, no record
    st = subprocess.run(pfs_argv(remote, "job", name, "--forget"), capture_output=True, text=True, env=env, timeout=60)
    assert st.returncode == 0 and not job_file.exists()
