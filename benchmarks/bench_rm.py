#!/usr/bin/env python3
"""Time ``pfs rm`` (cluster start-up included) against ``rm -rf`` and ``pfutils rm -r -y -j16``.

Each tool gets a fresh copy of the same seeded tree (made with the NAS harness's mktree.py),
caches are dropped before each run (``nas.sh remount`` for trees under /mnt/nas), and the
wall time, host load and ratios are printed (and appended as markdown with ``--out``).
Tool ``prm`` is the ceiling: ``probe/prm.py`` (raw threads, no Dask), so pfs's own overhead shows;
``prm-unlink`` is the same without the per-file lstat.

    benchmarks/bench_rm.py --tree-maker /work/shared/nas/mktree.py --dir /mnt/nas/rmbench-1 \\
        --files 20000 --shape balanced
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

from common import cpu_times
from report_nas import PRM, set_delay

REPO = Path(__file__).resolve().parent.parent
NAS_SH = "/work/shared/nas/nas.sh"
PFUTILS = ("/work/shared/nas/.venv/bin/pfutils", "/opt/pfutils-venv/bin/pfutils")


def make_tree(args, dest: str) -> float:
    """Write the tree; on /mnt/nas at ``nas.sh delay 0`` (the harness's advice), then back to ``--rtt-us``."""
    on_nas = dest.startswith("/mnt/nas/") and args.rtt_us is not None
    t0 = time.monotonic()
    if on_nas:
        set_delay(0)
    cmd = [sys.executable, args.tree_maker, dest, "--files", str(args.files), "--shape", args.shape, "-j", "32"]
    try:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    finally:
        if on_nas:
            set_delay(args.rtt_us)
    return time.monotonic() - t0


def drop_caches(args) -> str:
    """Cold caches: ``nas.sh remount`` if asked and possible (others may hold the mount), else drop_caches."""
    if args.remount:
        proc = subprocess.run([NAS_SH, "remount"], capture_output=True, text=True)
        if proc.returncode == 0:
            return "remount"
        print(f"remount failed ({proc.stderr.strip()}): dropping kernel caches only", file=sys.stderr)
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    return "drop_caches"


def tool_command(tool: str, args, dest: str) -> list[str]:
    if tool == "pfs":
        extra = ["--workers", str(args.workers)] if args.workers else []
        extra += ["--threads", str(args.threads)] if args.threads else []
        return [str(REPO / ".venv/bin/pfs"), "rm", dest, "-y", "--no-progress", "--json", *extra]
    if tool == "rm":
        return ["rm", "-rf", dest]
    if tool == "pfutils":
        exe = args.pfutils or next((p for p in PFUTILS if os.access(p, os.X_OK)), None)
        if exe is None:
            raise SystemExit(f"pfutils not found in {PFUTILS}; pass --pfutils")
        return [exe, "rm", "-r", "-y", "-j", str(args.pfutils_jobs), dest]
    if tool == "prm":  # the ceiling: raw threads, stat + unlink as listed, no Dask
        return [sys.executable, str(PRM), dest, "-j", str(args.prm_jobs), "--stat"]
    if tool == "prm-unlink":  # the same without the lstat: what the per-file stat costs
        return [sys.executable, str(PRM), dest, "-j", str(args.prm_jobs)]
    raise SystemExit(f"unknown tool {tool}")


def run_one(tool: str, args, dest: str) -> dict:
    if os.path.lexists(dest):
        shutil.rmtree(dest)
    made = make_tree(args, dest)
    cache = drop_caches(args)
    cmd = tool_command(tool, args, dest)
    load = os.getloadavg()[0]
    busy0, total0 = cpu_times()
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    busy1, total1 = cpu_times()
    ok = proc.returncode == 0 and not os.path.lexists(dest)
    row = {
        "tool": tool,
        "seconds": round(seconds, 2),
        "ok": ok,
        "files_per_s": round(args.files / seconds),
        "host_busy_pct": round(100 * (busy1 - busy0) / max(total1 - total0, 1)),
        "load_before": round(load, 1),
        "make_s": round(made, 1),
        "cache": cache,
        "cmd": " ".join(cmd),
    }
    if tool == "pfs" and proc.stdout.strip().startswith("{"):
        summary = json.loads(proc.stdout)
        row["pfs_internal_s"] = round(summary["seconds"], 2)
        row["pfs_tasks"] = summary["tasks"]
    if not ok:
        row["stderr"] = proc.stderr[-500:]
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree-maker", required=True, help="mktree.py of the NAS harness")
    p.add_argument("--dir", required=True, help="where to (re)create the tree for each run")
    p.add_argument("--files", type=int, default=20000)
    p.add_argument("--shape", default="balanced")
    p.add_argument("--tools", default="pfs,rm,pfutils")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--workers", type=int, help="pfs: worker processes (default: pfs's own)")
    p.add_argument("--threads", type=int, help="pfs: I/O threads per worker")
    p.add_argument("--pfutils", help="pfutils executable")
    p.add_argument("--pfutils-jobs", type=int, default=16)
    p.add_argument("--prm-jobs", type=int, default=64, help="threads of the prm ceiling probe (tool 'prm')")
    p.add_argument(
        "--rtt-us",
        type=int,
        default=1000,
        help="on /mnt/nas: make each tree at nas.sh delay 0, time the run at this added RTT",
    )
    p.add_argument("--remount", action=argparse.BooleanOptionalAction, default=None, help="nas.sh remount first")
    p.add_argument("--out", help="append a markdown table to this file")
    args = p.parse_args()
    dest = os.path.abspath(args.dir)
    if args.remount is None:
        args.remount = dest.startswith("/mnt/nas/")
    rows = [run_one(tool, args, dest) for _ in range(args.repeat) for tool in args.tools.split(",")]
    best = {}
    for r in rows:
        if r["ok"]:
            best[r["tool"]] = min(best.get(r["tool"], float("inf")), r["seconds"])
    lines = [
        f"`{args.shape}` tree, {args.files:,} files, `{dest}`, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        "| tool | seconds | files/s | host busy % | load before | caches | ok |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    lines += [
        f"| {r['tool']} | {r['seconds']} | {r['files_per_s']:,} | {r['host_busy_pct']} "
        f"| {r['load_before']} | {r['cache']} | {r['ok']} |"
        for r in rows
    ]
    if "pfs" in best:
        lines.append("")
        for other in ("rm", "pfutils"):
            if other in best:
                lines.append(f"- pfs rm is {best[other] / best['pfs']:.2f}x faster than {other} (best of runs)")
        if "prm" in best:
            lines.append(f"- pfs rm runs at {100 * best['prm'] / best['pfs']:.0f}% of the raw-thread ceiling (prm)")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
