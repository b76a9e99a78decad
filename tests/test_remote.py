"""Remote driving: ``pfs --scheduler`` from a host that does not mount the data (``dask_pfs.remote.driver``).

A real ``dask scheduler`` and a one-thread ``dask worker`` (so a driver that held its slot would
deadlock) see a tree under ``DATA``; every ``pfs`` client runs in its own mount namespace with an
empty tmpfs over ``DATA`` (``unshare -m``), so the paths it is given do not exist for it.  The
probes, the journal, the marker and the work happen on the worker; the client prints the result
and exits as a local run would.
"""

from __future__ import annotations

import json
import os
import pty
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1) for a mount namespace"
)


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """(scheduler file, DATA): a scheduler and a worker process that see DATA."""
    base = tmp_path_factory.mktemp("remote")
    data = base / "data"
    data.mkdir()
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs none {shlex.quote(str(data))}"],
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode:
        pytest.skip(f"no mount namespace here: {probe.stderr.strip()}")
    sched = base / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_THREADS": "4", "XDG_CACHE_HOME": str(data / ".cache")}
    logs = [open(base / f"{n}.log", "wb") for n in ("scheduler", "worker")]  # noqa: SIM115
    procs = [
        subprocess.Popen(
            [
                BIN / "dask",
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--dashboard-address",
                ":0",
                "--scheduler-file",
                sched,
                "--no-show",
            ],
            env=env,
            stdout=logs[0],
            stderr=subprocess.STDOUT,
        )
    ]
    deadline = time.monotonic() + 60
    while not sched.exists():
        assert time.monotonic() < deadline, (base / "scheduler.log").read_text()
        time.sleep(0.1)
    procs.append(
        subprocess.Popen(
            [
                BIN / "dask",
                "worker",
                "--scheduler-file",
                sched,
                "--nworkers",
                "1",
                "--nthreads",
                "1",
                "--dashboard-address",
                ":0",
                "--no-nanny",
            ],
            env=env,
            stdout=logs[1],
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    )
    from distributed import Client

    try:
        with Client(scheduler_file=str(sched), timeout="60s") as client:
            client.wait_for_workers(1, timeout=60)
        yield sched, data
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=30)
        for f in logs:
            f.close()


def pfs_argv(remote, *args: str) -> list[str]:
    """``pfs ARGS --scheduler-file F`` in a mount namespace where DATA is an empty tmpfs."""
    sched, data = remote
    cmd = shlex.join([str(BIN / "pfs"), *args, "--scheduler-file", str(sched)])
    return ["unshare", "-m", "sh", "-c", f"mount -t tmpfs none {shlex.quote(str(data))} && exec {cmd}"]


def pfs(remote, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_CLEAN_EXIT": "0"}
    return subprocess.run(pfs_argv(remote, *args), capture_output=True, text=True, env=env, timeout=timeout)


def make_tree(root: Path, files: int = 20) -> None:
    for i in range(files):
        d = root / f"d{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n" * (i + 1))
    (root / "link").symlink_to("d0")


def test_client_cannot_see_the_data(remote):
    """The premise: in the client's namespace DATA is empty, and a local driver fails on it."""
    _, data = remote
    make_tree(data / "premise", 3)
    r = pfs(remote, "scan", str(data / "premise"), "-o", str(data / "premise.m"), "--driver", "local")
    assert r.returncode == 2, r.stderr
    assert "pfs: error:" in r.stderr and "no such" in r.stderr.lower()
    assert not (data / "premise.m").exists()


def test_scan_on_the_cluster(remote):
    _, data = remote
    make_tree(data / "tree")
    r = pfs(remote, "scan", str(data / "tree"), "-o", str(data / "tree.m"), "--progress")
    assert r.returncode == 0, r.stderr
    assert "25 entries, 1.6 KiB" in r.stderr  # the last state of the progress bar, as a local run's
    assert f"scanned {data / 'tree'}: 25 entries (20 files, 4 directories, 1 symlink," in r.stdout
    marker = json.loads((data / "tree.m" / "_manifest.json").read_text())  # written by the worker
    assert marker["counts"]["files"] == 20
    again = pfs(remote, "scan", str(data / "tree"), "-o", str(data / "tree.m"), "--json")
    assert again.returncode == 2 and "--overwrite" in again.stderr  # the worker's refusal, as a local one


def test_missing_root_is_refused_like_a_local_run(remote, tmp_path):
    _, data = remote
    r = pfs(remote, "scan", str(data / "nope"), "-o", str(data / "nope.m"))
    assert r.returncode == 2
    local = subprocess.run(
        [BIN / "pfs", "scan", str(data / "nope"), "-o", str(data / "nope.m")], capture_output=True, text=True
    )
    assert local.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == local.stderr.strip().splitlines()[-1]
    assert "no such" in r.stderr.lower() and str(data / "nope") in r.stderr
    assert not (data / "nope.m").exists()
    relative = pfs(remote, "scan", "nope/tree", "-o", str(data / "nope.m"))
    assert relative.returncode == 2 and "nope/tree: the driver runs on the cluster" in relative.stderr
    assert "give absolute paths" in relative.stderr
    forced = pfs(remote, "scan", str(tmp_path), "-o", str(data / "x.m"), "--driver", "cluster")
    assert forced.returncode == 0, forced.stderr  # tmp_path is visible to the worker as well


def test_cp_rm_on_the_cluster(remote):
    _, data = remote
    src = data / "cpsrc"
    make_tree(src)
    r = pfs(remote, "cp", str(src), str(data / "cpdst"))
    assert r.returncode == 0, r.stderr
    assert "20 files" in r.stdout
    assert (data / "cpdst" / "d1" / "f5.txt").read_text() == (src / "d1" / "f5.txt").read_text()
    assert os.readlink(data / "cpdst" / "link") == "d0"

    r = pfs(remote, "rm", str(data / "cpdst"), "-y")
    assert r.returncode == 0, r.stderr
    assert "removed 21 entries and 5 directories" in r.stdout
    assert not (data / "cpdst").exists() and (src / "d1" / "f5.txt").exists()

    scan = pfs(remote, "scan", str(src), "-o", str(data / "cpsrc.m"))
    assert scan.returncode == 0, scan.stderr
    r = pfs(remote, "rm", "--manifest", str(data / "cpsrc.m"), "--where", "name LIKE 'f1%'", "-y")
    assert r.returncode == 0, r.stderr
    assert "removed 11 entries" in r.stdout  # f1, f10..f19
    assert not (src / "d2" / "f10.txt").exists() and (src / "d2" / "f2.txt").exists()


def test_sync_and_verify_on_the_cluster(remote):
    _, data = remote
    src, dst = data / "syncsrc", data / "syncdst"
    make_tree(src)
    dst.mkdir()
    (dst / "extra.txt").write_text("x")
    r = pfs(remote, "sync", str(src), str(dst), "--delete", "--plan", str(data / "sync.plan"))
    assert r.returncode == 0, r.stderr
    assert "25 new" in r.stdout and "1 extra (deleted 1)" in r.stdout
    assert not (dst / "extra.txt").exists() and (dst / "d3" / "f7.txt").read_text() == "file 7\n" * 8

    r = pfs(remote, "verify", str(src), str(dst), "--report", str(data / "verify.parquet"))
    assert r.returncode == 0, r.stderr + r.stdout
    assert "25 same, 0 missing" in r.stdout
    (dst / "d3" / "f7.txt").write_text("changed\n")
    r = pfs(remote, "verify", str(src), str(dst), "--report", str(data / "verify.parquet"))
    assert r.returncode == 1
    assert "1 different" in r.stdout and "d3/f7.txt" in r.stdout


def test_ctrl_c_stops_the_driver_and_resume_finishes(remote):
    """SIGINT to the client: the driver on the cluster stops and keeps its journal (exit 130, like
    a local run); the same command with --resume walks only what is left."""
    _, data = remote
    tree, out = data / "slow", data / "slow.m"
    for i in range(40):
        (tree / f"d{i}").mkdir(parents=True)
        for j in range(5):
            (tree / f"d{i}" / f"f{j}").write_text("x")
    args = ("scan", str(tree), "-o", str(out), "--max-ops-per-second", "40", "--progress")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_CLEAN_EXIT": "0"}
    proc = subprocess.Popen(pfs_argv(remote, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    while not list(out.glob(".pfs-journal-*/done.jsonl")):  # a task done: what --resume skips
        assert time.monotonic() < deadline and proc.poll() is None, "the scan did not start"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert b"stopping the driver on the cluster" in stderr and b"scan" in stderr  # and the progress showed
    assert not (out / "_manifest.json").exists() and list(out.glob(".pfs-journal-*"))

    r = pfs(remote, "scan", str(tree), "-o", str(out), "--resume")
    assert r.returncode == 0, r.stderr
    assert "done before)" in r.stdout and "240 entries" in r.stdout
    assert not list(out.glob(".pfs-journal-*"))


def test_reading_commands_on_the_cluster(remote):
    """du, info, query and diff read manifests and trees only the workers see; query's -o is
    written by the client (outside DATA, where it can write)."""
    sched, data = remote
    tree = data / "read"
    make_tree(tree)
    assert pfs(remote, "scan", str(tree), "-o", str(data / "read.m")).returncode == 0

    r = pfs(remote, "info", str(data / "read.m"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["counts"]["files"] == 20

    r = pfs(remote, "du", str(data / "read.m"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["total"] == {"entries": 25, "files": 20, "bytes": 1625, "errors": 0}
    r = pfs(remote, "du", str(tree), "--by", "type")  # a tree: scanned on the cluster first
    assert r.returncode == 0, r.stderr
    assert "total: 1.6 KiB in 20 files, 25 entries" in r.stdout

    out = sched.parent / "rows.csv"
    r = pfs(remote, "query", str(data / "read.m"), "--where", "type = 'file' AND size > 60", "--select", "name, size",
            "--order-by", "size", "--format", "csv", "-o", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    sizes = sorted((len(f"file {i}\n") * (i + 1), f"f{i}.txt") for i in range(20))
    assert out.read_text().splitlines() == ["name,size"] + [f"{n},{size}" for size, n in sizes if size > 60]
    r = pfs(remote, "query", str(data / "read.m"), "--where", "size >", "--format", "json")
    assert r.returncode == 2 and "--where" in r.stderr  # refused on the worker, said by the client
    r = pfs(remote, "query", str(data / "read.m"), "--where", "nosuch > 1")
    assert r.returncode == 2 and 'query failed: Binder Error: Referenced column "nosuch" not found' in r.stderr

    (tree / "d0" / "f4.txt").write_text("changed")
    r = pfs(remote, "diff", str(data / "read.m"), str(tree), "--show", "5")
    assert r.returncode == 1, r.stderr
    assert "1 changed" in r.stdout and "d0/f4.txt" in r.stdout


def test_rm_asks_on_the_clients_terminal(remote):
    """On a terminal, rm's question comes from the driver on the cluster and the client's answer goes back."""
    _, data = remote
    tree = data / "ask"
    make_tree(tree, 4)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_CLEAN_EXIT": "0"}
    for answer, code in (("n", 2), ("y", 0)):
        master, slave = pty.openpty()
        os.write(master, f"{answer}\n".encode())  # waits in the terminal until the prompt reads it
        try:
            r = subprocess.run(pfs_argv(remote, "rm", str(tree)), stdin=slave, capture_output=True, text=True,
                               env=env, timeout=120)  # fmt: skip
        finally:
            os.close(slave)
            os.close(master)
        assert r.returncode == code, r.stderr
        assert str(tree) in r.stderr and "[y/N]" in r.stderr
        assert tree.exists() == (answer == "n")


def test_killed_client_stops_the_driver(remote):
    """kill -9 of the client: the scheduler releases the driver task, whose watcher stops the job within 0.2 s
    (no task left on the cluster, the journal kept for --resume)."""
    sched, data = remote
    tree, out = data / "orphan", data / "orphan.m"
    for i in range(40):
        (tree / f"d{i}").mkdir(parents=True)
        for j in range(5):
            (tree / f"d{i}" / f"f{j}").write_text("x")
    args = ("scan", str(tree), "-o", str(out), "--max-ops-per-second", "20")
    proc = subprocess.Popen(pfs_argv(remote, *args), env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60
    while not list(out.glob(".pfs-journal-*/done.jsonl")):
        assert time.monotonic() < deadline and proc.poll() is None, "the scan did not start"
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    from distributed import Client

    with Client(scheduler_file=str(sched), timeout="30s") as client:
        deadline = time.monotonic() + 30
        while client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)):
            assert time.monotonic() < deadline, "the driver kept running"
            time.sleep(0.2)
    parts = sorted(out.glob("part-*"))
    time.sleep(2)
    assert sorted(out.glob("part-*")) == parts and not (out / "_manifest.json").exists()
    r = pfs(remote, "scan", str(tree), "-o", str(out), "--resume")
    assert r.returncode == 0, r.stderr
    assert "240 entries" in r.stdout and "done before)" in r.stdout
