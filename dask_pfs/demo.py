"""``make demo``: build a sample tree, scan it on the embedded Dask cluster, query the manifest.

Run as ``python -m dask_pfs.demo --dir /tmp/pfs-demo``.  The tree is seeded, so the numbers
are the same on every machine.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import time

from .manifest import open_manifest
from .progress import human_bytes, make_reporter
from .scan import scan
from .sql import connect

EXTS = ("jpg", "png", "txt", "parquet", "ckpt", "log")


def make_sample_tree(root: str, files: int = 20_000, fanout: int = 8, depth: int = 3, seed: int = 1) -> None:
    """A balanced tree of small files with log-uniform sizes (the shape of a typical dataset)."""
    rng = random.Random(seed)
    dirs = [""]
    frontier = [""]
    for _ in range(depth):
        frontier = [f"{d}/d{i:02d}".lstrip("/") for d in frontier for i in range(fanout)]
        dirs.extend(frontier)
    for d in dirs:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    payload = rng.randbytes(1 << 20)
    now = time.time()
    for i in range(files):
        d = dirs[i % len(dirs)]
        size = int(2 ** rng.uniform(0, 19)) - 1
        path = os.path.join(root, d, f"sample_{i:06d}.{rng.choice(EXTS)}")
        with open(path, "wb") as f:
            f.write(payload[:size])
        age = rng.uniform(0, 400) * 86400
        os.utime(path, (now - age, now - age))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default="/tmp/pfs-demo")
    parser.add_argument("--files", type=int, default=20_000)
    args = parser.parse_args()
    tree = os.path.join(args.dir, "tree")
    out = os.path.join(args.dir, "manifest")
    if not os.path.isdir(tree):
        print(f"making a sample tree of {args.files:,} files in {tree} ...")
        make_sample_tree(tree, args.files)
    if os.path.isdir(out):
        shutil.rmtree(out)
    print(f"pfs scan {tree} -o {out}   (embedded Dask LocalCluster)")
    result = scan(tree, out, progress=make_reporter(None), on_dashboard=lambda link: print(f"dashboard: {link}"))
    c = result.counts
    print(
        f"\nscanned {c['entries']:,} entries ({c['files']:,} files, {c['directories']:,} directories), "
        f"{human_bytes(c['bytes'])} in {result.seconds:.1f} s including cluster start-up, {result.tasks} tasks"
    )
    m = open_manifest(out)
    con = connect(m)
    sql = f"""
        SELECT lower(regexp_extract(name, '\\.([^.]*)$', 1)) AS ext, count(*) AS files,
               sum(size) AS bytes, count(*) FILTER (WHERE mtime < now() - INTERVAL 180 DAY) AS older_180d
        FROM {m.relation_sql()} WHERE type = 'file' GROUP BY ALL ORDER BY bytes DESC"""
    print("\nDuckDB over the manifest (files per extension, and how many are older than 180 days):")
    print(con.sql(sql))
    print(f"try:  .venv/bin/pfs query {out} --where \"size > 1e5 AND name LIKE '%.jpg'\" --limit 5")
    print(f"      .venv/bin/pfs du {out} --depth 1")
    print(f"      duckdb -c \"SELECT count(*) FROM '{out}/*.parquet'\"")


if __name__ == "__main__":
    main()
