#!/usr/bin/env python3
"""Benchmark ``pfs scan`` beside ``find -printf '%s\\n'``, ``du -s`` and a plain 64-thread scandir walk.

    benchmarks/bench_scan.py /mnt/nas/bal20k /mnt/nas/flat50k [--repeat 3] [--out FILE]
    benchmarks/bench_scan.py --rss /srv/bench-local/rss   # client peak RSS, 100k vs 1M entries

Every run starts cold (``nas.sh remount`` for /mnt/nas paths, else drop_caches) unless ``--warm``.
``pfs scan`` is timed as a whole command: Python start-up, the embedded LocalCluster, the walk and the
manifest write.  Prints a markdown table per tree with ratios against ``find``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import NAS, PFS, REPO, Run, loadavg, table, timed

PWALK = [sys.executable, str(NAS / "pwalk.py"), "-j", "64", "--stat"]


def count_files(path: str) -> int:
    out = subprocess.run(["find", path, "-type", "f", "-printf", "."], capture_output=True, check=True).stdout
    return len(out)


def bench_tree(path: str, repeat: int, warm: bool, extra: list[str]) -> tuple[str, list[Run]]:
    out = Path(tempfile.mkdtemp(prefix="pfs-bench-scan-"))
    cache = None if warm else path
    tools = {
        "find": (["find", path, "-printf", "%s\\n"], False),
        "du -s": (["du", "-s", path], False),
        "pwalk -j64 --stat": (PWALK + [path], False),
        "pfs scan": (PFS + ["scan", path, "-o", str(out / "m"), "--overwrite", "--no-progress", *extra], False),
    }
    if not (NAS / "pwalk.py").exists():
        tools.pop("pwalk -j64 --stat")
    runs: dict[str, list[Run]] = {t: [] for t in tools}
    for i in range(repeat):
        for tool, (cmd, shell) in tools.items():
            r = timed(tool, cmd, cache, shell)
            runs[tool].append(r)
            print(f"  run {i + 1} {tool}: {r.seconds:.2f} s (busy {r.busy:.0f}%, {r.caches})", file=sys.stderr)
    shutil.rmtree(out, ignore_errors=True)
    med = []
    for rs in runs.values():
        best = sorted(rs, key=lambda r: r.seconds)[len(rs) // 2]
        best.seconds = statistics.median(r.seconds for r in rs)
        med.append(best)
    return path, med


def make_empty_tree(root: str, files: int, fanout: int = 10, depth: int = 3) -> None:
    """``files`` empty files dealt over a balanced tree: the client's memory depends on entry counts, not
    bytes, and a million empty files take minutes to make instead of the 37 GB of the sample tree."""
    import itertools
    import os

    dirs = [os.path.join(root, *(f"d{i:02d}" for i in path)) for path in itertools.product(range(fanout), repeat=depth)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    for i in range(files):
        os.close(os.open(os.path.join(dirs[i % len(dirs)], f"f{i:07d}"), os.O_CREAT | os.O_WRONLY, 0o644))


def bench_rss(base: str) -> str:
    """Client peak RSS for 100k vs 1M local entries, against an external cluster (so only the client is measured)."""
    rows = []
    sched = subprocess.Popen(
        [
            str(REPO / ".venv/bin/dask"),
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--scheduler-file",
            f"{base}/sched.json",
            "--no-dashboard",
        ],
        stderr=subprocess.DEVNULL,
    )
    import time

    while not Path(f"{base}/sched.json").exists():
        time.sleep(0.2)
    worker = subprocess.Popen(
        [
            str(REPO / ".venv/bin/dask"),
            "worker",
            "--scheduler-file",
            f"{base}/sched.json",
            "--nworkers",
            "2",
            "--nthreads",
            "4",
            "--no-dashboard",
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        for n in (100_000, 1_000_000):
            tree = f"{base}/tree{n}"
            if not Path(tree, ".done").exists():
                print(f"  making {n:,} files in {tree}", file=sys.stderr)
                make_empty_tree(tree, files=n)
                Path(tree, ".done").write_text("")
            r = timed(
                f"pfs scan {n:,}",
                PFS
                + [
                    "scan",
                    tree,
                    "-o",
                    f"{base}/m{n}",
                    "--overwrite",
                    "--no-progress",
                    "--scheduler-file",
                    f"{base}/sched.json",
                ],
                None,
            )
            rows.append((n, r))
    finally:
        worker.terminate()
        sched.terminate()
    ratio = rows[1][1].max_rss_kb / rows[0][1].max_rss_kb
    lines = ["| entries | seconds | client peak RSS (MiB) |", "| ---: | ---: | ---: |"]
    lines += [f"| {n:,} | {r.seconds:.1f} | {r.max_rss_kb / 1024:.0f} |" for n, r in rows]
    return "\n".join(lines) + f"\n\nRSS ratio 1M / 100k: **{ratio:.2f}** (target <= 1.5)\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="*")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--warm", action="store_true", help="do not drop caches (local warm-cache figure)")
    ap.add_argument("--rss", metavar="DIR", help="measure client RSS for 100k vs 1M entries under DIR")
    ap.add_argument("--out", help="append the tables to this markdown file")
    ap.add_argument("--pfs-args", default="", help="extra arguments for pfs scan, e.g. '--workers 2'")
    args = ap.parse_args()
    text = []
    for path in args.trees:
        n = count_files(path)
        la = loadavg()
        _, runs = bench_tree(path, args.repeat, args.warm, args.pfs_args.split())
        text.append(
            f"### `{path}` ({n:,} files, {'warm' if args.warm else 'cold'}, median of {args.repeat}, "
            f"load before {la:.1f})\n\n" + table(runs, "find", n) + "\n"
        )
    if args.rss:
        Path(args.rss).mkdir(parents=True, exist_ok=True)
        text.append("### Client peak RSS\n\n" + bench_rss(args.rss))
    report = "\n".join(text)
    print(report)
    if args.out:
        with open(args.out, "a") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
