#!/usr/bin/env python3
"""``pfs scan`` on the compiled core beside ``find -printf '%s\\n'`` (and ``pfu`` of pfutils when the
venv has it): wall time and CPU of the whole process tree per entry, warm cache.

    benchmarks/bench_core.py                       # makes a 200k-entry balanced tree and a 1-file dir
    benchmarks/bench_core.py --tree DIR --repeat 3 # an existing tree
    benchmarks/bench_core.py --flat 200000         # also a single directory of that many entries
    benchmarks/bench_core.py --baseline DIR        # also pfs from another checkout (e.g. `git archive` of main)

CPU is user + system of every process the command ran (``RUSAGE_CHILDREN`` around it), so pfs's
workers and the embedded scheduler count; on a loaded host wall time moves much more than CPU does.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PFS = [sys.executable, "-m", "dask_pfs"]


def make_balanced(root: Path, files: int, fanout: int = 10, depth: int = 4) -> int:
    """Empty files dealt over ``fanout**depth`` leaf directories; returns the entry count."""
    leaves = [root]
    for _ in range(depth):
        leaves = [d / f"d{i}" for d in leaves for i in range(fanout)]
    per = max(1, files // len(leaves))
    for d in leaves:
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per):
            (d / f"f{i:05}").touch()
    return sum(1 for _ in root.rglob("*"))


def make_flat(root: Path, files: int) -> int:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (root / f"f{i:07}").touch()
    return files


def run(cmd: list[str], cwd: Path = REPO) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process tree) of one command, run in ``cwd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(cwd)}  # `python -m dask_pfs` imports the checkout in cwd
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=cwd, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tools(tree: Path, out: Path, baseline: Path | None) -> dict[str, tuple[list[str], Path]]:
    scan = [*PFS, "scan", str(tree), "-o", str(out), "--overwrite", "--no-progress"]
    found = {"find -printf %s": (["find", str(tree), "-printf", "%s\\n"], REPO), "pfs scan": (scan, REPO)}
    if baseline is not None:
        found["pfs scan (baseline)"] = (scan, baseline)
    pfu = shutil.which("pfu", path=str(Path(sys.executable).parent))
    if pfu:
        found["pfu (pfutils)"] = ([pfu, "du", str(tree)], REPO)
    return found


def bench(tree: Path, entries: int, repeat: int, baseline: Path | None) -> list[str]:
    out = Path(tempfile.mkdtemp(prefix="pfs-bench-core-")) / "m"
    lines = []
    for _ in range(1):  # warm the cache
        subprocess.run(["find", str(tree)], stdout=subprocess.DEVNULL, check=True)
    # round robin, not tool after tool: a shared host's load changes during a run, and each
    # tool's median should see the same spread of it
    found = tools(tree, out, baseline)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in found}
    for _ in range(repeat):
        for name, (cmd, cwd) in found.items():
            runs[name].append(run(cmd, cwd))
    results = {
        name: (statistics.median(r[0] for r in got), statistics.median(r[1] for r in got)) for name, got in runs.items()
    }
    shutil.rmtree(out.parent, ignore_errors=True)
    find_wall = results["find -printf %s"][0]
    for name, (wall, cpu) in results.items():
        lines.append(
            f"| {tree.name} | {entries:,} | {name} | {wall:.2f} | {find_wall / wall:.2f}x | {cpu:.2f} | "
            f"{cpu / max(entries, 1) * 1e6:.1f} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, help="an existing tree (else a balanced one is made)")
    ap.add_argument("--files", type=int, default=200_000)
    ap.add_argument("--flat", type=int, default=0, help="also a single directory of this many entries")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout of pfs to run beside this one")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pfs-bench-core-trees-"))
    try:
        trees = []
        one = work / "one-file"
        one.mkdir()
        (one / "f").write_text("x")
        trees.append((one, 1))
        if args.tree:
            trees.append((args.tree, sum(1 for _ in args.tree.rglob("*"))))
        else:
            bal = work / f"bal{args.files // 1000}k"
            trees.append((bal, make_balanced(bal, args.files)))
        if args.flat:
            flat = work / f"flat{args.flat // 1000}k"
            trees.append((flat, make_flat(flat, args.flat)))
        load = os.getloadavg()[0]
        print(f"host: {os.cpu_count()} cores, load {load:.1f}; median of {args.repeat} interleaved, warm cache")
        print("| tree | entries | tool | wall s | x find | CPU s (tree) | CPU us/entry |")
        print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
        for tree, entries in trees:
            for line in bench(tree, entries, args.repeat, args.baseline):
                print(line, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
