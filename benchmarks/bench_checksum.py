#!/usr/bin/env python3
"""Checksum throughput of ``pfs scan --checksum`` against plain reading (``cat tree/* > /dev/null``).

    benchmarks/bench_checksum.py --dir /var/tmp/pfs-bench-sum --files 8 --size-mib 256 [--algo xxh3]

Writes FILES files of SIZE MiB of random data (once), then, with caches dropped before each
(``drop_caches``, when allowed): ``cat`` of every file to /dev/null, and ``dask_pfs.scan.api`` with
and without ``checksum`` on a LocalCluster started beforehand (start-up is not reading).
Also times ``operators.checksum.checksum_local`` in-process on warm caches (hashing cost alone).
Prints a markdown table with MB/s and pfs as a percentage of cat (target: >= 70%).
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def drop() -> str:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "cold"
    except OSError:
        return "warm"


def timed(cmd: str) -> float:
    t0 = time.monotonic()
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/pfs-bench-sum"))
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--algo", default="xxh3")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    tree = args.dir / "tree"
    tree.mkdir(parents=True, exist_ok=True)
    chunk = os.urandom(1 << 20)
    for i in range(args.files):
        p = tree / f"f{i:03d}.bin"
        if not p.exists() or p.stat().st_size != args.size_mib << 20:
            with open(p, "wb") as f:
                for _ in range(args.size_mib):
                    f.write(chunk)
    total = args.files * (args.size_mib << 20)
    rows = []
    state = drop()
    rows.append(("cat tree/* > /dev/null", timed(f"cat {tree}/* > /dev/null"), state))
    from distributed import Client, LocalCluster

    from dask_pfs.scan.api import scan

    # the cluster is started before timing: its start-up (seconds, more on a loaded host) is not reading
    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=2, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        for algo in (None, args.algo):
            state = drop()
            t0 = time.monotonic()
            scan(tree, args.dir / "m", client, overwrite=True, checksum=algo)
            rows.append((f"pfs scan {'--checksum ' + algo if algo else '(no checksum)'}", time.monotonic() - t0, state))
    from operators.checksum import checksum_local

    timed(f"cat {tree}/* > /dev/null")  # warm
    t0 = time.monotonic()
    for p in sorted(glob.glob(f"{tree}/*")):
        checksum_local(p, args.algo)
    rows.append((f"checksum_local {args.algo}, 1 thread, warm", time.monotonic() - t0, "warm"))
    base = rows[0][1]
    print(f"\n{args.files} files x {args.size_mib} MiB = {total / 2**30:.1f} GiB in {tree}\n")
    print("| what | seconds | MB/s | vs cat | caches |")
    print("|---|---|---|---|---|")
    for what, seconds, state in rows:
        print(f"| {what} | {seconds:.2f} | {total / seconds / 1e6:,.0f} | {base / seconds:.0%} | {state} |")


if __name__ == "__main__":
    main()
