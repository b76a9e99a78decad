"""Scale benchmarks on ``pfs-sim://`` (benchmarks/simfs.py): big scans, the worker/concurrency grid, the plot.

    bench_scale.py scan --entries 100000000 --shape mix --workers 2 --latency-ms 1 --out /srv/m100m
    bench_scale.py readers /srv/m100m               # pfs info / du / query over a manifest, timed
    bench_scale.py grid --latency-ms 20 --slots 3 --service-us 2000      # scaling runs -> raw jsonl
    bench_scale.py ratecap --max-ops 5000           # --max-ops-per-second with 1-8 workers
    bench_scale.py nas /mnt/nas/bal20k --workers-list 1,2,4   # the same scan on the gluster harness, cold
    bench_scale.py plot benchmarks/raw/scale-*.jsonl

``scan`` runs the driver in this process (the embedded LocalCluster's scheduler lives here too, so its
peak RSS is driver + scheduler) and appends one JSON row: wall time, entries/s, tasks and tasks/s, driver
peak RSS, driver and worker CPU, the server's request counters (their peak 1-s rate), parts and sizes,
the host's busy % and load (other sessions share this machine). The grid runs ``scan`` in subprocesses.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import CpuMeter, cpu_times, measured_env
from benchmarks.simfs import SHM, CostModel, SimServer, Tree, TreeSpec, register, sim_url

REPO = Path(__file__).resolve().parent.parent
RAW = REPO / "benchmarks" / "raw"
PLOTS = REPO / "benchmarks" / "plots"
PFS = [sys.executable, "-m", "benchmarks.simfs"]  # the pfs CLI with pfs-sim registered


def rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Sampler(threading.Thread):
    """Every ``period`` s: the server's counters and this process's RSS; peak 1-s rates afterwards."""

    def __init__(self, server: SimServer, period: float = 0.5, log: str | None = None) -> None:
        super().__init__(daemon=True)
        self.server, self.period, self.log = server, period, log
        self.samples: list[tuple[float, int, int, float]] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.period):
            c = self.server.counters()
            self.samples.append((time.monotonic(), c["entries"], c["requests"], rss_mb()))
            if self.log and len(self.samples) % 60 == 0:  # a long run's progress survives its interruption
                t0 = self.samples[0][0]
                with open(self.log, "a") as f:
                    f.write(
                        json.dumps(
                            {
                                "s": round(self.samples[-1][0] - t0),
                                **c,
                                "rss_mb": round(rss_mb()),
                                "load": os.getloadavg()[0],
                            }
                        )
                        + "\n"
                    )

    def stop(self) -> dict:
        self._done.set()
        self.join()
        s = self.samples
        return {
            "peak_entries_per_s": _peak_rate(s, 1),
            "peak_requests_per_s": _peak_rate(s, 2),
            "steady_entries_per_s": _steady_rate(s, 1),
            "steady_requests_per_s": _steady_rate(s, 2),
            "rss_timeline_mb": [round(x[3]) for x in s[:: max(1, len(s) // 40)]],
        }


def process_tree_cpu() -> dict[str, float]:
    """CPU seconds so far of this process and of its live descendants (the cluster's nannies and workers)."""
    import psutil

    me = psutil.Process()
    kids = 0.0
    for p in me.children(recursive=True):
        try:
            t = p.cpu_times()
            kids += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    t = me.cpu_times()
    return {"self": t.user + t.system, "children": kids}


def _peak_rate(samples: list[tuple], col: int, window: float = 1.0) -> float:
    """The highest rate of counter ``col`` over any span of at least ``window`` s (samples are cumulative)."""
    best, k = 0.0, 0
    for i, s in enumerate(samples):
        while k + 1 < i and s[0] - samples[k + 1][0] >= window:
            k += 1
        dt = s[0] - samples[k][0]
        if dt >= window:
            best = max(best, (s[col] - samples[k][col]) / dt)
    return round(best, 1)


def _steady_rate(samples: list[tuple], col: int) -> float:
    """The median 1-s rate of counter ``col`` over the middle 80 % of the run (no ramp-up, no tail)."""
    n = len(samples)
    mid = samples[n // 10 : n - n // 10]
    rates = [(b[col] - a[col]) / (b[0] - a[0]) for a, b in zip(mid, mid[2:], strict=False) if b[0] > a[0]]
    return round(statistics.median(rates), 1) if rates else 0.0


def manifest_stats(out: str) -> dict:
    sizes = sorted(p.stat().st_size for p in Path(out).glob("*.parquet"))
    if not sizes:
        return {"parts": 0}
    return {
        "parts": len(sizes),
        "parts_mb": round(sum(sizes) / 2**20, 1),
        "part_kb_min": round(sizes[0] / 1024, 1),
        "part_kb_median": round(statistics.median(sizes) / 1024, 1),
        "part_kb_max": round(sizes[-1] / 1024, 1),
    }


def sim_cpu_per_entry(spec: TreeSpec, sample: int = 200_000) -> float:
    """CPU microseconds the simulator itself spends per listed entry (charged to the workers' CPU)."""
    tree = Tree(spec)
    t0 = time.process_time()
    stack, n = [""], 0
    while stack and n < sample:
        rel = stack.pop()
        dirs, files = tree.listing(rel)
        n += len(dirs) + len(files)
        stack.extend(f"{rel}/{d}" if rel else d for d, _ in dirs)
    return round((time.process_time() - t0) / max(n, 1) * 1e6, 2)


def cmd_scan(a: argparse.Namespace) -> dict:
    register()  # before the cluster forks its workers
    from dask_pfs import scan
    from dask_pfs.clusters.client import ClusterOptions, connect
    from operators.ratelimit import Limits

    spec = {"entries": a.entries, "shape": a.shape, "seed": a.seed, "fanout": a.fanout, "files": a.files}
    cost = CostModel(a.latency_ms, a.slots, a.service_us, a.page)
    # --resume needs the interrupted run's URL (its journal is named after it), server name included
    server = SimServer(os.path.join(SHM, a.server), cost) if a.server else SimServer.create(cost)
    url = sim_url(**spec, latency_ms=a.latency_ms, slots=a.slots, service_us=a.service_us, server=server.name)
    limits = Limits(ops_per_second=a.max_ops) if a.max_ops else None
    options = ClusterOptions(workers=a.workers, threads=a.threads, limits=limits, dashboard=False)
    sampler = Sampler(server, log=a.progress)
    try:
        with connect(options) as client:  # started before the clock: the rates are the scan's own
            cpu0 = process_tree_cpu()
            b0, t0c = cpu_times()
            load0 = os.getloadavg()[0]
            t0 = time.monotonic()
            sampler.start()
            res = scan(
                url, a.out, client=client, threads=a.threads, limits=limits, overwrite=not a.resume, resume=a.resume
            )
            wall = time.monotonic() - t0
            b1, t1c = cpu_times()
            cpu1 = process_tree_cpu()
    finally:
        peaks = sampler.stop()
        counters = server.counters()
        server.remove()
    me = resource.getrusage(resource.RUSAGE_SELF)
    driver_cpu = cpu1["self"] - cpu0["self"]
    worker_cpu = cpu1["children"] - cpu0["children"]
    entries = res.counts["entries"]
    row = {
        "kind": a.kind,
        "entries": entries,
        "shape": a.shape,
        "workers": a.workers,
        "threads": a.threads or "auto",
        "latency_ms": a.latency_ms,
        "slots": a.slots,
        "service_us": a.service_us,
        "max_ops": a.max_ops,
        "wall_s": round(wall, 2),
        "entries_per_s": round(entries / wall),
        "requests": counters["requests"],
        "requests_per_s": round(counters["requests"] / wall, 1),
        "mean_latency_ms": round(counters["wait_ns"] / max(counters["requests"], 1) / 1e6, 3),
        "mean_queue_ms": round(counters["queue_ns"] / max(counters["requests"], 1) / 1e6, 3),
        "server_inflight_max": counters["inflight_max"],
        **peaks,
        "tasks": res.tasks,
        "resumed_tasks": res.resumed,  # --resume: tasks of the interrupted run (their entries are in "entries")
        "entries_listed": counters["entries"],  # by this run, at the server
        "tasks_per_s": round(res.tasks / wall, 1),
        "driver_peak_rss_mb": round(me.ru_maxrss / 1024),
        "driver_cpu_s": round(driver_cpu, 1),
        "worker_cpu_s": round(worker_cpu, 1),
        "cpu_us_per_entry": round((driver_cpu + worker_cpu) / max(entries, 1) * 1e6, 2),
        "host_busy_pct": round(100 * (b1 - b0) / max(t1c - t0c, 1)),
        "load_start": round(load0, 1),
        "load_end": round(os.getloadavg()[0], 1),
        "concurrency": res.concurrency,
        "errors": res.failed,
        **manifest_stats(a.out),
    }
    if a.sim_cpu:
        row["sim_cpu_us_per_entry"] = sim_cpu_per_entry(TreeSpec(**spec))
    _emit(row, a.raw)
    return row


def _emit(row: dict, raw: str | None) -> None:
    print(json.dumps(row), flush=True)
    if raw:
        with open(raw, "a") as f:
            f.write(json.dumps(row) + "\n")


def cmd_readers(a: argparse.Namespace) -> None:
    """``pfs info``, ``pfs du`` (also ``--by ext``) and filtered aggregates over a manifest, timed, with CPU."""
    import duckdb

    rows = duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{a.manifest}/*.parquet')").fetchall()[0][0]
    cmds = {
        "info": ["info", a.manifest, "--json"],
        "du": ["du", a.manifest, "--json"],
        "du --by ext": ["du", a.manifest, "--by", "ext", "--json"],
        "query count+sum where": [
            "query",
            a.manifest,
            "--where",
            "type = 'file' AND size > 1000000 AND name LIKE '%.h5'",
            "--select",
            "count(*) AS n, sum(size) AS bytes",
            "--format",
            "json",
        ],
        "query subtree count+sum where": [
            "query",
            a.manifest,
            "--where",
            "path LIKE 'd0003/%' AND type = 'file' AND mtime < '2025-01-01'",
            "--select",
            "count(*) AS n, sum(size) AS bytes",
            "--format",
            "json",
        ],
    }
    if a.allow_incomplete:  # a stopped scan: only `pfs query` reads a manifest without its marker
        cmds = {k: [*v, "--allow-incomplete"] for k, v in cmds.items() if k.startswith("query")}
    if a.only:
        cmds = {k: v for k, v in cmds.items() if k in a.only.split(",")}
    for name, args in cmds.items():
        b0, t0c = cpu_times()
        t0 = time.monotonic()
        with CpuMeter() as meter:
            proc = subprocess.run(PFS + args, capture_output=True, text=True, cwd=REPO, env=measured_env())
            meter.count_served(proc.stderr)
        wall = time.monotonic() - t0
        b1, t1c = cpu_times()
        row = {
            "kind": "reader",
            "command": name,
            "rows": rows,
            "wall_s": round(wall, 2),
            "rows_per_s": round(rows / wall),
            "cpu_s": round(meter.cpu_s, 2),
            "rows_per_cpu_s": round(rows / max(meter.cpu_s, 1e-9)),
            "host_busy_pct": round(100 * (b1 - b0) / max(t1c - t0c, 1)),
            "load": round(os.getloadavg()[0], 1),
            "rc": proc.returncode,
            "out": proc.stdout.strip()[-300:],
        }
        if proc.returncode:
            row["stderr"] = proc.stderr.strip()[-500:]
        _emit(row, a.raw)
    _time_sql(a, rows)


def _time_sql(a: argparse.Namespace, rows: int) -> None:
    """The same filtered aggregate and du groupings in this process (DuckDB, 2 threads): the SQL's own
    rate, without a command's start-up (Python imports, the marker, the sandbox)."""
    import duckdb

    src = f"read_parquet('{a.manifest}/*.parquet')"
    top = "CASE WHEN depth > 1 THEN array_to_string(string_split(path, '/')[1:1], '/') ELSE parent END"
    sqls = {
        "sql count+sum where": f"SELECT count(*), sum(size) FROM {src} "
        "WHERE type = 'file' AND size > 1000000 AND name LIKE '%.h5'",
        "sql group by type": f"SELECT CAST(type AS VARCHAR), count(*), sum(size) FROM {src} GROUP BY ALL",
        "sql group by top directory (du)": f"SELECT {top}, count(*), sum(size) FROM {src} GROUP BY ALL",
    }
    con = duckdb.connect()
    con.execute("SET threads = 2")
    for name, sql in sqls.items():
        t0, c0 = time.monotonic(), time.process_time()
        con.execute(sql).fetchall()
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
        row = {
            "kind": "reader",
            "command": name,
            "rows": rows,
            "wall_s": round(wall, 2),
            "rows_per_s": round(rows / wall),
        }
        row.update(cpu_s=round(cpu, 2), rows_per_cpu_s=round(rows / max(cpu, 1e-9)), load=round(os.getloadavg()[0], 1))
        _emit(row, a.raw)


def _scan_args(a: argparse.Namespace, **extra) -> list[str]:
    args = [sys.executable, __file__, "scan", "--entries", str(a.entries), "--shape", a.shape]
    args += ["--fanout", str(a.fanout), "--files", str(a.files), "--latency-ms", str(a.latency_ms)]
    args += ["--slots", str(a.slots), "--service-us", str(a.service_us), "--out", a.out, "--raw", a.raw]
    for key, value in extra.items():
        if value is not None:
            args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def cmd_grid(a: argparse.Namespace) -> None:
    """Every (workers, threads) cell, auto-tuned included, one subprocess each."""
    for workers in [int(w) for w in a.workers_list.split(",")]:
        for threads in a.threads_list.split(","):
            t = None if threads == "auto" else threads
            subprocess.run(_scan_args(a, workers=workers, threads=t, kind="grid"), cwd=REPO, check=False)


def cmd_ratecap(a: argparse.Namespace) -> None:
    for workers in [int(w) for w in a.workers_list.split(",")]:
        subprocess.run(
            _scan_args(a, workers=workers, threads=a.threads, max_ops=a.max_ops, kind="ratecap"), cwd=REPO, check=False
        )


def cmd_nas(a: argparse.Namespace) -> None:
    """Whole ``pfs scan`` commands of a tree on the ``../shared/nas`` harness (cold: ``nas.sh remount``),
    per workers x threads, with the command's CPU and the harness's (bricks, FUSE client, delay link)."""
    from benchmarks.common import PFS as PFS_CLI
    from benchmarks.common import timed

    for workers in [int(w) for w in a.workers_list.split(",")]:
        for threads in a.threads_list.split(","):
            args = [*PFS_CLI, "scan", a.tree, "-o", a.out, "--overwrite", "--no-progress", "--json"]
            args += ["--workers", str(workers)] + ([] if threads == "auto" else ["--threads", threads])
            load0 = os.getloadavg()[0]
            run = timed(f"pfs scan -w{workers} -t{threads}", args, a.tree, capture=True)
            try:
                summary = json.loads(run.stdout)
            except ValueError:
                summary = {}
            entries = summary.get("counts", {}).get("entries", 0)
            row = {
                "kind": "nas",
                "tree": a.tree,
                "workers": workers,
                "threads": threads,
                "rc": run.rc,
                "entries": entries,
                "wall_s": round(run.seconds, 2),
                "entries_per_s": round(entries / run.seconds),
                "walk_s": summary.get("seconds"),
                "tasks": summary.get("tasks"),
                "concurrency": summary.get("concurrency"),
                "cpu_s": run.cpu_s,
                "nas_cpu_s": run.nas_cpu_s,
                "host_busy_pct": round(run.busy),
                "load_start": round(load0, 1),
                "load_end": round(os.getloadavg()[0], 1),
                "caches": run.caches,
            }
            _emit(row, a.raw)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def tree_opts(s, entries: int) -> None:
        s.add_argument("--entries", type=int, default=entries)
        s.add_argument("--shape", default="balanced")
        s.add_argument("--seed", type=int, default=1)
        s.add_argument("--fanout", type=int, default=4)
        s.add_argument("--files", type=int, default=4)
        s.add_argument("--latency-ms", type=float, default=20.0)
        s.add_argument("--slots", type=int, default=0)
        s.add_argument("--service-us", type=float, default=0.0)
        s.add_argument("--page", type=int, default=1000)
        s.add_argument("--out", default="/tmp/pfs-scale-manifest")
        s.add_argument("--raw", default=str(RAW / f"scale-{time.strftime('%Y%m%d')}.jsonl"))

    s = sub.add_parser("scan", help="one scan, driver in this process")
    tree_opts(s, 1_000_000)
    s.add_argument("--workers", type=int, default=2)
    s.add_argument("--threads", type=int)
    s.add_argument("--max-ops", type=float)
    s.add_argument("--kind", default="scan")
    s.add_argument("--resume", action="store_true", help="finish an interrupted scan (give its --server)")
    s.add_argument("--server", help="the server file's name in /dev/shm (default: a fresh one)")
    s.add_argument("--sim-cpu", action="store_true", help="also measure the simulator's own CPU per entry")
    s.add_argument("--progress", help="append the server's counters and the driver's RSS here every 30 s")
    s.set_defaults(fn=cmd_scan)

    s = sub.add_parser("readers", help="pfs info/du/query over a manifest")
    s.add_argument("manifest")
    s.add_argument("--only")
    s.add_argument("--allow-incomplete", action="store_true", help="the manifest of a stopped scan")
    s.add_argument("--raw", default=str(RAW / f"scale-{time.strftime('%Y%m%d')}.jsonl"))
    s.set_defaults(fn=cmd_readers)

    s = sub.add_parser("grid", help="workers x threads")
    tree_opts(s, 200_000)
    s.add_argument("--workers-list", default="1,2,4,8")
    s.add_argument("--threads-list", default="16,32,64,128,256,512,auto")
    s.set_defaults(fn=cmd_grid)

    s = sub.add_parser("ratecap", help="--max-ops-per-second across workers")
    tree_opts(s, 100_000)
    s.add_argument("--workers-list", default="1,2,4,8")
    s.add_argument("--threads", type=int, default=64)
    s.add_argument("--max-ops", type=float, default=5000)
    s.set_defaults(fn=cmd_ratecap)

    s = sub.add_parser("nas", help="pfs scan of a tree on the gluster harness, per workers x threads")
    s.add_argument("tree")
    s.add_argument("--workers-list", default="1,2,4")
    s.add_argument("--threads-list", default="auto")
    s.add_argument("--out", default="/tmp/pfs-scale-nas-manifest")
    s.add_argument("--raw", default=str(RAW / f"scale-{time.strftime('%Y%m%d')}.jsonl"))
    s.set_defaults(fn=cmd_nas)

    s = sub.add_parser("plot", help="raw jsonl -> benchmarks/plots/scale-*.png")
    s.add_argument("raw", nargs="+")
    s.add_argument("--cpu-us-per-entry", type=float, help="client CPU per entry for the model (default: measured)")
    s.set_defaults(fn=lambda a: __import__("benchmarks.scale_plot", fromlist=["plot"]).plot(a))

    a = p.parse_args()
    RAW.mkdir(exist_ok=True)
    a.fn(a)


if __name__ == "__main__":
    main()
