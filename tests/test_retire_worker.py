"""``pfs retire-worker`` (the chart's worker preStop hook) on a real cluster of worker processes: the worker gets
no new tasks, the command waits for its running task, and reports one still running at the timeout."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from .conftest import PFS, REPO


def blocked(event: str, started: str, done: str) -> str:
    """A task that runs until the test sets ``event``; files mark when it started and finished."""
    from distributed import Event, get_worker

    Path(started).touch()
    Event(event).wait()
    Path(done).touch()
    return get_worker().address


def where() -> str:
    from distributed import get_worker

    return get_worker().address


def wait_for(predicate, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster():
    """Three workers: each test retires its own (a retired worker stays out of assignments)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


def retire(client, name: str, timeout: float) -> subprocess.Popen:
    cmd = [*PFS, "retire-worker", name, "--scheduler", client.scheduler.address, "--timeout", str(timeout)]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_blocked(client, tmp_path: Path, worker: str, tag: str):
    from distributed import Event

    event = Event(f"release-{tag}", client=client)
    started, done = tmp_path / f"{tag}.started", tmp_path / f"{tag}.done"
    future = client.submit(blocked, event.name, str(started), str(done), workers=[worker], pure=False)
    wait_for(started.exists, "the task to start")
    return event, future, done


def test_retire_waits_for_the_running_task_and_sends_new_ones_elsewhere(cluster, tmp_path):
    client = cluster
    workers = client.scheduler_info()["workers"]
    (first,) = [a for a, w in workers.items() if str(w["name"]) == "0"]
    event, future, done = start_blocked(client, tmp_path, first, "a")

    proc = retire(client, "0", timeout=120)
    status = lambda: client.run_on_scheduler(lambda dask_scheduler: str(dask_scheduler.workers[first].status))  # noqa: E731
    wait_for(lambda: status() == "Status.closing_gracefully", "the worker to be retired")
    assert proc.poll() is None, proc.communicate()  # still waiting for the running task
    assert first not in {client.submit(where, pure=False).result() for _ in range(4)}

    event.set()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"worker 0 ({first}) retired: no task running" in out
    assert done.exists() and future.result() == first  # the task finished on the retired worker


def test_retire_reports_a_task_still_running_at_the_timeout(cluster, tmp_path):
    client = cluster
    first = next(a for a, w in client.scheduler_info()["workers"].items() if str(w["name"]) == "1")
    event, future, done = start_blocked(client, tmp_path, first, "b")
    proc = retire(client, "1", timeout=0.5)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out + err
    assert "worker 1 (" in err and "1 tasks still running after 0.5 s" in err
    assert not done.exists()
    event.set()
    assert future.result(timeout=30) == first

    proc = retire(client, "no-such-worker", timeout=1)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "no worker named 'no-such-worker' on the scheduler (workers: 0, 1, 2)" in err
