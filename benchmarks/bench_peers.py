#!/usr/bin/env python3
"""pfs beside its peers on one tree, interleaved, cold: rclone, fpsync, find, cp, rm -rf, du.

For each run and action, the tools run one after the other (the order rotates per run), each
after ``nas.sh lat-remount`` (cold caches) when the tree is on latfs.  Every row has wall seconds,
CPU seconds of the tool's whole process tree (``os.wait4``: pfs's helpers and workers count),
and, on latfs, the requests it served and the most it ever had in flight (``/run/latfs/stats``).

    .venv/bin/python benchmarks/bench_peers.py --tree /mnt/lat/bal20k --backing /srv/latfs/backing/bal20k \
        --local /srv/bench-local/peers --runs 2 --json benchmarks/raw/peers-$(date +%F).jsonl

rm works on a fresh copy made in the backing directory (untimed, no latfs round trips); cp and sync write
to the local disk (``--local``), a fresh directory each time.

``--fresh`` (latfs, with ``--backing``): instead of remounting, every run reads a fresh copy of the tree made
in the backing directory beside it (``peers-fresh``), cold in the kernel's caches while the shared mount stays
up for others.  ``--base DIR`` adds "pfs (base)": the same pfs command with another checkout first on
``PYTHONPATH`` (its ``dask_pfs`` and ``operators``, with its own compiled core), for A/B ratios.
"pfs (warm)" is ``dask_pfs.scan`` called in one long-lived interpreter that has already imported pfs and
scanned once (what a warm per-user process leaves of a command): its wall and the CPU of that process and
the helpers it forked, per call.

    .venv/bin/python benchmarks/bench_peers.py --tree /mnt/lat/h30s/tree0 --backing /srv/latfs/backing/h30s/tree0 \
        --local /tmp/peers --actions scan --only "pfs,pfs (base),rclone lsf -R" --fresh --base /tmp/base --runs 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

NAS = "/work/shared/nas/nas.sh"
PFS = [sys.executable, "-m", "dask_pfs"]
STATS = Path("/run/latfs/stats")
CLUSTER = ["env", "PFS_ALONE_SECONDS=0"]  # the embedded cluster from the start (before dask_pfs.runtime.here)


def lat_stats() -> dict[str, float]:
    if not STATS.exists():
        return {}
    subprocess.run([NAS, "lat-stats"], capture_output=True)
    out = {}
    for line in STATS.read_text().splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            out[key] = float(value)
    return out


def tools(tree: str, dst: str, rmme: str, threads: int | None, base: str = "") -> dict[str, dict[str, list[str]]]:
    t = ["--threads", str(threads)] if threads else []
    scan = ["scan", tree, "-o", f"{dst}.m", "--overwrite", "--no-progress", *t]
    return {
        "scan": {
            "pfs": [*PFS, *scan],
            "pfs (base)": ["env", f"PYTHONPATH={base}", *PFS, *scan],
            "pfs (warm)": [],  # Warm
            "pfs (cluster)": [*CLUSTER, *PFS, "scan", tree, "-o", f"{dst}.m", "--overwrite", "--no-progress", *t],
            "rclone lsf -R": ["rclone", "lsf", "-R", "--checkers", "64", tree],
            "find": ["find", tree, "-printf", "%s\n"],
        },
        "cp": {
            "pfs": [*PFS, "cp", f"{tree}/", dst, "--no-progress", *t],
            "pfs (cluster)": [*CLUSTER, *PFS, "cp", f"{tree}/", dst, "--no-progress", *t],
            "rclone copy": ["rclone", "copy", "--transfers", "64", "--checkers", "64", tree, dst],
        },
        "sync": {
            "pfs": [*PFS, "sync", f"{tree}/", dst, "--no-progress", "-y", *t],
            "pfs (cluster)": [*CLUSTER, *PFS, "sync", f"{tree}/", dst, "--no-progress", "-y", *t],
            "fpsync": ["fpsync", "-n", "16", "-f", "1000", f"{tree}/", f"{dst}/"],
            "rclone sync": ["rclone", "sync", "--transfers", "64", "--checkers", "64", tree, dst],
        },
        "check": {
            "pfs verify": [*PFS, "verify", tree, f"{dst}.ref", "--no-progress", *t],
            "rclone check": ["rclone", "check", "--checkers", "64", "--one-way", tree, f"{dst}.ref"],
        },
        "size": {
            "pfs du": [*PFS, "du", tree, *t],
            "rclone size": ["rclone", "size", "--checkers", "64", tree],
            "du -s": ["du", "-s", tree],
        },
        "rm": {
            "pfs": [*PFS, "rm", rmme, "-y", "--no-progress", *t],
            "pfs (cluster)": [*CLUSTER, *PFS, "rm", rmme, "-y", "--no-progress", *t],
            "rm -rf": ["rm", "-rf", rmme],
            "rclone delete": ["rclone", "purge", "--checkers", "64", rmme],
        },
    }


def run(cmd: list[str], env: dict, timeout: float) -> tuple[float, float, int]:
    t0 = time.monotonic()
    # run from / : ``python -m`` puts the working directory first on sys.path, ahead of PYTHONPATH (--base)
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, cwd="/"
    )
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            os.killpg(proc.pid, 9)
        time.sleep(0.01)
    wall = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc:
        sys.stderr.write(f"{cmd[:4]}: exit {rc}: {proc.stderr.read().decode()[-300:]}\n")  # type: ignore[union-attr]
    return wall, usage.ru_utime + usage.ru_stime, rc


WARM = """
import json, resource, sys, time
import dask_pfs
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
for line in sys.stdin:
    tree, out = json.loads(line)
    c0, t0 = cpu(), time.monotonic()
    dask_pfs.scan(tree, out, overwrite=True)
    print(json.dumps([time.monotonic() - t0, cpu() - c0]), flush=True)
"""


class Warm:
    """One interpreter that has imported pfs: ``scan(tree, out)`` -> (wall, CPU) of one ``dask_pfs.scan``."""

    def __init__(self, env: dict, warm_up: str, out: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WARM], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/"
        )
        self.scan(warm_up, out)

    def scan(self, tree: str, out: str) -> tuple[float, float, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps([tree, out]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            return 0.0, 0.0, 1
        wall, cpu = json.loads(line)
        return wall, cpu, 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", required=True)
    ap.add_argument("--backing", help="the tree's directory behind latfs (fresh copies for rm are made there)")
    ap.add_argument("--local", required=True, help="a local scratch directory for cp/sync destinations")
    ap.add_argument("--actions", default="scan,cp,sync,rm")
    ap.add_argument("--only", default="", help="comma-separated tool names to run (default: all)")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fresh", action="store_true", help="latfs: a fresh copy of --backing per run, no remount")
    ap.add_argument("--base", type=Path, help="another checkout: adds the tool 'pfs (base)' (scan)")
    ap.add_argument(
        "--no-remount",
        action="store_true",
        help="on latfs, wait out its 1 s attribute and entry timeouts instead of `nas.sh lat-remount` "
        "(others' runs on the shared mount survive; the backing's page cache stays warm)",
    )
    args = ap.parse_args()
    local = Path(args.local)
    local.mkdir(parents=True, exist_ok=True)
    on_lat = args.tree.startswith("/mnt/lat")
    env = {k: v for k, v in os.environ.items() if k != "PFS_THREADS"} | {"PFS_DASHBOARD": "0"}
    env["XDG_CACHE_HOME"] = str(local / "cache")
    rows = []
    ref = local / "dst.ref"
    if "check" in args.actions and not ref.exists():
        subprocess.run(["cp", "-a", args.backing or args.tree, str(ref)], check=True)
    only = set(filter(None, args.only.split(",")))
    warm = None
    for r in range(args.runs):
        for action in args.actions.split(","):
            names = list(tools(args.tree, "", "", None)[action])
            names = names[r % len(names) :] + names[: r % len(names)]  # rotate the order per run
            for name in names:
                if only and name not in only:
                    continue
                dst, rmme = local / "dst", None
                shutil.rmtree(dst, ignore_errors=True)
                shutil.rmtree(f"{dst}.m", ignore_errors=True)
                if action == "rm":
                    assert args.backing, "rm needs --backing"
                    copy = Path(args.backing).parent / "peers-rmme"
                    shutil.rmtree(copy, ignore_errors=True)
                    subprocess.run(["cp", "-a", args.backing, str(copy)], check=True)
                    rmme = str(Path(args.tree).parent / "peers-rmme")
                tree = args.tree
                if args.fresh:
                    assert args.backing, "--fresh needs --backing"
                    copy = Path(args.backing).parent / "peers-fresh"
                    shutil.rmtree(copy, ignore_errors=True)
                    subprocess.run(["cp", "-a", args.backing, str(copy)], check=True)
                    tree = str(Path(args.tree).parent / "peers-fresh")
                    time.sleep(1.5)  # the rmtree's entries out of the mount's 1 s caches
                elif on_lat and args.no_remount:
                    time.sleep(1.5)
                elif on_lat:
                    subprocess.run([NAS, "lat-remount"], capture_output=True, check=True)
                if name == "pfs (base)" and not args.base:
                    continue
                cmd = tools(tree, str(dst), rmme or "", args.threads, str(args.base))[action][name]
                if name == "pfs (warm)" and warm is None:
                    warm = Warm(env, args.tree, str(local / "warm.m"))
                before = lat_stats()
                if warm is not None and name == "pfs (warm)":
                    wall, cpu, rc = warm.scan(tree, f"{dst}.m")
                else:
                    wall, cpu, rc = run(cmd, env, args.timeout)
                after = lat_stats()
                row = {"run": r, "action": action, "tool": name, "wall": round(wall, 3), "cpu": round(cpu, 3)}
                row |= {"rc": rc, "threads": args.threads, "tree": tree, "load": round(os.getloadavg()[0], 1)}
                if after:
                    row["ops"] = after.get("ops", 0) - before.get("ops", 0)
                    row["inflight_max"] = after.get("inflight_max")
                    row["latfs_cpu"] = round(
                        after.get("cpu_user_s", 0) + after.get("cpu_sys_s", 0)
                        - before.get("cpu_user_s", 0) - before.get("cpu_sys_s", 0), 3
                    )  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json:
                    with args.json.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    print("| action | tool | wall s (median) | CPU s | runs |")
    print("|---|---|---|---|---|")
    for action in args.actions.split(","):
        for name in tools(args.tree, "", "", None)[action]:
            mine = [x for x in rows if x["action"] == action and x["tool"] == name]
            if mine:
                w = statistics.median(x["wall"] for x in mine)
                c = statistics.median(x["cpu"] for x in mine)
                print(f"| {action} | {name} | {w:.2f} | {c:.2f} | {', '.join(str(x['wall']) for x in mine)} |")


if __name__ == "__main__":
    main()
