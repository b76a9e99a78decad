"""``make demo``: build a sample tree, scan it on the embedded Dask cluster, query the manifest.

Run as ``python -m dask_pfs.demo`` (a new private directory from ``mkdtemp``, mode 0700) or with
``--dir DIR``: a directory of yours (created 0700 when missing; refused when it is a symlink, another
user's, or writable by others, where a planted ``tree -> /etc`` would have root scan /etc into it).
The tree is seeded, so the numbers are the same on every machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import stat
import tempfile
import time

from dask_pfs.manifests.manifest import open_manifest
from dask_pfs.manifests.sql import connect
from dask_pfs.runtime.progress import human_bytes, make_reporter
from dask_pfs.scan.api import scan

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


def demo_dir(wanted: str | None) -> str:
    """A directory only this user can write: a new ``mkdtemp`` one, or ``wanted`` when it is safe to use."""
    if wanted is None:
        return tempfile.mkdtemp(prefix="pfs-demo-")  # mode 0700, a name nobody could plant in advance
    with contextlib.suppress(FileExistsError):
        os.mkdir(wanted, 0o700)
    st = os.lstat(wanted)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{wanted}: not a directory (a symlink?); give a directory of yours")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise PermissionError(f"{wanted}: owned by another user or writable by others; give a private directory")
    return wanted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default=None, help="a directory of yours (default: a new private temp directory)")
    parser.add_argument("--files", type=int, default=20_000)
    args = parser.parse_args()
    try:
        args.dir = demo_dir(args.dir)
    except PermissionError as exc:
        raise SystemExit(f"pfs demo: {exc}") from None
    print(f"demo directory: {args.dir} (remove it when done)")
    tree = os.path.join(args.dir, "tree")
    out = os.path.join(args.dir, "manifest")
    if not os.path.isdir(tree):
        print(f"making a sample tree of {args.files:,} files in {tree} ...")
        make_sample_tree(tree, args.files)
    if os.path.isdir(out):
        shutil.rmtree(out)
    print(f"pfs scan {tree} -o {out}   (no scheduler: the driver walks it, a local cluster joins if it lasts)")
    result = scan(tree, out, progress=make_reporter(None), on_dashboard=lambda link: print(f"dashboard: {link}"))
    c = result.counts
    print(
        f"\nscanned {c['entries']:,} entries ({c['files']:,} files, {c['directories']:,} directories), "
        f"{human_bytes(c['bytes'])} in {result.seconds:.1f} s, {result.tasks} tasks"
    )
    m = open_manifest(out)
    con = connect(m)
    sql = f"""
        SELECT lower(regexp_extract(name, '\\.([^.]*)$', 1)) AS ext, count(*) AS files,
               sum(size)::BIGINT AS bytes, count(*) FILTER (WHERE mtime < now() - INTERVAL 180 DAY) AS older_180d
        FROM {m.relation_sql()} WHERE type = 'file' GROUP BY ALL ORDER BY bytes DESC"""
    print("\nDuckDB over the manifest (files per extension, and how many are older than 180 days):")
    print(con.sql(sql))
    print(f"try:  .venv/bin/pfs query {out} --where \"size > 1e5 AND name LIKE '%.jpg'\" --limit 5")
    print(f"      .venv/bin/pfs du {out} --depth 1")
    print(f"      .venv/bin/pfs query {out} --select 'count(*)'")


if __name__ == "__main__":
    main()
