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
DROP_BOUND = TTL + 30  # the scheduler checks heartbeats every few seconds; a loaded host delays it


def worker_processes(driver: psutil.Process) -> list[psutil.Process]:
    """The embedded cluster's worker processes (Dask titles them ``dask worker [ADDRESS]``)."""
    out = []
    for p in driver.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a helper process that just ended
            if "dask worker" in " ".join(p.cmdline()):
                out.append(p)
    return out


def addresses(proc: psutil.Process, status: str) -> set[tuple[str, int]]:
    """The (ip, port) pairs of ``proc``'s TCP sockets in ``status``: its own ends when listening,
    the far ends when established."""
    out = set()
    for c in proc.net_connections("tcp"):
        if c.status == status:
            out.add(tuple(c.laddr if status == psutil.CONN_LISTEN else c.raddr))
    return out


def scheduler_of(driver: psutil.Process, workers: list[psutil.Process]) -> str:
    """The embedded scheduler's address: the driver's listening socket a worker is connected to."""
    listening = addresses(driver, psutil.CONN_LISTEN)
    for p in workers:
        with contextlib.suppress(psutil.Error):
            for ip, port in listening & addresses(p, psutil.CONN_ESTABLISHED):
                return f"tcp://{ip}:{port}"
    raise AssertionError("no worker process is connected to the driver")


def listed_worker(client, workers: list[psutil.Process]) -> tuple[psutil.Process, set[str]]:
    """A worker process the scheduler lists, and its address there (matched by its listening sockets:
    a process titled ``dask worker`` may be a forked helper holding sockets it inherited)."""
    listed = set(client.scheduler_info(n_workers=-1)["workers"])
    for p in workers:
        with contextlib.suppress(psutil.Error):
            own = {f"tcp://{ip}:{port}" for ip, port in addresses(p, psutil.CONN_LISTEN)} & listed
            if own:
                return p, own
    raise AssertionError(f"none of the worker processes is one of the scheduler's workers {listed}")


def dropped_within(client, worker: set[str], proc, bound: float) -> float | None:
    """Seconds until the scheduler's worker list no longer holds ``worker`` while another worker
    stays listed (None: it never left while the job ran)."""
    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < bound:
        listed = set(client.scheduler_info(n_workers=-1)["workers"])
        if not worker & listed:
            assert listed, "the whole cluster went (the job's end), not the stopped worker alone"
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


def test_stopped_worker_is_dropped_and_the_job_finishes_on_the_others(tmp_path):
    from distributed import Client

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
        with Client(scheduler_of(driver, workers), timeout="30s", set_as_default=False) as client:
            stopped, stopped_at = listed_worker(client, workers)
            stopped.send_signal(signal.SIGSTOP)
            dropped = dropped_within(client, stopped_at, proc, DROP_BOUND)
        rc, out = finish(proc, timeout=BOUND)
    finally:
        if stopped is not None:
            with contextlib.suppress(psutil.Error):
                stopped.kill()
        if proc.poll() is None:
            kill_group(proc)
    took = time.monotonic() - t0
    # by its missed heartbeats: TTL s after its last one (which a loaded host may have sent late)
    assert dropped is not None, f"the stopped worker {stopped_at} was never dropped from the scheduler's list"
    assert rc == 0, out
    assert took < BOUND
    assert tree_digest(dst) == tree_digest(src)
    assert not leftovers(dst)
