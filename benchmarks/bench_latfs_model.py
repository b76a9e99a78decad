#!/usr/bin/env python3
"""pfs scan, rm and cp on latfs against the model's three limits (issue 18's latency target).

    PFS_NAS=/work/shared/nas .venv/bin/python benchmarks/bench_latfs_model.py \\
        --rtt-us 1000 --servers 64 --service-us 200 --actions scan,rm,cp --threads auto,32 --raw OUT.jsonl

latfs (``nas.sh lat-up``, ``/mnt/lat`` over ``/srv/latfs/backing``) sleeps every FUSE request one round trip
and queues it on M server slots of S us each, so for each run three rates bound what a tool can reach:

- in flight / round trip: the in-flight count pfs ran with (``--threads`` x workers, or where each worker's
  auto-tuning settled, summed) over RTT + S (a request's time with a free slot);
- the server: M * 1e6 / S requests/s;
- the client's CPU: the host's cores over pfs's CPU per request (the whole process tree, less a one-file run
  of the same command: start-up is not per request).

The achieved rate is the run's FUSE requests over the time in which they arrived (latfs's counters sampled
every 0.2 s; the intervals with more than a trickle of requests: the job's own time, without Python start-up
and cluster start).
Also recorded: latfs's own CPU (it shares the cores here, unlike a real server), the time-mean in flight
(latfs's summed wait over the window, Little's law) and its peak, and the host's load.

Trees are written straight into the backing directory with ``mktree.py`` (seconds, no round trips);
before each run ``nas.sh lat-remount`` with ``LAT_DROP_CACHES=0`` empties the mount's caches (the client
is cold) and leaves the backing's (a server's cache stays warm).  cp writes to tmpfs (``--dst-base``), so
no local disk is in the way.  Rows are appended to ``--raw`` as JSON lines; a markdown table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import NAS, PFS, children_cpu, cpu_times

NAS_SH = str(NAS / "nas.sh")
MKTREE = str(NAS / "mktree.py")
BACKING = Path("/srv/latfs/backing")
MNT = Path("/mnt/lat")
RUN = Path("/run/latfs")


def nas(*args: str, env: dict | None = None) -> str:
    r = subprocess.run([NAS_SH, *args], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(f"nas.sh {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def read_stats() -> dict[str, float]:
    try:
        lines = (RUN / "stats").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for ln in lines:
        k, _, v = ln.partition(" ")
        with contextlib.suppress(ValueError):
            out[k] = float(v)
    return out


def fresh_stats() -> dict[str, float]:
    """SIGUSR1, then wait for latfs to rewrite its counters."""
    seq = read_stats().get("seq", -1)
    os.kill(int((RUN / "pid").read_text()), signal.SIGUSR1)
    for _ in range(500):
        now = read_stats()
        if now.get("seq", -1) != seq:
            return now
        time.sleep(0.005)
    raise RuntimeError("latfs wrote no stats")


class Sampler(threading.Thread):
    """latfs's counters every ``period`` s while a command runs: when requests arrived, and how many were asleep."""

    def __init__(self, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.period, self.samples, self.stop = period, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            s = fresh_stats()
            self.samples.append((time.monotonic(), s["ops"], s["wait_s"], s["inflight"]))
            self.stop.wait(self.period)

    def window(self, trickle: int = 10) -> dict:
        """The intervals in which requests arrived (more than ``trickle``: the driver's own few stats before the
        cluster is up do not count): their summed seconds (``busy_s``), requests and summed wait, and the span
        from the first request to the last."""
        s = self.samples
        steps = [(b[0] - a[0], b[1] - a[1], b[2] - a[2]) for a, b in itertools.pairwise(s)]
        busy = [st for st in steps if st[1] > trickle]
        active = [i for i, st in enumerate(steps) if st[1] > 0]
        span = sum(st[0] for st in steps[active[0] : active[-1] + 1]) if active else 0.0
        return {
            "span_s": round(span, 3),
            "busy_s": round(sum(st[0] for st in busy), 3),
            "busy_requests": int(sum(st[1] for st in busy)),
            "busy_wait_s": round(sum(st[2] for st in busy), 3),
            "series": [(round(t - s[0][0], 2), int(ops - s[0][1]), int(inf)) for t, ops, _, inf in s],
        }


def mktree(dest: Path, files: int, shape: str) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    cmd = [sys.executable, MKTREE, str(dest), "--files", str(files), "--shape", shape, "-j", "8"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def ensure_tree(name: str, files: int, shape: str) -> Path:
    mark = BACKING / f".{name}.done"
    if not mark.exists():
        mktree(BACKING / name, files, shape)
        mark.write_text(f"mktree.py {name} --files {files} --shape {shape}\n")
    return BACKING / name


def command(action: str, tree: str, out: Path, threads: str) -> list[str]:
    opts = ["--no-progress", "--json", *([] if threads == "auto" else ["--threads", threads])]
    return [
        *PFS,
        *{
            "scan": ["scan", str(MNT / tree), "-o", str(out / "m"), "--overwrite"],
            "rm": ["rm", str(MNT / tree), "-y"],
            "cp": ["cp", str(MNT / tree), str(out / "dst")],
        }[action],
        *opts,
    ]


def in_flight(summary: dict, threads: str, workers: int) -> tuple[int | None, str]:
    """The in-flight count the job ran with, over all workers, and where it came from."""
    c = summary.get("concurrency") or {}
    if threads != "auto":
        return int(threads) * workers, f"--threads {threads} x {workers} workers"
    per = c.get("per_worker") or ([c["settled"]] * workers if c.get("settled") else [])
    return (sum(per), f"settled {'+'.join(map(str, per))}") if per else (None, f"unknown: {c}")


def run_once(action: str, tree: str, threads: str, work: Path) -> dict:
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    nas("lat-remount", env={**os.environ, "LAT_DROP_CACHES": "0"})
    before = fresh_stats()
    env = {k: v for k, v in os.environ.items() if k != "PFS_THREADS"}
    cmd = command(action, tree, out, threads)
    sampler = Sampler()
    load = os.getloadavg()
    (b0, all0), cpu0, t0 = cpu_times(), children_cpu(), time.monotonic()
    sampler.start()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall, cpu, (b1, all1) = time.monotonic() - t0, children_cpu() - cpu0, cpu_times()
    sampler.stop.set()
    sampler.join()
    after = fresh_stats()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr[-800:]}")
    summary = json.loads(proc.stdout)
    shutil.rmtree(out, ignore_errors=True)
    win = sampler.window()
    ops = after["ops"] - before["ops"]
    by_op = {
        k[3:]: int(after[k] - before.get(k, 0)) for k in after if k.startswith("op_") and after[k] > before.get(k, 0)
    }
    lat_cpu = sum(after[k] - before[k] for k in ("cpu_user_s", "cpu_sys_s"))
    return {
        "action": action,
        "tree": tree,
        "threads": threads,
        "wall_s": round(wall, 3),
        "pfs_seconds": summary.get("seconds"),
        "cpu_s": round(cpu, 3),
        "host_busy": round(100 * (b1 - b0) / max(all1 - all0, 1)),  # both cores, everyone's processes
        "requests": int(ops),
        "by_op": by_op,
        **win,
        "mean_inflight": round(win["busy_wait_s"] / win["busy_s"], 1) if win["busy_s"] else None,
        "inflight_max": int(after["inflight_max"]),
        "mean_latency_ms": round((after["wait_s"] - before["wait_s"]) / max(ops, 1) * 1e3, 3),
        "queue_s": round(after["queue_s"] - before["queue_s"], 3),
        "latfs_cpu_s": round(lat_cpu, 3),
        "concurrency": summary.get("concurrency"),
        "counts": summary.get("counts"),
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def derive(row: dict, one: dict, a) -> dict:
    """The three limits and the achieved fraction of their minimum."""
    workers = a.workers
    inflight, source = in_flight(row, row["threads"], workers)
    rtt = (a.rtt_us + a.service_us) / 1e6
    requests = row["requests"]
    cpu_per = max(row["cpu_s"] - one["cpu_s"], 1e-9) / requests
    lat_per = row["latfs_cpu_s"] / requests
    limits = {
        "inflight_rtt": inflight / rtt if inflight else None,
        "server": a.servers * 1e6 / a.service_us if a.servers and a.service_us else None,
        "client_cpu": a.cores / cpu_per,
    }
    achieved = row["busy_requests"] / row["busy_s"] if row["busy_s"] else None
    bound = min(v for v in limits.values() if v)
    return {
        "inflight": inflight,
        "inflight_source": source,
        "cpu_us_per_request": round(cpu_per * 1e6, 1),
        "latfs_cpu_us_per_request": round(lat_per * 1e6, 1),
        "host_cpu_limit": round(a.cores / (cpu_per + lat_per)),
        "limits": {k: round(v) if v else None for k, v in limits.items()},
        "bound_by": min((k for k in limits if limits[k]), key=lambda k: limits[k]),
        "achieved_rps": round(achieved) if achieved else None,
        "fraction": round(achieved / bound, 3) if achieved else None,
        "requests_per_entry": round(requests / row["entries"], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rtt-us", type=int, default=1000)
    p.add_argument("--servers", type=int, default=64)
    p.add_argument("--service-us", type=int, default=200)
    p.add_argument("--files", type=int, default=20000)
    p.add_argument("--shape", default="balanced")
    p.add_argument("--actions", default="scan,rm,cp")
    p.add_argument("--threads", default="auto", help="comma list: auto and/or fixed --threads values")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 8), help="the embedded cluster's")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    p.add_argument("--dst-base", default="/dev/shm", help="where cp writes and manifests go (tmpfs)")
    p.add_argument("--raw", type=Path, required=True)
    a = p.parse_args()
    nas("lat-up", str(a.rtt_us), "--servers", str(a.servers), "--service-us", str(a.service_us))
    name = f"{a.shape[:4] if a.shape != 'balanced' else 'bal'}{a.files // 1000}k"
    ensure_tree(name, a.files, a.shape)
    ensure_tree("one", 1, "flat")
    dirs = int(
        subprocess.run(
            [sys.executable, MKTREE, "/x", "--files", str(a.files), "--shape", a.shape, "--dry-run"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.split(" files, ")[1]
        .split()[0]
    )
    entries = a.files + dirs
    work = Path(tempfile.mkdtemp(prefix="pfs-latfs-model-", dir=a.dst_base))
    rows = []
    try:
        for action in a.actions.split(","):
            # a one-file run of the same command: the fixed CPU, not counted per request
            if action == "rm":
                mktree(BACKING / "rm-one", 1, "flat")
            one = run_once(action, "rm-one" if action == "rm" else "one", "auto", work)
            for _ in range(a.runs):
                for threads in a.threads.split(","):
                    tree = name
                    if action == "rm":
                        tree = f"rm-{name}"
                        mktree(BACKING / tree, a.files, a.shape)
                    row = run_once(action, tree, threads, work) | {"entries": entries}
                    row |= derive(row, one, a) | {"one_file_cpu_s": one["cpu_s"]}
                    row |= {"rtt_us": a.rtt_us, "servers": a.servers, "service_us": a.service_us}
                    rows.append(row)
                    with open(a.raw, "a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(table(rows))


def table(rows: list[dict]) -> str:
    lines = [
        "| action | --threads | in flight (from) | mean / peak in flight | requests (/entry) | busy of span s "
        "| achieved req/s | in-flight/RTT | server | client CPU | fraction of min | pfs CPU us/req "
        "| latfs CPU us/req | load, host busy |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lim = r["limits"]
        lines.append(
            f"| {r['action']} | {r['threads']} | {r['inflight']} ({r['inflight_source']}) | {r['mean_inflight']} / "
            f"{r['inflight_max']} | {r['requests']:,} ({r['requests_per_entry']}) | {r['busy_s']} of {r['span_s']} | "
            f"{r['achieved_rps']:,} | {lim['inflight_rtt']:,} | {lim['server']:,} | {lim['client_cpu']:,} | "
            f"**{r['fraction']}** ({r['bound_by']}) | {r['cpu_us_per_request']} | {r['latfs_cpu_us_per_request']} | "
            f"{r['load_before'][0]}-{r['load_after'][0]}, {r['host_busy']} % |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
