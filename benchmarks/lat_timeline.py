#!/usr/bin/env python3
"""Run one command and sample latfs's counters while it runs: requests in flight and served, per interval.

    .venv/bin/python benchmarks/lat_timeline.py --every 0.25 -- .venv/bin/pfs cp /mnt/lat/t/ /tmp/dst --no-progress

Prints one line per interval (seconds since start, requests in flight at the sample, requests served in the
interval, latfs CPU), then the command's wall and CPU (user+sys of its whole process tree, ``os.wait4``) and
the mean in flight: where a phase leaves the storage idle (in flight near 0) or queues on one lock.
latfs rewrites ``/run/latfs/stats`` on SIGUSR1 (``nas.sh lat-stats``); its pid is in ``/run/latfs/pid``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

RUN = Path("/run/latfs")


def snapshot(pid: int) -> dict[str, float]:
    """A fresh snapshot: signal latfs, wait for its sequence number to move (at most 0.2 s)."""
    path = RUN / "stats"
    before = path.read_text()
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 0.2
    text = before
    while text.split("\n", 1)[0] == before.split("\n", 1)[0] and time.monotonic() < deadline:
        time.sleep(0.005)
        text = path.read_text()
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            out[key] = float(value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--every", type=float, default=0.25, help="seconds between samples")
    ap.add_argument("--json", type=Path, help="append the samples and the totals as one JSON line")
    ap.add_argument("--stdout", type=Path, help="write the command's standard output here (else discarded)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command")
    lat = int((RUN / "pid").read_text())
    first = prev = snapshot(lat)
    t0 = time.monotonic()
    out = args.stdout.open("wb") if args.stdout else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
    samples = []
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(args.every)
        now = snapshot(lat)
        t = round(time.monotonic() - t0, 2)
        row = {
            "t": t,
            "inflight": now.get("inflight", 0),
            "ops": now.get("ops", 0) - prev.get("ops", 0),
            "cpu": round(sum(now.get(k, 0) - prev.get(k, 0) for k in ("cpu_user_s", "cpu_sys_s")), 3),
        }
        samples.append(row)
        print(f"{t:7.2f}s  in flight {row['inflight']:4.0f}  served {row['ops']:6.0f}  latfs cpu {row['cpu']:.2f}")
        prev = now
    wall = time.monotonic() - t0
    last = snapshot(lat)
    rc = os.waitstatus_to_exitcode(status)
    if rc:
        sys.stderr.write(proc.stderr.read().decode()[-500:])  # type: ignore[union-attr]
    totals = {
        "cmd": cmd,
        "rc": rc,
        "wall": round(wall, 3),
        "cpu": round(usage.ru_utime + usage.ru_stime, 3),
        "ops": last.get("ops", 0) - first.get("ops", 0),
        "by_op": {k[3:]: last[k] - first.get(k, 0) for k in last if k.startswith("op_") and last[k] != first.get(k, 0)},
        "inflight_mean": round(sum(s["inflight"] for s in samples) / max(1, len(samples)), 1),
        "latfs_cpu": round(sum(last.get(k, 0) - first.get(k, 0) for k in ("cpu_user_s", "cpu_sys_s")), 3),
    }
    print(json.dumps(totals))
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps(totals | {"samples": samples}) + "\n")


if __name__ == "__main__":
    main()
