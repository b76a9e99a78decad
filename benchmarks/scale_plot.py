"""Plots of ``bench_scale.py`` rows: measured entries/s against the model, and the job-wide rate cap.

Model (per run): ``min(in_flight / latency, slots * 1e6 / service_us, cpu_limit)`` requests/s, times the
run's mean entries per request.  ``cpu_limit`` is min(workers, the host's 2 cores) divided by the client CPU
a request costs (measured: all of pfs's processes, the simulator's own listing CPU included,
``cpu_us_per_entry``), so it is what idle cores could do; other sessions share them (each point's host
load is in the table).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

PLOTS = Path(__file__).resolve().parent / "plots"
CORES = 2


def load(paths: list[str]) -> list[dict]:
    """Rows of the raw files; of runs repeated with the same settings, the last."""
    rows: dict[tuple, dict] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    key = tuple(r.get(k) for k in ("kind", "command", "entries", "workers", "threads", "max_ops"))
                    rows.pop(key, None)
                    rows[key] = r
    return list(rows.values())


def in_flight(row: dict) -> int | None:
    """Operations in flight the run allowed: workers x threads (auto: where each worker settled)."""
    if row["threads"] != "auto":
        return row["workers"] * int(row["threads"])
    per = (row.get("concurrency") or {}).get("per_worker") or []
    return sum(per) if per else None


def model(row: dict, inflight: float, cpu_us_per_entry: float) -> float:
    """Entries/s the model allows ``inflight`` operations of ``row``'s storage and client (a worker process
    uses at most one core: its Python threads share one GIL)."""
    per_request = row["entries"] / max(row["requests"], 1)
    latency = row["latency_ms"] / 1e3
    bounds = [inflight / latency if latency else float("inf")]
    if row["slots"] and row["service_us"]:
        bounds.append(row["slots"] * 1e6 / row["service_us"])
    bounds.append(min(row["workers"], CORES) * 1e6 / (cpu_us_per_entry * per_request))
    return min(bounds) * per_request


def plot(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load(args.raw)
    grid = [r for r in rows if r.get("kind") == "grid"]
    loaded = sorted((r for r in rows if r.get("kind") == "ratecap"), key=lambda r: r["workers"])
    cap = [r for r in rows if r.get("kind") == "ratecap-quiet"] or loaded  # the quiet host's runs, if any
    PLOTS.mkdir(exist_ok=True)
    if grid:
        cpu = statistics.median(r["cpu_us_per_entry"] for r in grid)
        fig, ax = plt.subplots(figsize=(8.5, 6.5))
        xs = sorted({x for r in grid if (x := in_flight(r))} | {16, 4096})
        ref = grid[0]
        lo, hi = min(xs), max(xs)
        line = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        for workers in sorted({r["workers"] for r in grid}):
            fixed = [r for r in grid if r["workers"] == workers and r["threads"] != "auto"]
            fixed.sort(key=in_flight)
            (pts,) = ax.plot(
                [in_flight(r) for r in fixed],
                [r.get("steady_entries_per_s") or r["entries_per_s"] for r in fixed],
                "o-",
                ms=5,
                label=f"{workers} worker{'s' if workers > 1 else ''}, --threads 16-512 (steady)",
            )
            mine = [r for r in grid if r["workers"] == workers]
            cpu_w = args.cpu_us_per_entry or statistics.median(r["cpu_us_per_entry"] for r in mine)
            ax.plot(line, [model(mine[0], x, cpu_w) for x in line], "--", lw=1, color=pts.get_color(), alpha=0.8)
            for r in (r for r in grid if r["workers"] == workers and r["threads"] == "auto"):
                if x := in_flight(r):
                    y = r.get("steady_entries_per_s") or r["entries_per_s"]
                    ax.plot([x], [y], "*", ms=14, color=pts.get_color(), mec="k")
        ax.plot([], [], "k--", lw=1, label="model min(in flight / RTT, M x 1e6 / S, CPU), per worker count")
        ax.plot([], [], "*", ms=12, color="w", mec="k", label="auto-tuned (x: where the workers settled)")
        per_request = ref["entries"] / max(ref["requests"], 1)
        knee = min(
            ref["slots"] * 1e6 / ref["service_us"] if ref["slots"] else float("inf"),
            CORES * 1e6 / (cpu * per_request),  # the 2-core plateau
        ) * (ref["latency_ms"] / 1e3)
        ax.axvline(knee, color="grey", ls=":", lw=1)
        ax.text(knee * 1.05, ax.get_ylim()[1] * 0.8, f"2-core knee ~{knee:.0f} in flight", color="grey", fontsize=8)
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
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
        fig.tight_layout()
        fig.savefig(PLOTS / "scale-workers.png", dpi=110)
        print(PLOTS / "scale-workers.png")
    if cap:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        cap.sort(key=lambda r: r["workers"])
        w = [r["workers"] for r in cap]
        ax.plot(w, [r["entries_per_s"] for r in cap], "o-", label="mean entries/s over the run")
        ax.plot(w, [r.get("steady_entries_per_s") or 0 for r in cap], "^-", label="steady (median 1-s rate)")
        ax.plot(w, [r["peak_entries_per_s"] for r in cap], "s--", label="busiest 1 s at the server")
        if loaded is not cap and loaded:
            ax.plot(
                [r["workers"] for r in loaded],
                [r["entries_per_s"] for r in loaded],
                "x:",
                color="grey",
                label=f"mean, host at load {min(r['load_start'] for r in loaded):.0f}-"
                f"{max(r['load_end'] for r in loaded):.0f}",
            )
        ax.axhline(cap[0]["max_ops"], color="r", lw=1, label=f"--max-ops-per-second {cap[0]['max_ops']:g}")
        ax.axhline(cap[0]["max_ops"] * 1.25, color="r", lw=1, ls=":", label="cap + the bucket's 0.25 s burst")
        ax.set_xscale("log", base=2)
        ax.set_xticks(w, [str(x) for x in w])
        ax.set_ylim(0, max(r["peak_entries_per_s"] for r in cap) * 1.15)
        ax.set_xlabel("worker processes")
        ax.set_ylabel("entries/s")
        ax.set_title(
            f"job-wide cap across workers (RTT {cap[0]['latency_ms']:g} ms, --threads {cap[0]['threads']}, "
            f"host load {min(r['load_start'] for r in cap):.0f}-{max(r['load_end'] for r in cap):.0f})",
            fontsize=9,
        )
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(PLOTS / "scale-ratecap.png", dpi=110)
        print(PLOTS / "scale-ratecap.png")


def markdown(rows: list[dict]) -> str:
    """The grid and rate-cap rows as a markdown table (for RESULTS-scale.md)."""
    out = [
        "| kind | workers | threads | in flight | entries/s (mean) | requests/s steady / peak | model requests/s "
        "| mean latency ms | CPU us/entry | tasks | host load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def order(r: dict) -> tuple:
        return (r["kind"], r["workers"], r["threads"] == "auto", 0 if r["threads"] == "auto" else int(r["threads"]))

    for r in sorted((r for r in rows if r.get("kind") in ("grid", "ratecap")), key=order):
        x = in_flight(r)
        per_request = r["entries"] / max(r["requests"], 1)
        m = model(r, x, r["cpu_us_per_entry"]) / per_request if x else None
        steady = f"{r['steady_requests_per_s']:,.0f}" if r.get("steady_requests_per_s") else "-"
        out.append(
            f"| {r['kind']} | {r['workers']} | {r['threads']} | {x or '-'} | {r['entries_per_s']:,} | "
            f"{steady} / {r['peak_requests_per_s']:,.0f} | "
            f"{f'{m:,.0f}' if m else '-'} | {r['mean_latency_ms']:.1f} | {r['cpu_us_per_entry']:.0f} | {r['tasks']} | "
            f"{r['load_start']:.0f}-{r['load_end']:.0f} |"
        )
    return "\n".join(out)
