#!/usr/bin/env python3
"""Per-file CPU of the core's checksums (``operators._native.checksum_files``), this checkout beside
another one (``--baseline``), interleaved: the paired figure issue 28 asks for.

    benchmarks/bench_checksum_core.py --baseline /path/to/other/checkout [--files 20000 --size 2048]

Each run is a fresh interpreter of the checkout's own ``.venv`` hashing every file of one tree of
small files (warm cache: the per-file cost of open, checks and read, not the disk) with 4 core
threads; CPU is the process's user+system time, divided by the files.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ONE = """
import resource, sys
from operators import _native
root, n = sys.argv[1].encode(), int(sys.argv[2])
rels = [f"d{i // 200:04}/f{i % 200:04}".encode() for i in range(n)]
r0 = resource.getrusage(resource.RUSAGE_SELF)
assert len(_native.checksum_files(root, rels, "xxh3", 4)) == n
r1 = resource.getrusage(resource.RUSAGE_SELF)
print((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / n * 1e6)
"""


def make_tree(root: Path, files: int, size: int) -> None:
    if (root / ".done").exists():
        return
    for i in range(files):
        d = root / f"d{i // 200:04}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i % 200:04}").write_bytes(os.urandom(size))
    (root / ".done").touch()


def per_file(checkout: Path, root: Path, files: int) -> float:
    out = subprocess.run(
        [str(checkout / ".venv/bin/python"), "-c", ONE, str(root), str(files)],
        cwd=checkout, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--tree", type=Path, default=Path("/var/tmp/pfs-bench-sums"))
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=8)
    args = ap.parse_args()
    make_tree(args.tree, args.files, args.size)
    this, base = [], []
    for _ in range(args.repeat):  # interleaved, so load changes hit both alike
        base.append(per_file(args.baseline, args.tree, args.files))
        this.append(per_file(REPO, args.tree, args.files))
    b, t = statistics.median(base), statistics.median(this)
    print("| checkout | CPU us/file (median) | runs |\n|---|---:|---|")
    print(f"| baseline {args.baseline} | {b:.2f} | {' '.join(f'{x:.2f}' for x in base)} |")
    print(f"| this | {t:.2f} | {' '.join(f'{x:.2f}' for x in this)} |")
    print(f"\nthis / baseline: {t / b:.2f}")


if __name__ == "__main__":
    main()
