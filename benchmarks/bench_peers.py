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

``--fresh``: each run reads a fresh copy of the tree made in latfs's backing directory (untimed), so no
entry is in the kernel's caches without remounting the shared mount.  ``--local`` on latfs (writing into
it) needs ``--local-backing``, its directory behind latfs, where the destination is cleared between runs.
Rows on latfs carry the requests by kind (``by_op``).
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
import threading
import time
from pathlib import Path

from common import measured_env, served_cpu  # benchmarks/ is on sys.path when this script runs
from lat_timeline import snapshot

NAS = "/work/shared/nas/nas.sh"
PFS = [sys.executable, "-m", "dask_pfs"]
STATS = Path("/run/latfs/stats")
# the embedded cluster from the start (before dask_pfs.runtime.here), in the command's own process
CLUSTER = ["env", "PFS_SERVER=off", "PFS_ALONE_SECONDS=0"]
ALONE = ["env", "PFS_ALONE_SECONDS=100000"]  # the driver and its helpers only: no cluster joins at 10 s


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


def tools(
    tree: str, dst: str, rmme: str, threads: int | None, fpj: int = 16, base: str | None = None
) -> dict[str, dict[str, list[str]]]:
    t = ["--threads", str(threads)] if threads else []
    old = ["env", f"PYTHONPATH={base}", *PFS]  # another checkout (--base), same venv and native core
    return {
        "scan": {
            "pfs": [*PFS, "scan", tree, "-o", f"{dst}.m", "--overwrite", "--no-progress", *t],
            "pfs (own process)": ["env", "PFS_SERVER=off", *PFS, "scan", tree, "-o", f"{dst}.m", "--overwrite"]
            + ["--no-progress", *t],
            "pfs (cluster)": [*CLUSTER, *PFS, "scan", tree, "-o", f"{dst}.m", "--overwrite", "--no-progress", *t],
            "rclone lsf -R": ["rclone", "lsf", "-R", "--checkers", "64", tree],
            "find": ["find", tree, "-printf", "%s\n"],
        },
        "cp": {
            "pfs": [*PFS, "cp", f"{tree}/", dst, "--no-progress", *t],
            "pfs (cluster)": [*CLUSTER, *PFS, "cp", f"{tree}/", dst, "--no-progress", *t],
            "pfs (alone)": [*ALONE, *PFS, "cp", f"{tree}/", dst, "--no-progress", *t],
            "pfs (base)": [*old, "cp", f"{tree}/", dst, "--no-progress", *t],
            "pfs --no-stream": [*PFS, "cp", f"{tree}/", dst, "--no-progress", "--no-stream", *t],
            "rclone copy": ["rclone", "copy", "--transfers", "64", "--checkers", "64", tree, dst],
        },
        "sync": {
            "pfs": [*PFS, "sync", f"{tree}/", dst, "--no-progress", "-y", *t],
            "pfs (cluster)": [*CLUSTER, *PFS, "sync", f"{tree}/", dst, "--no-progress", "-y", *t],
            "pfs (alone)": [*ALONE, *PFS, "sync", f"{tree}/", dst, "--no-progress", "-y", *t],
            "pfs (base)": [*old, "sync", f"{tree}/", dst, "--no-progress", "-y", *t],
            "fpsync": ["fpsync", "-n", str(fpj), "-f", "1000", f"{tree}/", f"{dst}/"],
            "rclone sync": ["rclone", "sync", "--transfers", "64", "--checkers", "64", tree, dst],
        },
        "check": {
            "pfs verify": [*PFS, "verify", tree, f"{Path(dst).parent}/dst.ref", "--no-progress", *t],
            "rclone check": ["rclone", "check", "--checkers", "64", "--one-way", tree, f"{Path(dst).parent}/dst.ref"],
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


class Sampler(threading.Thread):
    """latfs's requests in flight every 0.1 s while a tool runs: their peak and mean (latfs's own
    ``inflight_max`` is the peak since it was mounted, everyone's)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: list[float] = []
        self.halt = threading.Event()
        self.pid = int(Path("/run/latfs/pid").read_text()) if STATS.exists() else 0

    def run(self) -> None:
        while self.pid and not self.halt.wait(0.1):
            with contextlib.suppress(OSError, ValueError):
                self.seen.append(snapshot(self.pid).get("inflight", 0))


def run(cmd: list[str], env: dict, timeout: float) -> tuple[float, float, int]:
    """Wall, CPU of the whole process tree (and of the served child that ran it, when a pfs warm server
    did: ``common.served_cpu``), exit code."""
    t0 = time.monotonic()
    proc = subprocess.Popen(  # cwd /: ``python -m`` puts the working directory first on sys.path
        cmd, env=measured_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, cwd="/"
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
    stderr = proc.stderr.read().decode(errors="replace")  # type: ignore[union-attr]
    if rc:
        sys.stderr.write(f"{cmd[:4]}: exit {rc}: {stderr[-300:]}\n")
    return wall, usage.ru_utime + usage.ru_stime + served_cpu(stderr), rc


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
    ap.add_argument("--fresh", action="store_true", help="a fresh copy of --backing for every run (cold, no remount)")
    ap.add_argument("--local-backing", help="--local's directory behind latfs, when --local is on latfs")
    ap.add_argument("--fpsync-jobs", type=int, default=16, help="fpsync -n")
    ap.add_argument("--base", help="another checkout (git archive): tool 'pfs (base)' runs it on PYTHONPATH")
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
    # "pfs" as a user runs it: through this user's warm server, started before the first run
    subprocess.run([*PFS, "cluster", "start"], env=env, cwd="/", check=True, stdout=subprocess.DEVNULL)
    env["XDG_CACHE_HOME"] = str(local / "cache")
    rows = []
    ref = local / "dst.ref"
    if "check" in args.actions and not ref.exists():
        subprocess.run(["cp", "-a", args.backing or args.tree, str(ref)], check=True)
    only = set(filter(None, args.only.split(",")))
    # Nothing is deleted until the end: ext4 skips inodes freed in the last 5-35 s when it allocates
    # (``recently_deleted``), and a tree deleted just before a run made its 20,000 creates scan for
    # free inodes: ~40 % of a cp's CPU went there (perf), for pfs and rclone alike.
    garbage: list[str] = []
    n = 0
    for r in range(args.runs):
        for action in args.actions.split(","):
            names = list(tools(args.tree, "", "", None)[action])
            names = names[r % len(names) :] + names[: r % len(names)]  # rotate the order per run
            for name in names:
                if only and name not in only:
                    continue
                n += 1
                dst, rmme, tree = local / f"dst-{n}", None, args.tree
                if args.fresh and action != "rm" and tree.startswith("/mnt/lat"):
                    assert args.backing, "--fresh needs --backing"
                    fresh = f"{args.backing}.fresh-{n}"
                    subprocess.run(["cp", "-a", args.backing, fresh], check=True)
                    garbage.append(fresh)
                    tree = f"{args.tree}.fresh-{n}"
                garbage.extend([str(dst), f"{dst}.m"] if not args.local_backing else [])
                garbage.extend(
                    [f"{args.local_backing}/dst-{n}", f"{args.local_backing}/dst-{n}.m"] if args.local_backing else []
                )
                if action == "rm":
                    assert args.backing, "rm needs --backing"
                    copy = Path(args.backing).parent / "peers-rmme"
                    shutil.rmtree(copy, ignore_errors=True)
                    subprocess.run(["cp", "-a", args.backing, str(copy)], check=True)
                    rmme = str(Path(args.tree).parent / "peers-rmme")
                if args.local_backing or (on_lat and args.no_remount):  # latfs's 1 s entry timeouts
                    time.sleep(1.5)
                elif on_lat and not args.fresh:
                    subprocess.run([NAS, "lat-remount"], capture_output=True, check=True)
                cmd = tools(tree, str(dst), rmme or "", args.threads, args.fpsync_jobs, args.base)[action][name]
                before = lat_stats()
                sampler = Sampler()
                sampler.start()
                wall, cpu, rc = run(cmd, env, args.timeout)
                sampler.halt.set()
                sampler.join()
                after = lat_stats()
                row = {"run": r, "action": action, "tool": name, "wall": round(wall, 3), "cpu": round(cpu, 3)}
                row |= {"rc": rc, "threads": args.threads, "tree": args.tree, "dst": str(dst)}
                row["load"] = round(os.getloadavg()[0], 1)
                if after:
                    row["ops"] = after.get("ops", 0) - before.get("ops", 0)
                    row["inflight_peak"] = max(sampler.seen, default=0)
                    row["inflight_mean"] = round(statistics.fmean(sampler.seen), 1) if sampler.seen else 0
                    row["by_op"] = {
                        k[3:]: after[k] - before.get(k, 0)
                        for k in after
                        if k.startswith("op_") and after[k] != before.get(k, 0)
                    }
                    row["latfs_cpu"] = round(
                        after.get("cpu_user_s", 0) + after.get("cpu_sys_s", 0)
                        - before.get("cpu_user_s", 0) - before.get("cpu_sys_s", 0), 3
                    )  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json:
                    with args.json.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    for path in garbage:
        shutil.rmtree(path, ignore_errors=True)
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
