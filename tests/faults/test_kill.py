"""The whole process group of ``cp``, ``rm``, ``sync`` and ``scan`` (driver, embedded scheduler, every
worker) SIGKILLed at a random point (several seeds each); ``--resume`` must then end in exactly the
state an uninterrupted run gives: a byte-identical copy, nothing left that should go, nothing
removed that should stay, a complete manifest with no row twice and none missing."""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from dask_pfs import scan

from ..conftest import make_balanced, run_pfs, tree_digest
from .harness import kill_group, leftovers, manifest_paths, start_pfs, tree_paths

SEEDS = range(int(os.environ.get("PFS_FAULT_SEEDS", "2")))  # more: PFS_FAULT_SEEDS=10
KILL_WITHIN = 2.0  # s after the job's journal appears: the kill lands at a random point of this window
# The killed run is paced (--max-ops-per-second, entries touched per second): each job below gets a
# pace at which its entries outlast KILL_WITHIN twice over, even on an idle host (the ops/s cap is a
# floor on its duration), so the kill lands mid-job; the SIGSTOP before it lets the test check that.
PACE = {"cp": 150, "rm": 40, "sync": 200, "scan": 80}


def killed_then_resumed(args: list, started: str, seed: int, tmp_path: Path, env: dict, unfinished) -> str:
    """Run ``pfs ARGS``, SIGKILL its process group a random while after ``started`` (a glob) appears,
    then run ``pfs ARGS --resume`` to the end; returns what the kill hit (for the failure message).

    The group is stopped (SIGSTOP) before the kill, so what it left can be checked as the kill finds
    it: the job must still be running and ``unfinished()`` (the state before --resume) true, or the
    kill missed and ``--resume`` would only prove that a finished job can be resumed."""
    rng = random.Random(seed)
    proc = start_pfs(*args, "--max-ops-per-second", PACE[args[0]], env=env, log=tmp_path / f"killed-{seed}.log")
    deadline = time.monotonic() + 120
    while proc.poll() is None and not glob.glob(started) and time.monotonic() < deadline:
        time.sleep(0.01)
    delay = rng.uniform(0, KILL_WITHIN)
    time.sleep(delay)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGSTOP)
    when = f"{delay:.2f} s after {os.path.basename(started)}"
    try:
        assert proc.poll() is None, f"seed {seed}: the job ended (rc {proc.returncode}) before the kill ({when})"
        assert unfinished(), f"seed {seed}: the job's work was already done when killed ({when})"
    finally:
        kill_group(proc)
    resumed = run_pfs(*args, "--resume", env=env)
    assert resumed.returncode == 0, f"seed {seed}, killed {when}: {resumed.stdout}{resumed.stderr}"
    return when


@pytest.fixture
def env(tmp_path):
    return {"XDG_CACHE_HOME": str(tmp_path / "cache")}


def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    make_balanced(src, dirs=8, files_per_dir=40, size=3000)
    (src / "d000" / "big.bin").write_bytes(os.urandom(3 << 20))
    os.symlink("sub/f0001.dat", src / "d001" / "link")
    return src


def rm_case(tmp_path: Path, client, chunk_files: int) -> tuple[Path, Path, set, set, list]:
    """A scanned source and an ``rm --manifest`` of its odd-numbered files: (tree, manifest, paths
    before, the paths it removes, the command's arguments)."""
    tree = source(tmp_path)
    m = tmp_path / "m"
    scan(tree, m, client=client)
    before = tree_paths(tree)
    where = r"type = 'file' AND regexp_matches(name, '[13579]\.dat$')"
    doomed = {p for p in before if p.endswith((b"1.dat", b"3.dat", b"5.dat", b"7.dat", b"9.dat"))}
    args = ["rm", "--manifest", m, "--where", where, "--yes", "--no-progress", "--chunk-files", str(chunk_files)]
    return tree, m, before, doomed, args


@pytest.mark.parametrize("seed", SEEDS)
def test_cp_killed_then_resumed(tmp_path, env, seed):
    src, dst = source(tmp_path), tmp_path / "dst"
    args = ["cp", src, dst, "--no-progress", "--chunk-files", "20", "--split-size", "512K"]
    want = tree_digest(src)
    when = killed_then_resumed(args, f"{dst}/.pfs-journal-*", seed, tmp_path, env, lambda: tree_digest(dst) != want)
    assert tree_digest(dst) == want, when
    assert not leftovers(dst), when


@pytest.mark.parametrize("seed", SEEDS)
def test_rm_manifest_killed_then_resumed(tmp_path, env, seed, dask_client):
    tree, m, before, doomed, args = rm_case(tmp_path, dask_client, chunk_files=20)
    when = killed_then_resumed(
        args, f"{m}/.pfs-journal-*", seed, tmp_path, env, lambda: tree_paths(tree) != before - doomed
    )
    assert tree_paths(tree) == before - doomed, when  # nothing left that should go, nothing more removed
    assert not glob.glob(f"{m}/.pfs-journal-*"), when


@pytest.mark.parametrize("seed", SEEDS)
def test_sync_killed_then_resumed(tmp_path, env, seed):
    src, dst = source(tmp_path), tmp_path / "dst"
    shutil.copytree(src / "d000", dst / "d000", symlinks=True)  # some there already
    (dst / "d002" / "sub").mkdir(parents=True)
    (dst / "d002" / "sub" / "f0003.dat").write_bytes(b"changed")  # differs: replaced
    make_balanced(dst / "extra", dirs=3, files_per_dir=20)  # not in the source: deleted
    args = ["sync", f"{src}/", dst, "--delete", "--no-progress", "--chunk-files", "20"]
    want = tree_digest(src)
    when = killed_then_resumed(
        args, f"{tmp_path}/cache/pfs/sync-*", seed, tmp_path, env, lambda: tree_digest(dst) != want
    )
    assert tree_digest(dst) == want, when
    assert not leftovers(dst), when


@pytest.mark.parametrize("seed", SEEDS)
def test_scan_killed_then_resumed(tmp_path, env, seed):
    tree = source(tmp_path)
    m = tmp_path / "m"
    args = ["scan", tree, "-o", m, "--no-progress"]
    when = killed_then_resumed(
        args, f"{m}/.pfs-journal-*", seed, tmp_path, env, lambda: not (m / "_manifest.json").exists()
    )
    rows = manifest_paths(m)
    twice = [p for p, n in Counter(rows).items() if n > 1]
    assert not twice, f"{when}: rows twice: {twice[:5]}"
    assert set(rows) == tree_paths(tree), when
    assert (m / "_manifest.json").exists() and not glob.glob(f"{m}/.pfs-journal-*"), when
