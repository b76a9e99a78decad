"""A worker process that hangs (SIGSTOP) mid-job: the scheduler drops it once it misses its heartbeats
for PFS_WORKER_TTL, its tasks run on the other worker, and the job ends complete and correct."""

from __future__ import annotations

import contextlib
import glob
import signal
import time

import psutil

from ..conftest import make_balanced, tree_digest
from .harness import finish, kill_group, leftovers, start_pfs

TTL = 6  # seconds without heartbeats before the scheduler drops a worker
BOUND = 120  # the whole job, the stopped worker included, on a loaded 2-core host


def worker_processes(driver: psutil.Process) -> list[psutil.Process]:
    """The embedded cluster's worker processes (Dask titles them ``dask worker [ADDRESS]``)."""
    out = []
    for p in driver.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a helper process that just ended
            if "dask worker" in " ".join(p.cmdline()):
                out.append(p)
    return out


def test_stopped_worker_is_dropped_and_the_job_finishes_on_the_others(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_balanced(src, dirs=16, files_per_dir=40, size=2000)
    env = {"PFS_WORKER_TTL": f"{TTL}s", "PFS_STALL_TIMEOUT": "300", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    t0 = time.monotonic()
    proc = start_pfs(
        "cp", f"{src}/", dst, "--no-progress", "--workers", "2", "--chunk-files", "10",
        "--max-ops-per-second", "200", env=env, log=tmp_path / "cp.log",
    )  # fmt: skip
    stopped = None
    try:
        driver = psutil.Process(proc.pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            workers = worker_processes(driver)
            if len(workers) == 2 and glob.glob(f"{dst}/.pfs-journal-*/done.jsonl"):
                break  # chunks are being copied: both workers hold tasks
            time.sleep(0.02)
        assert proc.poll() is None, "the copy ended before a worker could be stopped"
        stopped = workers[0]
        stopped.send_signal(signal.SIGSTOP)
        rc, out = finish(proc, timeout=BOUND)
    finally:
        if stopped is not None:
            with contextlib.suppress(psutil.Error):
                stopped.kill()
        if proc.poll() is None:
            kill_group(proc)
    took = time.monotonic() - t0
    assert rc == 0, out
    assert took < BOUND
    assert tree_digest(dst) == tree_digest(src)
    assert not leftovers(dst)
