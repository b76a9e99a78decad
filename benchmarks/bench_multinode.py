#!/usr/bin/env python3
"""pfs scan, cp and rm of one tree on 1 and on 3 client hosts (scripts/multinode.sh), interleaved.

Each host is a network namespace with its own glusterfs mount of the ../shared/nas volume and one
``dask worker``; the driver (the ``pfs`` command) runs in the root namespace.  Per command: wall
seconds, and CPU seconds (user + system) of the ``pfs`` command itself, of everything in the hosts'
namespaces (workers, nannies, their glusterfs clients) and of the NAS harness's other processes
(bricks, glusterd, netdelay, the driver's own glusterfs client), with the host's busy %.  All of it
shares this machine's cores: on a loaded host the ratios say more than the seconds.

    /work/shared/nas/nas.sh up 1000
    .venv/bin/python benchmarks/bench_multinode.py --files 2000 --reps 2
    scripts/multinode.sh down
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NAS, PFS, REPO, children_cpu, cpu_times, loadavg, process_cpu

SCRIPT = REPO / "scripts" / "multinode.sh"
MNT = os.environ.get("MN_MOUNT", "/mnt/nas-mn")
SCHED = "tcp://10.202.0.1:8797"


def host_pids() -> set[int]:
    """Every process in a pfs-hostI network namespace (workers, nannies, glusterfs clients)."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    pids: set[int] = set()
    for ns in (n for n in names if n.startswith("pfs-host")):
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        pids.update(int(p) for p in out.split())
    return pids


def proc_cpu(pids: set[int]) -> dict[int, float]:
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue
    return out


def run(op: str, args: list[str]) -> dict:
    hosts = host_pids()
    h0, n0, c0 = proc_cpu(hosts), process_cpu(), children_cpu()
    b0, t0c = cpu_times()
    load = loadavg()
    t0 = time.monotonic()
    env = {**os.environ, "PFS_SERVER": "off"}  # the command in its own process: its CPU is this one's child's
    cmd = [*PFS, *args, "--scheduler", SCHED, "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - t0
    b1, t1c = cpu_times()
    h1, n1 = proc_cpu(hosts), process_cpu()
    if done.returncode != 0:
        raise SystemExit(f"pfs {op} -> {done.returncode}: {done.stderr.strip()[-500:]}")
    return {
        "op": op,
        "wall_s": seconds,
        "pfs_cpu_s": children_cpu() - c0,
        "hosts_cpu_s": sum(v - h0.get(p, 0.0) for p, v in h1.items()),
        "nas_cpu_s": sum(v - n0.get(p, 0.0) for p, v in n1.items() if p not in hosts),
        "busy": 100 * (b1 - b0) / max(t1c - t0c, 1),
        "load": load,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--chunk-files", type=int, default=100)
    a = p.parse_args()
    tree = f"{MNT}/mn-bench-{a.files}"
    rows = []
    for rep in range(a.reps):
        for n in (1, 3) if rep % 2 == 0 else (3, 1):  # interleaved: drift of the host's load hits both
            subprocess.run([SCRIPT, "up", str(n)], check=True, capture_output=True)
            if not os.path.exists(f"{tree}/.done"):
                shape = ["--shape", "balanced", "--fanout", "8", "--depth", "3", "-j", "32"]
                subprocess.run([sys.executable, NAS / "mktree.py", tree, "--files", str(a.files), *shape], check=True)
                Path(f"{tree}/.done").touch()
            out = f"{MNT}/mn-bench-out"
            subprocess.run(["rm", "-rf", out], check=True)
            os.makedirs(out)
            for op, args in (
                ("scan", ["scan", tree, "-o", f"{out}/scan"]),
                ("cp", ["cp", "--manifest", f"{out}/scan", f"{out}/dst", "--chunk-files", str(a.chunk_files)]),
                ("rm", ["rm", f"{out}/dst", "-y"]),
            ):
                r = run(op, args) | {"hosts": n, "rep": rep + 1}
                rows.append(r)
                print(
                    f"{n} host(s) rep {rep + 1} {op:4}: {r['wall_s']:6.1f} s wall, CPU pfs {r['pfs_cpu_s']:5.1f} "
                    f"hosts {r['hosts_cpu_s']:6.1f} nas {r['nas_cpu_s']:6.1f} s, busy {r['busy']:3.0f} %, "
                    f"load {r['load']:.0f}",
                    flush=True,
                )
            subprocess.run(["rm", "-rf", out], check=True)
    print("\n| hosts | rep | op | wall s | pfs CPU s | hosts CPU s | NAS CPU s | busy % | load |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['hosts']} | {r['rep']} | {r['op']} | {r['wall_s']:.1f} | {r['pfs_cpu_s']:.1f} | "
            f"{r['hosts_cpu_s']:.1f} | {r['nas_cpu_s']:.1f} | {r['busy']:.0f} | {r['load']:.0f} |"
        )


if __name__ == "__main__":
    main()
