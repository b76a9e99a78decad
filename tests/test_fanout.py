"""Fan-out into one destination (dask_pfs/copy/group.py): copies of disjoint parts of one manifest
share the destination's lock and run at once; directories are settled once, by the last part; an
unrelated copy into the same destination is still refused (exit 2)."""

from __future__ import annotations

import contextlib
import glob
import itertools
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from .conftest import DROP_DAC, PFS, REPO, make_balanced, run_pfs, tree_digest

PARTS = 8


def _dir_meta(root) -> dict[str, tuple[int, int]]:
    """{relative directory: (mode, mtime in µs)} of every directory below and including ``root``."""
    out = {}
    for dirpath, _dirs, _files in os.walk(root):
        s = os.stat(dirpath)
        out[os.path.relpath(dirpath, root)] = (stat.S_IMODE(s.st_mode), s.st_mtime_ns // 1000)
    return out


def _parts(src, n: int) -> list[str]:
    """``n`` where-clauses over disjoint path ranges of the files (what ``PfsManifest.partitions`` makes)."""
    paths = sorted(os.path.relpath(os.path.join(d, f), src) for d, _dirs, files in os.walk(src) for f in files)
    bounds = [paths[len(paths) * i // n] for i in range(1, n)]
    edges = [None, *bounds, None]
    parts = []
    for low, high in itertools.pairwise(edges):
        cond = ["type = 'file'"]
        if low is not None:
            cond.append(f"path >= '{low}'")
        if high is not None:
            cond.append(f"path < '{high}'")
        parts.append(" AND ".join(cond))
    return parts


def _tree(tmp_path):
    """Parts cut inside directories (240 files in 8 parts of 30, 40 files a directory), read-only ones
    among them: a part that set such a directory's mode while another still wrote there would fail it."""
    src = tmp_path / "src"
    make_balanced(src, dirs=6, files_per_dir=40)
    for i, d in enumerate(sorted(src.iterdir())):
        os.chmod(d / "sub", 0o750 if i % 2 else 0o555)
        os.utime(d / "sub", ns=(1_600_000_000_000_000_000 + i, 1_600_000_000_000_000_000 + i * 1000))
        os.utime(d, ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000 + i * 1000))
    os.chmod(src, 0o751)
    os.utime(src, ns=(1_400_000_000_000_000_000, 1_400_000_000_000_000_000))
    return src


@contextlib.contextmanager
def _cluster_without_dac(tmp_path) -> Iterator[str]:
    """A scheduler and a worker process without the DAC capabilities: the copies' writes are a user's."""
    sched_file = tmp_path / "scheduler.json"
    dask = [*DROP_DAC, str(Path(sys.executable).parent / "dask")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
             "--scheduler-file", str(sched_file)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not sched_file.exists():
            assert time.monotonic() < deadline, "no scheduler"
            time.sleep(0.1)
        procs.append(
            subprocess.Popen(
                [*dask, "worker", "--scheduler-file", str(sched_file), "--nworkers", "2", "--nthreads", "2",
                 "--dashboard-address", ":0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
        yield json.loads(sched_file.read_text())["address"]
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(60)


def test_eight_parts_into_one_destination(tmp_path):
    src = _tree(tmp_path)
    with _cluster_without_dac(tmp_path) as scheduler_address:
        _eight_parts(tmp_path, src, scheduler_address)


def _eight_parts(tmp_path, src, scheduler_address: str) -> None:
    m, other_m, dst = tmp_path / "m", tmp_path / "other", tmp_path / "dst"
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PFS_LOCK_DIR": str(tmp_path / "locks")}
    common = ["--scheduler", scheduler_address, "--no-progress"]
    run_pfs("scan", src, "-o", m, *common, check=True, env=env, drop_dac=True)
    run_pfs("scan", src, "-o", other_m, *common, check=True, env=env, drop_dac=True)
    parts = _parts(src, PARTS)

    # The first part holds the lock (its journal is there), then stops mid-job; the other seven run
    # to their end meanwhile: they share the lock with it, and it finishes last, settling every
    # part's directories.  Without the DAC capabilities, as a user's job: modes are enforced.
    def cp(where: str, *more: str) -> subprocess.Popen:
        cmd = [*DROP_DAC, *PFS, "cp", "--manifest", str(m), "--where", where, str(dst), *common, *more]
        # its own process: the first part is stopped with SIGSTOP to its process group
        full_env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_SERVER": "off", **env}
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, start_new_session=True
        )

    first = cp(parts[0], "--max-ops-per-second", "20")
    try:
        deadline = time.monotonic() + 120
        while first.poll() is None and not glob.glob(f"{dst}/.pfs-journal-*") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert first.poll() is None, "the first part ended before the others started"
        os.killpg(first.pid, signal.SIGSTOP)
        try:
            others = [cp(where) for where in parts[1:]]
            outs = [p.communicate(timeout=300) for p in others]
            # unrelated jobs are still refused while parts of the group write there
            live = run_pfs("cp", f"{src}/", dst, *common, env=env)
            another = run_pfs("cp", "--manifest", other_m, "--where", parts[0], dst, *common, env=env)
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        out, err = first.communicate(timeout=300)
        rc = first.returncode
        out += err
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(30)
    for p, (stdout, stderr) in zip(others, outs, strict=True):
        assert p.returncode == 0, stdout + stderr
    assert rc == 0, out
    for refused in (live, another):
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "another pfs job is writing there" in refused.stderr
    assert tree_digest(dst) == tree_digest(src)
    assert _dir_meta(dst) == _dir_meta(src)
    assert not glob.glob(f"{tmp_path}/locks/*.parts/*"), "the ledger is cleared by the last part"


def test_group_lock_is_shared_only_within_its_group(tmp_path):
    """Two processes of one group both hold the lock; another group and an exclusive writer are refused;
    ``sole`` is true only for the last holder."""
    env = {**os.environ, "PFS_LOCK_DIR": str(tmp_path / "locks"), "PYTHONPATH": str(REPO)}
    holder = (
        "import sys; from dask_pfs.runtime.locking import writer_lock; from dask_pfs.urls import resolve\n"
        "with writer_lock(resolve(sys.argv[1]), 'copy into', sys.argv[2]) as held:\n"
        "    print('held', flush=True); sys.stdin.readline(); print(held.sole(), flush=True); sys.stdin.readline()\n"
    )
    dst = str(tmp_path / "dst")

    def hold(group: str) -> subprocess.Popen:
        p = subprocess.Popen(
            [*PFS[:1], "-c", holder, dst, group], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        return p

    def refused(group: str | None) -> str:
        code = (
            "import sys; from dask_pfs.runtime.locking import writer_lock, LockedError\n"
            "from dask_pfs.urls import resolve\n"
            "try:\n"
            "    with writer_lock(resolve(sys.argv[1]), 'copy into', sys.argv[2] or None): print('got it')\n"
            "except LockedError as exc: print('refused', exc)\n"
        )
        return subprocess.run(
            [*PFS[:1], "-c", code, dst, group or ""], capture_output=True, text=True, env=env, check=True
        ).stdout

    a, b = hold("g1"), hold("g1")
    try:
        assert refused("g2").startswith("refused"), "another group shares nothing"
        assert refused(None).startswith("refused"), "an exclusive writer waits for the whole group"
        assert a.stdin is not None and a.stdout is not None
        a.stdin.write("\n")
        a.stdin.flush()
        assert a.stdout.readline().strip() == "False", "b still holds it"
        a.stdin.write("\n")
        a.stdin.flush()
        a.wait(30)
        assert b.stdin is not None and b.stdout is not None
        b.stdin.write("\n")
        b.stdin.flush()
        assert b.stdout.readline().strip() == "True", "b is the last holder"
        b.stdin.write("\n")
        b.stdin.flush()
        b.wait(30)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    assert refused(None).startswith("got it"), "the lock goes with its last holder"


def test_mapped_removes_and_verifies_run_at_once(tmp_path, scheduler_address):
    """Removes and verifies of disjoint parts take no destination lock: all parts run side by side."""
    src, dst, m = tmp_path / "src", tmp_path / "dst", tmp_path / "m"
    make_balanced(src, dirs=4, files_per_dir=20)
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    common = ["--scheduler", scheduler_address, "--no-progress"]
    run_pfs("scan", src, "-o", m, *common, check=True)
    run_pfs("cp", f"{src}/", dst, *common, check=True)
    parts = _parts(src, 4)

    def all_at_once(*commands: list) -> list[subprocess.CompletedProcess]:
        procs = [
            subprocess.Popen([*PFS, *map(str, c)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for c in commands
        ]
        return [subprocess.CompletedProcess(p.args, p.wait(300), *p.communicate()) for p in procs]

    verifies = all_at_once(*[["verify", src, dst, "--src-manifest", m, "--where", w, *common] for w in parts])
    assert [v.returncode for v in verifies] == [0] * 4, [v.stderr for v in verifies]
    removes = all_at_once(*[["rm", "--manifest", m, "--where", w, *common] for w in parts])
    assert [r.returncode for r in removes] == [0] * 4, [r.stderr for r in removes]
    assert not [p for p in src.rglob("*") if p.is_file()]  # every part's files went
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == sorted(  # the directories stay
        p.relative_to(dst) for p in dst.rglob("*") if p.is_dir()
    )


def test_killed_part_then_late_part(tmp_path):
    """A part killed mid-copy (workers and all) leaves a temp file; the other parts, started after, remove
    it when the last of them settles; the killed part's retry comes after the group settled (read-only
    directories, as a user's job): it is not refused, writes its files, settles again, and leaves nothing."""
    src = _tree(tmp_path)
    big = src / "d000" / "sub" / "big.dat"  # sorts first: part 0's
    big.write_bytes(os.urandom(1 << 20) * 8)
    os.utime(big.parent, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    m, dst = tmp_path / "m", tmp_path / "dst"
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PFS_LOCK_DIR": str(tmp_path / "locks")}
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    run_pfs("scan", src, "-o", m, "--no-progress", check=True, env=env, drop_dac=True)
    parts = _parts(src, PARTS)

    def cp(where: str, *more: str) -> list[str]:
        return [*DROP_DAC, *PFS, "cp", "--manifest", str(m), "--where", where, str(dst), "--no-progress", *more]

    # part 0 on its own embedded cluster, paced: killed (its process group: driver and workers) mid-file
    slow = cp(parts[0], "--split-size", "1M", "--max-bandwidth", "2M", "--workers", "1")
    killed = subprocess.Popen(
        slow, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 180
        while killed.poll() is None and not _temps(dst):
            assert time.monotonic() < deadline, "no temp file appeared"
            time.sleep(0.02)
        assert killed.poll() is None, killed.communicate()[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(killed.pid, signal.SIGKILL)
        killed.communicate(timeout=60)
    assert _temps(dst), "the kill left a temp file"

    with _cluster_without_dac(tmp_path) as address:
        others = [
            subprocess.Popen(
                cp(w, "--scheduler", address), env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            for w in parts[1:]
        ]
        outs = [p.communicate(timeout=300)[0] for p in others]
        failed = [o.decode() for p, o in zip(others, outs, strict=True) if p.returncode]
        assert not failed, failed[0]
        assert not _temps(dst), "the group's last part removes a killed part's temp files"
        assert not big.with_name("big.dat").relative_to(src).as_posix() in tree_digest(dst)  # noqa: E713 (part 0's)
        late = run_pfs(*cp(parts[0], "--scheduler", address)[len(DROP_DAC) + len(PFS) :], env=env, drop_dac=True)
    assert late.returncode == 0, late.stdout + late.stderr
    assert tree_digest(dst) == tree_digest(src)
    assert _dir_meta(dst) == _dir_meta(src)
    assert not _temps(dst) and not glob.glob(f"{tmp_path}/locks/*.parts/*")


def _temps(root) -> list[str]:
    return glob.glob(f"{root}/**/.*.pfs-tmp-*", recursive=True)
