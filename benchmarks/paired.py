"""Paired local comparison of two pfs checkouts: ``pfs scan``, ``cp`` and ``rm`` on one local tree.

For a refactor's "no slowdown" check when the NAS harness is too loaded to trust: both checkouts
run the same commands on the same tree (``/work/shared/nas/mktree.py``), interleaved A B A B ...
so load that drifts over the hour falls on both alike.  Each run is timed by ``/usr/bin/time``:
wall seconds and the CPU (user + sys) of the whole process tree (driver and Dask workers).

    python benchmarks/paired.py --a /tmp/old5d --b . --runs 5 --files 20000 --dir /tmp/paired

Prints one table (median and spread per command and checkout, and the B/A ratio of medians).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MKTREE = "/work/shared/nas/mktree.py"


def timed(checkout: Path, args: list[str], python: str) -> tuple[float, float]:
    """(wall s, user+sys s of the process tree) of ``pfs ARGS`` run from ``checkout``."""
    with tempfile.NamedTemporaryFile("r") as out:
        cmd = ["/usr/bin/time", "-f", "%e %U %S", "-o", out.name, python, "-m", "dask_pfs", *args]
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        subprocess.run(cmd, cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall, user, sys_ = (float(x) for x in out.read().split()[-3:])
    return wall, user + sys_


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=Path, required=True, help="the old checkout")
    ap.add_argument("--b", type=Path, required=True, help="the new checkout")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "pfs-paired")
    ap.add_argument("--threads", type=int, default=0, help="fixed I/O threads per worker (0: auto-tuned)")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    tree = a.dir / "tree"
    if not tree.exists():
        subprocess.run([a.python, MKTREE, str(tree), "--files", str(a.files), "--shape", "balanced"], check=True)
    common = ["--workers", str(a.workers), "--no-progress"]
    if a.threads:
        common += ["--threads", str(a.threads)]
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for i in range(a.runs):
        for label, checkout in (("A", a.a.resolve()), ("B", a.b.resolve())):
            work = a.dir / f"run-{label}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            steps = {
                "scan": ["scan", str(tree), "-o", str(work / "m"), *common],
                "cp": ["cp", f"{tree}/", str(work / "copy"), *common],
                "rm": ["rm", str(work / "copy"), "-y", *common],
            }
            for name, args in steps.items():
                wall, cpu = timed(checkout, args, a.python)
                rows.setdefault((name, label), []).append((wall, cpu))
                print(f"run {i + 1} {label} {name}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
            shutil.rmtree(work, ignore_errors=True)
    print("\n| command | checkout | wall s (median, min-max) | CPU s (median, min-max) | B/A wall | B/A CPU |")
    print("|---|---|---|---|---|---|")
    for name in ("scan", "cp", "rm"):
        med = {}
        for label in ("A", "B"):
            walls = [w for w, _ in rows[(name, label)]]
            cpus = [c for _, c in rows[(name, label)]]
            med[label] = (statistics.median(walls), statistics.median(cpus))
            ratio = f"{med['B'][0] / med['A'][0]:.2f} | {med['B'][1] / med['A'][1]:.2f}" if label == "B" else " | "
            print(
                f"| {name} | {label} | {med[label][0]:.2f} ({min(walls):.2f}-{max(walls):.2f}) "
                f"| {med[label][1]:.2f} ({min(cpus):.2f}-{max(cpus):.2f}) | {ratio} |"
            )


if __name__ == "__main__":
    main()
