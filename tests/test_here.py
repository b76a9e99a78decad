"""Small jobs run on the driver alone (dask_pfs.runtime.here): no scheduler, no worker processes, the same tasks.

Each job runs in a fresh interpreter, so "no cluster" can be checked for real: after the job,
``distributed`` was never imported and the process has no children.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

from dask_pfs.clusters.client import ClusterOptions
from dask_pfs.runtime.here import HereClient, HereFuture
from dask_pfs.runtime.submitter import Submitter

from .conftest import REPO, make_balanced, tree_digest

JOBS = r"""
import json, multiprocessing, os, sys
from dask_pfs import copy, remove, sync, verify
src, work = sys.argv[1], sys.argv[2]
out = {}
out["cp"] = copy(src + "/", work + "/cp").counts["files"]
out["verify"] = verify(src, work + "/cp").exit_code
out["sync"] = sync(src + "/", work + "/sync").exit_code
out["rm"] = remove(work + "/cp", confirm=lambda _m: True).exit_code
out["cluster"] = any(m == "distributed" or m.startswith("distributed.") for m in sys.modules)
out["children"] = len(multiprocessing.active_children())
print(json.dumps(out))
"""


def _run(code: str, *args: object, env: dict | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PFS_DASHBOARD": "0", **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_small_cp_verify_sync_rm_start_no_cluster(tmp_path):
    src = tmp_path / "src"
    make_balanced(src, dirs=3, files_per_dir=5, size=300)
    out = _run(JOBS, src, tmp_path)
    assert out == {"cp": 15, "verify": 0, "sync": 0, "rm": 0, "cluster": False, "children": 0}
    assert tree_digest(tmp_path / "sync") == tree_digest(src)
    assert not (tmp_path / "cp").exists()


def test_alone_seconds_zero_starts_the_cluster(tmp_path):
    """``PFS_ALONE_SECONDS=0`` keeps the old way (an embedded cluster from the start): the switch works both ways."""
    src = tmp_path / "src"
    make_balanced(src, dirs=2, files_per_dir=3, size=100)
    out = _run(JOBS, src, tmp_path, env={"PFS_ALONE_SECONDS": "0"})
    assert out["cp"] == 6 and out["cluster"] is True


def _pid(_x: int) -> int:
    return os.getpid()


def _boom(_x: int) -> int:
    raise ValueError("bad chunk")


def _wait_forever(_x: int) -> int:
    time.sleep(3600)  # stands for a request stuck on a dead server
    return 0


def test_helper_processes_run_tasks_and_report_errors():
    """On network storage the tasks run in forked helpers (not the driver), and a task's exception comes back."""
    client = HereClient(ClusterOptions(), slots=2, processes=True, alone=3600)
    try:
        pids = {client.submit(_pid, i, key=f"t{i}").result(timeout=60) for i in range(4)}
        assert pids and os.getpid() not in pids
        with pytest.raises(ValueError, match="bad chunk"):
            client.submit(_boom, 0, key="boom", retries=1).result(timeout=60)
    finally:
        procs = [h.proc for h in client._helpers]
        assert client.close() == 0
    assert all(p.exitcode == 0 for p in procs)  # idle helpers are told to leave and reaped: their CPU is counted


def test_helpers_are_not_replaced_by_an_embedded_cluster():
    """A long job with helper processes (network storage) keeps them: an embedded cluster would bring as
    many worker processes, after a start-up and a pause in the job's I/O.  Past ``alone`` seconds the tasks
    still run in the helpers and ``distributed`` is never imported (a fresh interpreter checks it)."""
    code = r"""
import json, os, sys, time
from dask_pfs.clusters.client import ClusterOptions
from dask_pfs.runtime.here import HereClient
client = HereClient(ClusterOptions(), slots=2, processes=True, alone=0.2)
time.sleep(0.3)
pids = {client.submit(os.getpid, key=f"t{i}").result(timeout=60) for i in range(4)}
out = {"joined": client.joined is not None, "here": os.getpid() in pids, "helpers": len(pids)}
client.close()
out["cluster"] = any(m == "distributed" or m.startswith("distributed.") for m in sys.modules)
print(json.dumps(out))
"""
    out = _run(code)
    assert out == {"joined": False, "here": False, "helpers": out["helpers"], "cluster": False}
    assert 1 <= out["helpers"] <= 2


def test_a_helper_stuck_on_storage_is_abandoned_not_waited_for():
    import multiprocessing

    client = HereClient(ClusterOptions(), slots=1, processes=True, alone=3600)
    fut = client.submit(_wait_forever, 0, key="stuck")
    deadline = time.monotonic() + 30
    while not client._helpers[0].busy and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    assert client.close() == 1  # one helper left behind
    assert time.monotonic() - t0 < 10
    assert isinstance(fut.exception(timeout=30), RuntimeError)  # its task fails: nothing waits on it for ever
    assert not [p for p in multiprocessing.active_children() if p.name == "pfs-here-helper"]  # never joined at exit


def test_dependencies_and_a_cluster_joining_a_long_job(dask_client):
    """Tasks that take other tasks' futures run once those are back; past ``alone`` seconds new tasks go
    to the cluster that joins, and one Submitter folds both kinds of results in."""
    client = HereClient(ClusterOptions(scheduler=dask_client.scheduler.address), slots=2, processes=False, alone=0.5)
    got: list[int] = []
    try:
        with Submitter(client, "test") as sub:  # type: ignore[arg-type]
            a, b = sub.future(abs, -1), sub.future(abs, -2)
            assert isinstance(a, HereFuture)
            sub.submit(max, a, b, 6, then=got.append)
            _spin(0.6)  # the driver busy past ``alone``: its interpreter lock can be the bound
            for i in range(6):
                sub.submit(abs, -i, then=got.append)  # a builtin: the workers need not import this module
            sub.drain()
            assert client.joined is not None
            assert sub.slots > 2  # the cluster's threads count once it joined
    finally:
        client.close()
    assert sorted(got) == sorted([6, 0, 1, 2, 3, 4, 5])


def _spin(seconds: float) -> None:
    """Keep this process on a core for ``seconds`` (its CPU, not the wall clock: a loaded host gives less)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_driver_that_mostly_waits_gets_no_cluster_until_it_works(dask_client, caplog):
    """Past ``alone`` seconds a driver that used under half a core (its tasks wait on storage or a server)
    keeps the job: workers would wait too, for their start-up's CPU.  Once it works (a window with a core
    busy), the cluster joins."""
    client = HereClient(ClusterOptions(scheduler=dask_client.scheduler.address), slots=2, processes=False, alone=0.5)
    got: list[int] = []
    try:
        with caplog.at_level(logging.INFO, logger="pfs.here"), Submitter(client, "test") as sub:  # type: ignore[arg-type]
            sub.submit(time.sleep, 0.8, then=lambda _r: None)  # a task waiting, the driver idle, past ``alone``
            sub.drain()
            for i in range(4):
                sub.submit(abs, -i, then=got.append)
            sub.drain()
            assert client.joined is None
            assert "the driver mostly waiting" in caplog.text
            _spin(1.2)  # a busy window (>= BUSY_WINDOW) since the last look
            sub.submit(abs, -9, then=got.append)
            sub.drain()
            assert client.joined is not None
            assert "the driver busy" in caplog.text
    finally:
        client.close()
    assert sorted(got) == [0, 1, 2, 3, 9]


def test_threads_bound_the_core_fan_out_of_concurrent_calls():
    """``--threads 4``: concurrent core batches of one process together get at most 4 in flight,
    and a pool job that hands the core a batch (a listing) cannot deadlock on it."""
    from operators.core.concurrency import fanned
    from operators.core.pool import get_pool

    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def call(width: int) -> int:
        with lock:
            state["now"] += width
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.02)
        with lock:
            state["now"] -= width
        return width

    threads = [threading.Thread(target=fanned, args=(4, 100, call)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert state["peak"] <= 4
    pool = get_pool(4)
    nested = [pool.submit(fanned, 4, 100, call) for _ in range(16)]
    assert all(f.result(timeout=60) >= 1 for f in nested)
    assert state["peak"] <= 4
