"""Adaptive concurrency: the controller on real thread-pool workloads, and fixed threads winning."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from operators.core import concurrency, pool
from operators.core.concurrency import Controller, GatedExecutor, fixed_threads
from tests.conftest import make_balanced


def _drive(ctl: Controller, op, until, seconds: float, queued: int = 600) -> int:
    """Keep ``queued`` real jobs waiting on a gated 256-thread pool until ``until()`` or ``seconds``;
    return the limit at that moment (draining the queue afterwards is not part of the workload)."""
    executor = GatedExecutor(ctl)
    futures: list = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and not until():
            futures = [f for f in futures if not f.done()]
            futures.extend(executor.submit(op) for _ in range(queued - len(futures)))
            time.sleep(0.01)
        return ctl.limit
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def test_climbs_on_a_latency_bound_workload():
    """Operations of fixed latency (a server far away): more in flight is always faster, so it climbs."""
    ctl = Controller(start=8, interval=0.3)
    reached = _drive(ctl, lambda: time.sleep(0.1), lambda: ctl.limit >= 128, seconds=12)
    assert reached >= 128, list(ctl.history)


def test_backs_off_when_latency_grows_with_in_flight():
    """Latency proportional to the operations in flight (a saturated server): the rate is flat,
    so it settles on few operations in flight instead of many."""
    running = 0
    lock = threading.Lock()

    def op() -> None:
        nonlocal running
        with lock:
            running += 1
            n = running
        time.sleep(0.002 * n)
        with lock:
            running -= 1

    ctl = Controller(start=48, interval=0.25, hold=3)
    reached = _drive(ctl, op, lambda: ctl.limit <= 24, seconds=15)
    assert reached <= 24, list(ctl.history)
    assert ctl.history[0][1] == 48 and any(h[1] > 48 for h in ctl.history), "it probed upwards first"


def test_idle_intervals_do_not_move_the_limit():
    """When demand is below the limit (nobody waits), there is nothing to learn: it stays put."""
    ctl = Controller(start=32, interval=0.1)
    with GatedExecutor(ctl) as executor:
        for _ in range(40):
            list(executor.map(lambda _: time.sleep(0.005), range(4)))
    assert ctl.limit == 32


def test_fixed_threads_win_over_auto(monkeypatch):
    monkeypatch.delenv("PFS_THREADS", raising=False)
    assert fixed_threads() is None
    assert isinstance(pool.get_pool(), GatedExecutor)
    assert concurrency.report()["mode"] == "auto"
    assert callable(concurrency.in_flight_cap(None))

    fixed = pool.get_pool(8)
    assert not isinstance(fixed, GatedExecutor) and fixed._max_workers == 8
    assert concurrency.report() == {"mode": "fixed", "threads": 8}
    assert concurrency.in_flight_cap(8) == 8

    monkeypatch.setenv("PFS_THREADS", "12")
    assert fixed_threads() == 12 and concurrency.in_flight_cap(None) == 12
    assert pool.get_pool()._max_workers == 12
    monkeypatch.setenv("PFS_THREADS", "auto")
    assert fixed_threads() is None and isinstance(pool.get_pool(), GatedExecutor)


def test_auto_mode_scans_and_removes_a_tree(tmp_path, monkeypatch):
    """The walk asks the controller for its cap; scan and rm tree tasks run on the gated pool."""
    from operators.remove.tasks import RemoveSpec, remove_tree_chunk
    from operators.scan.task import ScanSpec, scan_chunk
    from operators.scan.walk import Budget

    monkeypatch.delenv("PFS_THREADS", raising=False)
    root = tmp_path / "t"
    entries = make_balanced(root, dirs=12, files_per_dir=30)
    out = tmp_path / "m"
    out.mkdir()
    ctl = concurrency.controller()
    seen: list[tuple[int, int]] = []  # (operations done, width) of every job the controller measured
    end = ctl.end
    monkeypatch.setattr(
        ctl, "end", lambda started, done=1, width=1: (seen.append((done, width)), end(started, done, width))
    )
    result = scan_chunk(ScanSpec("file", str(root), str(out)), [(b"", None)], "0000000", Budget(10**6, 60))
    assert result.tally.entries == entries and not result.frontier
    assert concurrency.report()["mode"] == "auto"
    assert seen, "the scan's listings did not run through the controller's gate"  # the core descends below them
    scanned = len(seen)

    removed = remove_tree_chunk(RemoveSpec("file", str(root)), [(b"", None)], Budget(10**6, 60))
    assert removed.counts.removed_files == 12 * 30 and not removed.frontier
    assert list(root.iterdir()) == []
    # the removal's batches (the core's fan-out) were measured, one operation per file unlinked at least
    assert sum(done for done, _ in seen[scanned:]) >= 12 * 30, seen[scanned:]


def test_scan_reports_fixed_threads(dask_client, tmp_path):
    """The job result and the manifest say what ran: here a fixed --threads."""
    from dask_pfs.scan.api import scan

    root = tmp_path / "t"
    make_balanced(root, dirs=3, files_per_dir=5)
    result = scan(root, tmp_path / "m", dask_client, threads=8)
    assert result.concurrency == {"mode": "fixed", "threads": 8}
    marker = json.loads((tmp_path / "m" / "_manifest.json").read_text())
    assert marker["options"]["concurrency"] == {"mode": "fixed", "threads": 8}


@pytest.mark.parametrize(
    "per_worker,expected",
    [
        ({"a": {"mode": "auto", "settled": 96}, "b": {"mode": "auto", "settled": 64}}, 96),
        ({"a": {"mode": "auto", "settled": 24}}, 24),
    ],
)
def test_summary_of_auto_workers(per_worker, expected):
    summary = concurrency.summarize(per_worker)
    assert summary["mode"] == "auto" and summary["settled"] == expected


def test_gate_overhead_is_small():
    """The limit's number of threads run jobs and no more: 10,000 jobs of one syscall each through a
    gated pool (limit 16, room for 256) cost about the CPU of a plain 16-thread pool."""
    import os

    def run(executor) -> float:
        t = time.process_time()  # CPU time: the host's load does not count
        for f in [executor.submit(os.stat, "/") for _ in range(10_000)]:
            f.result()
        return time.process_time() - t

    ctl = Controller(start=16, interval=3600)  # holds still: measures the pool, not the climber
    with ThreadPoolExecutor(16) as plain, GatedExecutor(ctl) as gated:
        base, gated_s = min(run(plain) for _ in range(3)), min(run(gated) for _ in range(3))
        assert len(gated._threads) <= 16
    assert gated_s < base * 1.5 + 0.05, (base, gated_s)


def test_start_at_moves_only_a_fresh_controller():
    """Network storage starts high; once the controller has measured anything, a hint changes nothing."""
    ctl = Controller(start=16, interval=0.2)
    ctl.start_at(64)
    assert ctl.limit == 64
    _drive(ctl, lambda: time.sleep(0.01), lambda: ctl.completed > 0, seconds=5)
    settled = ctl.limit
    ctl.start_at(3)
    assert ctl.limit == settled and ctl.completed > 0


def test_network_storage_is_told_from_the_mount_table(tmp_path):
    from operators.mounts import fs_type, is_network, is_network_type

    assert fs_type("/proc/self/status") == "proc"
    assert not is_network("/proc") and not is_network(tmp_path)
    assert all(
        is_network_type(t)
        for t in ("nfs4", "lustre", "ceph", "fuse.glusterfs", "fuse.sshfs", "cifs", "fuse.latfs", "fuse.s3fs")
    )
    assert not any(is_network_type(t) for t in ("ext4", "xfs", "tmpfs", "overlay", "fuse.lxcfs", None))


def test_forked_child_makes_its_own_pool_and_controller():
    """Workers forked from a driver that already ran pool work must not reuse its dead threads or held locks."""
    import os

    parent_pool = pool.get_pool(None)
    assert parent_pool.submit(lambda: 1).result() == 1
    concurrency._lock.acquire()  # as if a driver thread held it at the moment of the fork
    try:
        pid = os.fork()
        if pid == 0:  # child: must get a working pool and controller, not the parent's
            ok = pool._pool is None and concurrency._controller is None
            ok = ok and pool.get_pool(None).submit(lambda: 2).result(timeout=10) == 2
            os._exit(0 if ok else 1)
    finally:
        concurrency._lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert pool.get_pool(None) is parent_pool


def test_embedded_workers_run_without_the_stack_profiler():
    """Dask's profiler samples every I/O thread 100 times a second and, on CPython < 3.11.9, deadlocks a
    worker whose threads start and stop (gh-106883: a `pfs rm` hung for minutes on the NAS): it must be off."""
    import dask

    from dask_pfs.clusters.client import ClusterOptions, connect

    with connect(ClusterOptions(workers=1, dashboard=False)) as client:
        state = client.run(
            lambda dask_worker: (
                dask.config.get("distributed.worker.profile.enabled"),
                "profile" in dask_worker.periodic_callbacks,
            )
        )
    assert list(state.values()) == [(False, False)]
    assert dask.config.get("distributed.worker.profile.enabled") is True  # the driver's own config is restored
