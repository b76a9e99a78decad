"""Plots of ``bench_scale.py`` rows: measured entries/s against the model, and the job-wide rate cap.

Model (per run): ``min(in_flight / latency, slots * 1e6 / service_us, cpu_limit)`` requests/s, times the
run's mean entries per request.  ``cpu_limit`` is the host's 2 cores divided by the client CPU a request
costs (measured: all of pfs's processes, the simulator's own listing CPU included, ``cpu_us_per_entry``),
so it is what 2 idle cores could do; other sessions share them (each point's host load is in the table).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

PLOTS = Path(__file__).resolve().parent / "plots"
CORES = 2


def load(paths: list[str]) -> list[dict]:
    rows = []
    for path in paths:
        with open(path) as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    return rows


def in_flight(row: dict) -> int | None:
    """Operations in flight the run allowed: workers x threads (auto: where each worker settled)."""
    if row["threads"] != "auto":
        return row["workers"] * int(row["threads"])
    per = (row.get("concurrency") or {}).get("per_worker") or []
    return sum(per) if per else None


def model(row: dict, inflight: float, cpu_us_per_entry: float) -> float:
    """Entries/s the model allows ``inflight`` operations of ``row``'s storage and client."""
    per_request = row["entries"] / max(row["requests"], 1)
    latency = row["latency_ms"] / 1e3
    bounds = [inflight / latency if latency else float("inf")]
    if row["slots"] and row["service_us"]:
        bounds.append(row["slots"] * 1e6 / row["service_us"])
    bounds.append(CORES * 1e6 / (cpu_us_per_entry * per_request))
    return min(bounds) * per_request


def plot(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load(args.raw)
    grid = [r for r in rows if r.get("kind") == "grid"]
    cap = [r for r in rows if r.get("kind") == "ratecap"]
    PLOTS.mkdir(exist_ok=True)
    if grid:
        cpu = args.cpu_us_per_entry or statistics.median(r["cpu_us_per_entry"] for r in grid)
        fig, ax = plt.subplots(figsize=(8.5, 5.5))
        xs = sorted({x for r in grid if (x := in_flight(r))} | {8, 8192})
        ref = grid[0]
        lo, hi = min(xs), max(xs)
        line = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.plot(line, [model(ref, x, cpu) for x in line], "k-", lw=1.5, label="model: min(in flight / RTT, M/S, CPU)")
        for workers in sorted({r["workers"] for r in grid}):
            fixed = [r for r in grid if r["workers"] == workers and r["threads"] != "auto"]
            fixed.sort(key=in_flight)
            (pts,) = ax.plot(
                [in_flight(r) for r in fixed],
                [r["entries_per_s"] for r in fixed],
                "o-",
                ms=5,
                label=f"{workers} worker{'s' if workers > 1 else ''}, --threads 16-512",
            )
            for r in (r for r in grid if r["workers"] == workers and r["threads"] == "auto"):
                if x := in_flight(r):
                    ax.plot([x], [r["entries_per_s"]], "*", ms=14, color=pts.get_color(), mec="k")
        ax.plot([], [], "*", ms=12, color="w", mec="k", label="auto-tuned (x: where the workers settled)")
        per_request = ref["entries"] / max(ref["requests"], 1)
        knee = min(
            ref["slots"] * 1e6 / ref["service_us"] if ref["slots"] else float("inf"),
            CORES * 1e6 / (cpu * per_request),
        ) * (ref["latency_ms"] / 1e3)
        ax.axvline(knee, color="grey", ls=":", lw=1)
        ax.text(knee * 1.05, ax.get_ylim()[0] * 1.3 if ax.get_ylim()[0] > 0 else 1, f"knee ~{knee:.0f}", color="grey")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("operations in flight (workers x threads per worker)")
        ax.set_ylabel("entries/s")
        load_range = f"{min(r['load_start'] for r in grid):.0f}-{max(r['load_end'] for r in grid):.0f}"
        ax.set_title(
            f"pfs scan on pfs-sim: RTT {ref['latency_ms']:g} ms, server {ref['slots']} x {ref['service_us']:g} us, "
            f"{per_request:.1f} entries/request\nclient CPU {cpu:.0f} us/entry (2 cores); host load {load_range} "
            "(other sessions)",
            fontsize=9,
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(PLOTS / "scale-workers.png", dpi=110)
        print(PLOTS / "scale-workers.png")
    if cap:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        cap.sort(key=lambda r: r["workers"])
        w = [r["workers"] for r in cap]
        ax.plot(w, [r["entries_per_s"] for r in cap], "o-", label="mean entries/s over the run")
        ax.plot(w, [r["peak_entries_per_s"] for r in cap], "s--", label="busiest 1 s at the server")
        ax.axhline(cap[0]["max_ops"], color="r", lw=1, label=f"--max-ops-per-second {cap[0]['max_ops']:g}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(w, [str(x) for x in w])
        ax.set_ylim(0, cap[0]["max_ops"] * 1.6)
        ax.set_xlabel("worker processes")
        ax.set_ylabel("entries/s")
        ax.set_title(f"job-wide cap across workers (RTT {cap[0]['latency_ms']:g} ms, --threads {cap[0]['threads']})")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(PLOTS / "scale-ratecap.png", dpi=110)
        print(PLOTS / "scale-ratecap.png")
