"""The NAS harness for report.py: bring it up, set the round trip, take the team lock, make seeded trees, probe.

Everything here drives ``/work/shared/nas`` through its own commands (``nas.sh up|status|delay``, ``mktree.py``);
it never runs ``nas.sh down`` (that deletes every tree).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from common import NAS, PFS, CpuMeter, drop_caches

NAS_SH = str(NAS / "nas.sh")
MKTREE = str(NAS / "mktree.py")
PSTAT_C = Path(__file__).resolve().parent / "probe" / "pstat.c"
PRM = Path(__file__).resolve().parent / "probe" / "prm.py"
SHAPES = {"bal": "balanced", "flat": "flat", "deep": "deep"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ensure_up(delay_us: int) -> None:
    """``nas.sh up`` only when ``nas.sh status`` fails (up is idempotent, but it restarts what is missing)."""
    if subprocess.run([NAS_SH, "status"], capture_output=True).returncode == 0:
        return
    log(f"NAS harness not up: nas.sh up {delay_us}")
    subprocess.run([NAS_SH, "up", str(delay_us)], check=True)


def current_delay() -> int:
    """The added round trip now (us), as ``nas.sh status`` reports it."""
    out = subprocess.run([NAS_SH, "status"], capture_output=True, text=True).stdout
    m = re.search(r"added RTT (\d+)us", out)
    if not m:
        raise SystemExit(f"cannot read the delay from nas.sh status:\n{out}")
    return int(m.group(1))


def set_delay(us: int) -> None:
    if current_delay() != us:
        subprocess.run([NAS_SH, "delay", str(us)], check=True, capture_output=True)
        time.sleep(0.5)


@contextmanager
def team_lock(path: str | None):
    """``flock`` the file HARNESS.md proposes, so cooperating benchmarks do not overlap (no-op without it)."""
    if not path or not os.path.isdir(os.path.dirname(path)):
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Tree:
    """A seeded mktree.py tree: ``bal20k`` = balanced, 20,000 files; ``report-quick-flat300`` = flat, 300."""

    name: str
    path: str
    shape: str
    files: int
    entries: int  # files + directories, the root included (what find prints)

    @classmethod
    def parse(cls, name: str, path: str) -> Tree:
        m = re.search(r"(bal|flat|deep)(\d+)(k?)$", name)
        if not m:
            raise SystemExit(f"tree name {name!r}: want (bal|flat|deep)N[k], e.g. bal20k, flat100k, deep300")
        shape, files = SHAPES[m.group(1)], int(m.group(2)) * (1000 if m.group(3) else 1)
        out = subprocess.run(
            [sys.executable, MKTREE, "/nonexistent", "--files", str(files), "--shape", shape, "--dry-run"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        dirs = int(re.search(r"(\d+) dirs", out).group(1))
        return cls(name, path, shape, files, files + dirs)

    def mktree_cmd(self, dest: str) -> list[str]:
        return [sys.executable, MKTREE, dest, "--files", str(self.files), "--shape", self.shape, "-j", "32"]


def marker(path: str) -> Path:
    p = Path(path)
    return p.parent / f".{p.name}.done"


def make_tree(tree: Tree, dest: str, make_delay: int | None, run_delay: int, ours: bool) -> float:
    """Write ``tree`` at ``dest`` (at ``make_delay`` us, then back to ``run_delay``); returns seconds.

    ``ours``: dest is a scratch copy this script owns (rm copies, quick trees), so a leftover is deleted;
    anything else that exists without its marker is someone's unfinished tree, and we stop.
    """
    if os.path.lexists(dest):
        if not ours:
            raise SystemExit(f"{dest} exists without {marker(dest)}: unfinished or someone else's; remove it")
        remove_tree(dest)
    if make_delay is not None:
        set_delay(make_delay)
    t0 = time.monotonic()
    try:
        subprocess.run(tree.mktree_cmd(dest), stdout=subprocess.DEVNULL, check=True)
    finally:
        if make_delay is not None:
            set_delay(run_delay)
    return time.monotonic() - t0


def ensure_tree(tree: Tree, make_delay: int | None, run_delay: int, ours: bool) -> None:
    """Make a tree once, with a ``.NAME.done`` marker (command, wall time) as HARNESS.md describes."""
    if marker(tree.path).exists():
        return
    log(f"making {tree.path} ({tree.files:,} files, {tree.shape})")
    seconds = make_tree(tree, tree.path, make_delay, run_delay, ours)
    cmd = " ".join(["mktree.py", *tree.mktree_cmd(tree.path)[2:]])
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    marker(tree.path).write_text(f"{cmd}\nmade by benchmarks/report.py\nwall_s={seconds:.1f} date={stamp}\n")


def remove_tree(path: str) -> None:
    """Delete a scratch tree (untimed): on the NAS with ``pfs rm`` (``rm -rf`` of a 20k tree at 5 ms takes
    minutes), then ``rm -rf`` for whatever is left or wherever pfs failed."""
    if not os.path.lexists(path):
        return
    if path.startswith("/mnt/nas"):
        subprocess.run([*PFS, "rm", path, "-y", "--no-progress"], check=False, capture_output=True)
    subprocess.run(["rm", "-rf", path], check=False)
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


def pstat_binary(work: Path) -> str:
    exe = work / "pstat"
    if not exe.exists() or exe.stat().st_mtime < PSTAT_C.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-Wall", "-pthread", "-o", str(exe), str(PSTAT_C)], check=True)
    return str(exe)


def path_list(tree: Tree, work: Path) -> Path:
    """The tree's file paths, taken once (every probe run stats the same list)."""
    lst = work / f"{tree.name}.paths"
    if not lst.exists() or lst.stat().st_size == 0:
        with open(lst, "w") as f:
            subprocess.run(["find", tree.path, "-type", "f"], stdout=f, check=True)
    return lst


def probe(exe: str, paths: Path, threads: int, cache_path: str, read: bool = False) -> dict:
    """One cold pstat run: ``threads`` lstat()s (``read``: whole-file reads) in flight over the tree's files,
    relative to their open parent directories (``-a``), as pfs and find do."""
    caches = drop_caches(cache_path)
    cmd = [exe, "-t", str(threads), "-a", *(["-R"] if read else [])]
    with open(paths) as f, CpuMeter() as meter:  # the whole probe, its untimed directory opens too
        out = subprocess.run(cmd, stdin=f, capture_output=True, text=True, check=True).stdout
    fields = dict(kv.split("=", 1) for kv in out.split())
    return {
        "threads": threads,
        "ops": int(fields["ops"]),
        "errors": int(fields["errors"]),
        "seconds": float(fields["seconds"]),
        "files_per_s": float(fields["ops_per_s"]),
        "bytes": int(fields.get("bytes", 0)),
        "lat_p50_us": float(fields["lat_p50_us"]),
        "relative": True,
        "dir_open_seconds": float(fields["dir_open_seconds"]),
        "caches": caches,
        **meter.fields(),
    }


def prm_probe(copy: str, threads: int) -> dict:
    """One cold ``prm.py --stat`` run (raw threads: lstat + unlink as listed, then the directories): the
    removal ceiling, doing the same per-file work as ``pfs rm``.  ``copy`` is a fresh copy; it is consumed."""
    caches = drop_caches(copy)
    cmd = [sys.executable, str(PRM), copy, "-j", str(threads), "--stat"]
    with CpuMeter() as meter:
        r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"(\d+) files, (\d+) dirs in ([\d.]+) s", r.stdout)
    if r.returncode != 0 or not m:
        return {
            "threads": threads,
            "ops": 0,
            "errors": 1,
            "seconds": None,
            "files_per_s": None,
            "caches": caches,
            "note": (r.stderr or r.stdout).strip()[-300:],
        }
    files, dirs, seconds = int(m[1]), int(m[2]), float(m[3])
    return {
        "threads": threads,
        "ops": files,
        "dirs": dirs,
        "errors": 0 if not os.path.lexists(copy) else 1,
        "seconds": seconds,
        "files_per_s": round(files / seconds, 1),
        "caches": caches,
        **meter.fields(),
    }
