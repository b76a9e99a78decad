"""What pruning and ``pfs diff`` cost: CPU per entry, not wall time alone (the host is shared).

1. ``Prune.decide`` per entry for typical patterns (the price a scan pays on every listed name);
2. a local tree where most entries sit below one excluded directory: ``pfs scan`` with and without
   ``--exclude``, beside ``find`` (wall, CPU of the whole process tree, entries);
3. ``pfs diff`` of two synthetic manifests of N rows (1% added, removed, changed): wall, CPU, peak RSS.

    .venv/bin/python benchmarks/bench_prune_diff.py [--tree-files 20000] [--diff-rows 1000000] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from operators.scan.prune import Prune  # noqa: E402
from operators.schema import SCHEMA  # noqa: E402


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (the command and every process it started, once reaped)."""
    c0, t0 = children_cpu(), time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(REPO), "PFS_DASHBOARD": "0"})  # fmt: skip
    return time.monotonic() - t0, children_cpu() - c0


def bench_decide(n: int = 200_000) -> None:
    paths = [f"proj/d{i % 500:03d}/sub{i % 7}/file{i}.{('dat', 'tmp', 'h5')[i % 3]}" for i in range(n)]
    for label, prune in (
        ("exclude '*.tmp', 'build/', '/scratch'", Prune(exclude=("*.tmp", "build/", "/scratch"))),
        ("include 'proj/d0*/**', '*.h5'", Prune(include=("proj/d0*/**", "*.h5"))),
        ("max-depth 3", Prune(max_depth=3)),
    ):
        c0 = time.process_time()
        for p in paths:
            prune.decide(p, False)
        per = (time.process_time() - c0) / n * 1e6
        print(f"decide  {label:<40} {per:6.2f} us CPU per entry")


def bench_scan(work: Path, files: int) -> None:
    tree = work / "tree"
    if not tree.exists():
        for i in range(files):
            d = tree / ("big" if i % 10 else "small") / f"d{i % 200:03d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"f{i}").write_bytes(b"x")
    pfs = [sys.executable, "-m", "dask_pfs"]
    find_wall, find_cpu = run(["find", str(tree), "-printf", ""])
    print(f"find    {find_wall:6.2f} s wall {find_cpu:6.2f} s CPU  ({files:,} files)")
    for label, extra in (("all", []), ("--exclude big/", ["--exclude", "big/"])):
        out = work / "m"
        shutil.rmtree(out, ignore_errors=True)
        wall, cpu = run([*pfs, "scan", str(tree), "-o", str(out), "--workers", "2", "--no-progress", *extra])
        print(f"scan    {label:<16} {wall:6.2f} s wall {cpu:6.2f} s CPU  ({wall / find_wall:5.1f}x find wall)")


def repeated(value: str, column: str, n: int) -> pa.Array:
    return pa.array([value] * n).dictionary_encode().cast(SCHEMA.field(column).type)


def synthetic_manifest(out: Path, rows: int, shift: int) -> None:
    """``rows`` files; ``shift`` moves a window so 1% are added and 1% removed; 1% change size."""
    out.mkdir(parents=True, exist_ok=True)
    step = 250_000
    for start in range(0, rows, step):
        idx = pa.array(range(start + shift, min(start + step, rows) + shift), pa.int64())
        n = len(idx)
        path = pa.compute.binary_join_element_wise("d", pa.compute.cast(pa.compute.divide(idx, 1000), pa.string()),
                                                   "/f", pa.compute.cast(idx, pa.string()), "")  # fmt: skip
        size = pa.compute.add(idx, pa.compute.multiply(pa.compute.equal(pa.compute.bit_wise_and(idx, 127), 0)
                                                       .cast(pa.int64()), shift))  # fmt: skip
        cols = {f.name: pa.nulls(n, f.type) for f in SCHEMA}
        cols.update(path=path, name=path, parent=repeated("d", "parent", n), depth=pa.array([2] * n, pa.int32()),
                    type=repeated("file", "type", n), size=size)  # fmt: skip
        pq.write_table(pa.table(cols, schema=SCHEMA), out / f"part-{start // step:07d}-0000.parquet")
    (out / "_manifest.json").write_text(
        f'{{"format": "pfs-manifest", "schema_version": 1, "root": "/x", "counts": {{"entries": {rows}}}}}'
    )


def bench_diff(work: Path, rows: int) -> None:
    synthetic_manifest(work / "v1", rows, 0)
    synthetic_manifest(work / "v2", rows, rows // 100)
    code = (
        "import resource, sys, time; from dask_pfs import diff; t = time.monotonic(); "
        f"r = diff({str(work / 'v1')!r}, {str(work / 'v2')!r}, {str(work / 'd.parquet')!r}); "
        "print(r.counts, round(time.monotonic() - t, 2), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
    )
    c0, t0 = children_cpu(), time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout.strip()  # fmt: skip
    wall, cpu = time.monotonic() - t0, children_cpu() - c0
    print(f"diff    {rows:,} rows each: {wall:6.2f} s wall {cpu:6.2f} s CPU ({cpu / rows * 1e6:.2f} us/row); "
          f"counts, seconds in diff(), peak RSS MiB: {out}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree-files", type=int, default=20_000)
    ap.add_argument("--diff-rows", type=int, default=1_000_000)
    ap.add_argument("--work", type=Path)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="pfs-bench-prune-"))
    bench_decide()
    bench_scan(work, args.tree_files)
    bench_diff(work, args.diff_rows)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
