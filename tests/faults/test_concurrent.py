"""Two ``pfs cp`` into the same destination, and two ``pfs scan`` into the same output, at once: the
second refuses (exit 2, the destination's lock) and the first finishes correctly; never a mixed
copy or manifest."""

from __future__ import annotations

import glob
import os
import signal
import time
from collections import Counter
from pathlib import Path

from ..conftest import make_balanced, run_pfs, tree_digest
from .harness import finish, kill_group, leftovers, manifest_paths, start_pfs, tree_paths

SLOW = ["--max-ops-per-second", "100"]  # the first job lasts a few seconds


def holds_a_lock(lock_dir: Path) -> bool:
    """Whether a job holds a lock in ``lock_dir``: a holder writes its note ("pid N, since ...") into
    the lock file right after taking the ``flock`` (dask_pfs.runtime.locking). A journal or work
    directory is no such sign: sync makes its work directory before it takes the lock."""
    for lock in glob.glob(f"{lock_dir}/*.lock"):
        with open(lock, "rb") as f:
            if f.read().startswith(b"pid "):
                return True
    return False


def second_while_first_runs(first_args: list, second_args: list, tmp_path, env: dict):
    """Start the first job; once it holds the destination's lock stop its whole process group (so that
    it is still mid-job however slowly the second starts), run the second to the end, then let the
    first go on. Both jobs get ``env`` with a lock directory of their own (``PFS_LOCK_DIR``)."""
    env["PFS_LOCK_DIR"] = str(tmp_path / "locks")
    first = start_pfs(*first_args, *SLOW, env=env, log=tmp_path / "first.log")
    try:
        deadline = time.monotonic() + 120
        while first.poll() is None and not holds_a_lock(tmp_path / "locks") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert first.poll() is None, "the first job ended before the second started"
        assert holds_a_lock(tmp_path / "locks"), "the first job took no lock in 120 s"
        os.killpg(first.pid, signal.SIGSTOP)
        try:
            second = run_pfs(*second_args, env=env)
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        rc, out = finish(first)
    finally:
        if first.poll() is None:
            kill_group(first)
    return second, rc, out


def test_two_copies_into_one_destination(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_balanced(src, dirs=6, files_per_dir=40)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = ["cp", f"{src}/", dst, "--no-progress"]
    second, rc, out = second_while_first_runs(args, args, tmp_path, env)
    assert second.returncode == 2, second.stdout + second.stderr
    assert "another pfs job is writing there" in second.stderr
    assert rc == 0, out
    assert tree_digest(dst) == tree_digest(src) and not leftovers(dst)


def test_two_scans_into_one_output(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    make_balanced(a, dirs=6, files_per_dir=40)
    make_balanced(b, dirs=3, files_per_dir=10)
    m = tmp_path / "m"
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    first = ["scan", a, "-o", m, "--no-progress"]
    other = ["scan", b, "-o", m, "--no-progress", "--overwrite"]  # another tree: must not mix in
    second, rc, out = second_while_first_runs(first, other, tmp_path, env)
    assert second.returncode == 2 and "another pfs job is writing there" in second.stderr, second.stderr
    assert rc == 0, out
    rows = manifest_paths(m)
    assert not [p for p, n in Counter(rows).items() if n > 1]
    assert set(rows) == tree_paths(a)


def test_two_syncs_into_one_destination(tmp_path):
    """The same as cp: a second ``pfs sync`` into the destination another sync is writing exits 2 at once."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_balanced(src, dirs=6, files_per_dir=40)
    make_balanced(dst / "extra", dirs=2, files_per_dir=5)  # deleted by the first
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = ["sync", f"{src}/", dst, "--delete", "--no-progress"]
    second, rc, out = second_while_first_runs(args, args, tmp_path, env)
    assert second.returncode == 2, second.stdout + second.stderr
    assert "another pfs job is writing there" in second.stderr, second.stderr
    assert rc == 0, out
    assert tree_digest(dst) == tree_digest(src) and not leftovers(dst)
