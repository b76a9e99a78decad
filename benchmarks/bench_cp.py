#!/usr/bin/env python3
"""Time ``pfs cp`` (cluster start-up included) against ``cp -r``, ``rsync -a`` and ``pfutils cp``.

Trees: a local source and a NAS source of the same content (the ../shared/nas harness,
/srv/bench-local/bal20k and /mnt/nas/bal20k).  Every tool copies into a fresh directory,
which is deleted afterwards; the sources are never written.  Caches are dropped before each
run (``--remount`` uses ``nas.sh remount`` for /mnt/nas, which also empties the GlusterFS
client's caches but disturbs anyone else using the mount; the default drops the kernel's
page, dentry and inode caches only).  A second benchmark copies one 4 GiB file local to local
beside ``cp``.

    benchmarks/bench_cp.py --local-src /srv/bench-local/bal20k --nas-src /mnt/nas/bal20k \\
        --local-dst /srv/bench-local --nas-dst /mnt/nas [--remount] [--big-dir /srv] [--tools pfs,cp,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PFS = str(REPO / ".venv/bin/pfs")
NAS_SH = "/work/shared/nas/nas.sh"
PFUTILS = next(
    (p for p in ("/work/shared/nas/.venv/bin/pfutils", "/opt/pfutils-venv/bin/pfutils") if os.path.exists(p)), None
)


PFS_ARGS: list[str] = []


def drop_caches(remount: bool, paths: list[str]) -> None:
    subprocess.run(["sync"], check=False)
    if remount and any(p.startswith("/mnt/nas") for p in paths):
        subprocess.run([NAS_SH, "remount"], check=True, capture_output=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def command(tool: str, src: str, dst: str, workers: int | None) -> list[str]:
    if tool == "pfs":
        cmd = [PFS, "cp", src, dst, "--no-progress", "--json", *PFS_ARGS]
        return cmd + (["--workers", str(workers)] if workers else [])
    if tool == "cp":
        return ["cp", "-r", src, dst]
    if tool == "rsync":
        return ["rsync", "-a", src + "/", dst]
    if tool == "pfutils":
        return [PFUTILS, "cp", "-r", "-j", "16", "-c", "100", src, dst]
    raise ValueError(tool)


def remove(path: str) -> None:
    """Delete a copy quickly (pfutils rm on the NAS, where rm -rf takes a minute)."""
    if not os.path.exists(path):
        return
    if path.startswith("/mnt/nas") and PFUTILS:
        subprocess.run([PFUTILS, "rm", "-r", "-y", "-j", "16", "-c", "100", path], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def count_files(root: str) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def run(tool: str, src: str, dst: str, args) -> dict:
    remove(dst)
    drop_caches(args.remount, [src, dst])
    t0 = time.monotonic()
    proc = subprocess.run(command(tool, src, dst, args.workers), capture_output=True, text=True)
    seconds = time.monotonic() - t0
    row = {"tool": tool, "src": src, "dst": dst, "seconds": round(seconds, 2), "rc": proc.returncode}
    if proc.returncode != 0:
        row["stderr"] = proc.stderr[-500:]
    if tool == "pfs" and proc.returncode == 0:
        summary = json.loads(proc.stdout)
        row["pfs_counts"] = summary["counts"]
        row["pfs_seconds_inside"] = summary["seconds"]
        row["pfs_phases"] = summary.get("phases")
    if args.verify:
        row["files"] = count_files(dst)
    return row


def bench_tree(args) -> list[dict]:
    rows = []
    tag = f"cpbench-{os.getpid()}"
    directions = [
        ("nas->local", args.nas_src, os.path.join(args.local_dst, tag)),
        ("local->nas", args.local_src, os.path.join(args.nas_dst, tag)),
    ]
    for direction, src, dst in directions:
        for tool in args.tools:
            if tool == "pfutils" and not PFUTILS:
                continue
            row = run(tool, src, dst, args) | {"direction": direction}
            print(json.dumps(row), flush=True)
            rows.append(row)
            remove(dst)
    return rows


def bench_big(args) -> list[dict]:
    base = Path(args.big_dir) / f"cpbench-big-{os.getpid()}"
    base.mkdir(parents=True)
    rows = []
    try:
        src = base / "src.bin"
        block = os.urandom(8 << 20)
        with open(src, "wb") as f:
            for _ in range(args.big_gib * 128):
                f.write(block)
        for tool in ("cp", "pfs"):
            dst = base / f"dst-{tool}.bin"
            drop_caches(False, [])
            cmd = ["cp", str(src), str(dst)] if tool == "cp" else command("pfs", str(src), str(dst), args.workers)
            t0 = time.monotonic()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            seconds = time.monotonic() - t0
            row = {"tool": tool, "big_gib": args.big_gib, "seconds": round(seconds, 2), "rc": proc.returncode}
            if tool == "pfs" and proc.returncode == 0:
                row["pfs_seconds_inside"] = json.loads(proc.stdout)["seconds"]
            row["MB/s"] = round(args.big_gib * 1024**3 / seconds / 1e6, 1)
            print(json.dumps(row), flush=True)
            rows.append(row)
            dst.unlink(missing_ok=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--local-src", default="/srv/bench-local/bal20k")
    p.add_argument("--nas-src", default="/mnt/nas/bal20k")
    p.add_argument("--local-dst", default="/srv/bench-local")
    p.add_argument("--nas-dst", default="/mnt/nas")
    p.add_argument("--tools", default="pfs,cp,rsync,pfutils", type=lambda s: s.split(","))
    p.add_argument("--workers", type=int, help="pfs --workers (default: pfs's own)")
    p.add_argument("--pfs-args", default="", help="extra pfs cp options, e.g. '--inplace --threads 16'")
    p.add_argument("--remount", action="store_true", help="nas.sh remount before each run (cold GlusterFS client)")
    p.add_argument("--verify", action="store_true", help="count the files of every copy")
    p.add_argument("--big-dir", help="also time one big file local->local in this directory")
    p.add_argument("--big-gib", type=int, default=4)
    p.add_argument("--skip-tree", action="store_true")
    p.add_argument("--json-out", help="append all rows to this JSON-lines file")
    args = p.parse_args()
    PFS_ARGS.extend(args.pfs_args.split())
    rows = [] if args.skip_tree else bench_tree(args)
    if args.big_dir:
        rows += bench_big(args)
    if args.json_out:
        with open(args.json_out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    by = {}
    for r in rows:
        by.setdefault(r.get("direction", f"{r.get('big_gib')} GiB file"), {})[r["tool"]] = r["seconds"]
    for direction, times in by.items():
        pfs = times.get("pfs")
        parts = [f"{t} {s:.1f}s" + (f" ({s / pfs:.1f}x pfs)" if pfs and t != "pfs" else "") for t, s in times.items()]
        print(f"{direction}: " + ", ".join(parts))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
