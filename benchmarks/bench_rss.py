#!/usr/bin/env python3
"""Peak RSS of ``pfs scan`` (embedded default cluster) against tree size: driver and workers apart.

    benchmarks/bench_rss.py                          # bal100k, bal1000k, flat100k, flat1000k under /tmp
    benchmarks/bench_rss.py --dir /srv/x --repeat 2  # trees made (and removed) under /srv/x
    benchmarks/bench_rss.py --trees bal100k,bal1000k --keep

The issue's target: peak client RSS flat in tree size (1M entries at most 1.5x of 100k).  Each run is
the whole command, warm cache.  Memory:

- ``driver``: the ``pfs`` process's own peak (``VmHWM`` as it leaves), which holds the embedded scheduler too;
- ``worker``: the largest peak of its child processes (``RUSAGE_CHILDREN`` as it leaves, after the
  cluster's worker processes are joined): the forked Dask workers.  A forked worker's RSS counts the pages
  it still shares with the driver, so it is an upper bound on what the worker costs on its own.

Both are exact (the kernel's high-water marks), where sampling ``/proc/PID/status`` missed a worker's
last growth: a worker read at 198 MB every 20 ms had peaked at 220-241.  ``0`` workers: the driver
walked the whole tree itself (``dask_pfs.scan.engine.TreeScan.start_here``) and no cluster started.

CPU is user + system of the whole process tree (``RUSAGE_CHILDREN`` around the command), per entry;
wall time moves with the host's load, CPU and RSS much less.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import REPO, make_balanced, make_flat

# `pfs ...` as `python -m dask_pfs ...` runs it, recording the driver's peak RSS and its reaped children's
# largest on the way out (the CLI leaves through `exit_now`, after the embedded cluster is closed and its
# worker processes joined).  The driver's is `VmHWM`, not `getrusage(RUSAGE_SELF).ru_maxrss`: the kernel
# keeps the larger of the process's own peak and that of the image it replaced at exec, here a copy of
# this benchmark's process (`subprocess` uses vfork), which holds its own peak from making the trees.
WRAP = """
import json, os, resource, sys
import dask_pfs.cli as cli
leave = cli.exit_now
def exit_now(code):
    with open("/proc/self/status") as f:
        me = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(os.environ["PFS_BENCH_RSS"], "w") as f:
        json.dump({"driver_kb": me, "children_kb": kids}, f)
    leave(code)
cli.exit_now = exit_now
sys.argv[0] = "pfs"
cli.main()
"""


@dataclass
class Run:
    wall: float
    cpu: float
    driver_kb: int
    worker_kb: int


def run(args: list[str]) -> Run:
    """``pfs ARGS``: wall, CPU of the whole process tree, peak RSS of the driver and of its largest child
    process (a forked Dask worker)."""
    with tempfile.NamedTemporaryFile(prefix="pfs-bench-rss-", suffix=".json") as note:
        env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_BENCH_RSS": note.name}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", WRAP, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO, env=env
        )
        _, status, _ = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"pfs {' '.join(args)}: {err[-2000:]}")
        peaks = json.loads(Path(note.name).read_text())
    return Run(
        wall=wall,
        cpu=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        driver_kb=peaks["driver_kb"],
        worker_kb=peaks["children_kb"],
    )


def make(work: Path, name: str) -> tuple[Path, int]:
    """``balNk`` or ``flatNk`` under ``work`` (reused when a previous --keep left it)."""
    shape = re.fullmatch(r"(bal|flat)(\d+)k", name)
    if shape is None:
        raise SystemExit(f"{name}: a tree is balNk or flatNk")
    kind, n = shape[1], int(shape[2]) * 1000
    tree = work / name
    marker = work / f".{name}.done"
    if marker.exists():
        return tree, int(marker.read_text())
    shutil.rmtree(tree, ignore_errors=True)
    entries = make_balanced(tree, n) if kind == "bal" else make_flat(tree, n)
    marker.write_text(str(entries))
    return tree, entries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, help="where the trees go (default: a new directory under /tmp)")
    ap.add_argument("--trees", default="bal100k,bal1000k,flat100k,flat1000k")
    ap.add_argument("--repeat", type=int, default=2, help="runs per tree; the median is printed")
    ap.add_argument("--keep", action="store_true", help="keep the trees (reused by the next run with --dir)")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="pfs-bench-rss-"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix="pfs-bench-rss-out-"))
    rows: dict[str, tuple[int, Run]] = {}
    try:
        print(f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; median of {args.repeat}, warm cache")
        print("| tree | entries | wall s | CPU s (tree) | CPU us/entry | driver peak MB | worker peak MB |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name in args.trees.split(","):
            tree, entries = make(work, name)
            subprocess.run(["find", str(tree)], stdout=subprocess.DEVNULL, check=True)  # warm the cache
            cmd = ["scan", str(tree), "-o", str(out / "m"), "--overwrite", "--no-progress"]
            runs = [run(cmd) for _ in range(args.repeat)]
            med = Run(*(statistics.median(getattr(r, f) for r in runs) for f in Run.__dataclass_fields__))
            rows[name] = (entries, med)
            print(
                f"| {name} | {entries:,} | {med.wall:.2f} | {med.cpu:.2f} | {med.cpu / entries * 1e6:.1f} | "
                f"{med.driver_kb / 1024:.0f} | {med.worker_kb / 1024:.0f} |",
                flush=True,
            )
            if not args.keep:
                shutil.rmtree(tree, ignore_errors=True)
                (work / f".{name}.done").unlink(missing_ok=True)
        for kind in ("bal", "flat"):
            small, big = rows.get(f"{kind}100k"), rows.get(f"{kind}1000k")
            if small and big:
                (_, s), (_, b) = small, big
                print(
                    f"{kind} 1M/100k: driver {b.driver_kb / s.driver_kb:.2f}x, "
                    f"largest process {max(b.driver_kb, b.worker_kb) / max(s.driver_kb, s.worker_kb):.2f}x"
                    + (f", worker {b.worker_kb / s.worker_kb:.2f}x" if s.worker_kb and b.worker_kb else "")
                )
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
