#!/usr/bin/env python3
"""latfs's own CPU per request, under real tools: mounts a private latfs, runs them, reads its counters.

    measure_cpu.py [--rtt-us 1000] [--files 20000] [--json OUT]

Makes a balanced tree (10-ary, 3 levels: 1,111 directories) of ``--files`` empty files in a temp
backing directory and mounts latfs over it on a temp mount point with its own run directory (never
/mnt/lat or /run/latfs, which the shared harness uses).  Then runs, each on a fresh mount (the
mount's caches cold; the backing directory's stay warm, as a server's would), ``find -printf ''``,
``pfs scan`` (auto-tuned) and ``pfs scan --threads 64``.  For each it reads the ``stats`` file
before and after (SIGUSR1 forces a fresh one) and prints the requests by type, latfs's CPU
(``cpu_user_s + cpu_sys_s``) per request and the tool's CPU per request.  The gluster harness
(../shared/nas) spends ~500 us of server CPU per metadata request (its README).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def build() -> Path:
    subprocess.run(["make", "-s", "-C", str(HERE)], check=True)
    return HERE / "latfs"


def make_tree(root: Path, files: int) -> None:
    dirs = [root]
    for _ in range(3):
        dirs = [d / f"d{i}" for d in dirs for i in range(10)]
        for d in dirs:
            d.mkdir(parents=True)
    everything = [root] + [p for p in root.rglob("*") if p.is_dir()]
    for i in range(files):
        (everything[i % len(everything)] / f"f{i:06d}").touch()


def stats(run: Path, pid: int) -> dict[str, float]:
    """A fresh stats snapshot: SIGUSR1, then wait for the sequence number to move."""

    def read() -> dict[str, float]:
        try:
            lines = (run / "stats").read_text().split("\n")
        except OSError:
            return {}
        return {k: float(v) for k, _, v in (ln.partition(" ") for ln in lines if ln) if v}

    seq = read().get("seq", -1)
    os.kill(pid, signal.SIGUSR1)
    for _ in range(200):
        now = read()
        if now.get("seq", -1) != seq:
            return now
        time.sleep(0.01)
    raise RuntimeError("latfs wrote no stats")


class Mount:
    def __init__(self, binary: Path, backing: Path, mnt: Path, run: Path, rtt_us: int) -> None:
        self.args = [str(binary), "--rtt-us", str(rtt_us), "--run-dir", str(run), str(backing), str(mnt)]
        self.mnt, self.run = mnt, run

    def up(self) -> int:
        subprocess.run(self.args, check=True)
        for _ in range(500):
            if (self.run / "pid").exists() and os.path.ismount(self.mnt):
                return int((self.run / "pid").read_text())
            time.sleep(0.01)
        raise RuntimeError("latfs did not mount")

    def down(self) -> None:
        if not os.path.ismount(self.mnt):
            return
        subprocess.run(["fusermount3", "-u", str(self.mnt)], check=False)
        for _ in range(500):
            if not (self.run / "pid").exists():
                return
            time.sleep(0.01)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rtt-us", type=int, default=1000)
    p.add_argument("--files", type=int, default=20000)
    p.add_argument("--json", help="append result rows to this file")
    a = p.parse_args()
    binary = build()
    work = Path(tempfile.mkdtemp(prefix="latfs-cpu-"))
    backing, mnt, run, out = work / "backing", work / "mnt", work / "run", work / "manifest"
    for d in (backing, mnt, run):
        d.mkdir()
    make_tree(backing, a.files)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PFS_THREADS", None)
    pfs = [sys.executable, "-m", "dask_pfs", "scan", str(mnt), "-o", str(out), "--overwrite", "--no-progress"]
    tools = {
        "find": ["find", str(mnt), "-printf", ""],
        "pfs scan (auto)": pfs,
        "pfs scan --threads 64": pfs + ["--threads", "64"],
    }
    mount = Mount(binary, backing, mnt, run, a.rtt_us)
    rows = []
    try:
        for name, cmd in tools.items():
            pid = mount.up()
            before, cpu0, t0 = stats(run, pid), children_cpu(), time.monotonic()
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
            wall, tool_cpu = time.monotonic() - t0, children_cpu() - cpu0
            after = stats(run, pid)
            mount.down()
            ops = after["ops"] - before["ops"]
            lat_cpu = (after["cpu_user_s"] + after["cpu_sys_s"]) - (before["cpu_user_s"] + before["cpu_sys_s"])
            by_op = {
                k[3:]: int(after[k] - before.get(k, 0))
                for k in after
                if k.startswith("op_") and after[k] - before.get(k, 0)
            }
            row = {
                "tool": name,
                "rtt_us": a.rtt_us,
                "files": a.files,
                "wall_s": round(wall, 2),
                "requests": int(ops),
                "by_op": by_op,
                "inflight_max": int(after["inflight_max"]),
                "latfs_cpu_s": round(lat_cpu, 3),
                "latfs_cpu_us_per_request": round(lat_cpu / max(ops, 1) * 1e6, 1),
                "tool_cpu_us_per_request": round(tool_cpu / max(ops, 1) * 1e6, 1),
                "load": round(os.getloadavg()[0], 1),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        mount.down()
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
