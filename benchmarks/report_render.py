"""Render report.py's raw rows: markdown (medians, min/max, ratios, fraction of the probe, targets) and PNGs.

Pure: reads rows (dicts from the raw JSON-lines files), writes ``out`` and ``out.parent/plots/*.png``; runs
nothing, so the report can be re-rendered from merged raw files or tested without the NAS.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after choosing the backend
from report_actions import COMMANDS, LABELS, SERIAL, TOOLS

PROBE_TARGET = 0.8  # at 1 ms every pfs action within 80 % of its probe's best rate
# Each action's ceiling: pstat's cold lstat rate for metadata work, its read mode (pstat -R: open, read to
# the end, close) for the actions that move every file's data, prm.py --stat (raw threads: lstat + unlink
# as listed, then the directories) for rm.
PROBE_OF = {"cp": "pread", "verify": "pread", "rm": "prm"}
PROBE_LABELS = {
    "pstat": "pstat (cold lstat/s)",
    "pread": "pstat -R (cold whole-file reads/s)",
    "prm": "prm.py --stat (cold files removed/s)",
}
PROBE_SOURCES = {
    "pstat": "benchmarks/probe/pstat.c",
    "pread": "benchmarks/probe/pstat.c",
    "prm": "benchmarks/probe/prm.py",
}


def probe_tool(action: str) -> str:
    return PROBE_OF.get(action, "pstat")


RATIO_TARGETS = {"scan": 8.0, "rm": 10.0}  # at 5 ms: pfs scan >= 8x find, pfs rm >= 10x rm -rf


class Cells:
    """Timed runs grouped by (action, tree, rtt, tool) for kind "run", by threads for the sweep and the probe."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        ok = [r for r in rows if r.get("ok") and r.get("seconds")]
        self.trees = list(dict.fromkeys(r["tree"] for r in rows if r.get("tree")))
        self.files = {r["tree"]: r["files"] for r in rows if r.get("files")}
        self.entries = {r["tree"]: r["entries"] for r in rows if r.get("entries")}
        self.rtts = sorted({r["rtt_ms"] for r in rows if r.get("kind") == "run"})
        self.runs: dict[tuple, list[float]] = defaultdict(list)
        self.settled: dict[tuple, list[int]] = defaultdict(list)
        self.sweep: dict[tuple, list[float]] = defaultdict(list)
        self.probe: dict[tuple, list[float]] = defaultdict(list)
        self.reported: dict[tuple, list[float]] = defaultdict(list)  # pfs's own "seconds" (--json)
        self.killed: dict[tuple, list[float]] = defaultdict(list)  # runs killed at --timeout: lower bounds
        for r in rows:
            if r.get("kind") == "run" and r.get("timed_out"):
                self.killed[r["action"], r["tree"], r["rtt_ms"], r["tool"]].append(r["seconds"])
        for r in ok:
            if r["kind"] == "run":
                self.runs[r["action"], r["tree"], r["rtt_ms"], r["tool"]].append(r["seconds"])
                if r.get("pfs_seconds"):
                    self.reported[r["action"], r["tree"], r["rtt_ms"]].append(r["pfs_seconds"])
            elif r["kind"] == "sweep":
                self.sweep[r["action"], r["tree"], r["rtt_ms"], r["threads"]].append(r["files_per_s"])
            elif r["kind"] == "probe":
                self.probe[r["tool"], r["tree"], r["rtt_ms"], r["threads"]].append(r["files_per_s"])
            settled = (r.get("concurrency") or {}).get("settled")
            if settled and r.get("threads") == "auto":
                self.settled[r["kind"], r["action"], r["tree"], r["rtt_ms"]].append(settled)

    def seconds(self, action: str, tree: str, rtt: float, tool: str) -> list[float]:
        return self.runs.get((action, tree, rtt, tool), [])

    def median(self, action: str, tree: str, rtt: float, tool: str) -> float | None:
        s = self.seconds(action, tree, rtt, tool)
        return statistics.median(s) if s else None

    def rate(self, action: str, tree: str, rtt: float, tool: str) -> float | None:
        m = self.median(action, tree, rtt, tool)
        return self.files[tree] / m if m else None

    def entry_rate(self, action: str, tree: str, rtt: float) -> float | None:
        """pfs entries/s: files and directories (the root included) per second."""
        m = self.median(action, tree, rtt, "pfs")
        return self.entries[tree] / m if m and tree in self.entries else None

    def ratio(self, action: str, tree: str, rtt: float, other: str) -> float | None:
        """How many times faster pfs is than ``other`` (median seconds over median seconds)."""
        mine, theirs = self.median(action, tree, rtt, "pfs"), self.median(action, tree, rtt, other)
        return theirs / mine if mine and theirs else None

    def killed_bound(self, action: str, tree: str, rtt: float, tool: str) -> float | None:
        """When every run of ``tool`` was killed at the timeout: the seconds it took at least, else None."""
        killed = self.killed.get((action, tree, rtt, tool))
        return min(killed) if killed and not self.seconds(action, tree, rtt, tool) else None

    def lower_ratio(self, action: str, tree: str, rtt: float, other: str) -> float | None:
        """When every run of ``other`` was killed at the timeout: at least this many times faster."""
        mine, bound = self.median(action, tree, rtt, "pfs"), self.killed_bound(action, tree, rtt, other)
        return bound / mine if mine and bound else None

    def ratio_cell(self, action: str, tree: str, rtt: float, other: str) -> str:
        low = self.lower_ratio(action, tree, rtt, other)
        return f"> {fmt_x(low)}" if low is not None else fmt_x(self.ratio(action, tree, rtt, other))

    def seconds_cell(self, action: str, tree: str, rtt: float, tool: str) -> str:
        bound = self.killed_bound(action, tree, rtt, tool)
        return f"> {bound:.0f} (killed)" if bound else fmt_s(self.seconds(action, tree, rtt, tool))

    def probe_levels(self, tree: str, rtt: float, tool: str = "pstat") -> dict[int, float]:
        got = sorted((t, v) for (pt, tr, r, t), v in self.probe.items() if (pt, tr, r) == (tool, tree, rtt))
        return {t: statistics.median(v) for t, v in got}

    def probe_best(self, tree: str, rtt: float, tool: str = "pstat") -> tuple[float, int] | None:
        levels = self.probe_levels(tree, rtt, tool)
        return max((rate, t) for t, rate in levels.items()) if levels else None

    def of_probe(self, action: str, tree: str, rtt: float) -> float | None:
        rate, best = self.rate(action, tree, rtt, "pfs"), self.probe_best(tree, rtt, probe_tool(action))
        return rate / best[0] if rate and best else None

    def settled_median(self, kind: str, action: str, tree: str, rtt: float) -> int | None:
        s = self.settled.get((kind, action, tree, rtt))
        return int(statistics.median(s)) if s else None


def fmt_s(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    digits = 1 if med >= 10 else 2
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def fmt_x(x: float | None) -> str:
    return f"{x:.2f}x" if x is not None else "-"


def fmt_rate(x: float | None) -> str:
    return f"{x:,.0f}" if x else "-"


def table(head: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(head))]
    return ["| " + " | ".join(r) + " |" for r in [head, align, *rows]]


def spread(groups: list[list[float]]) -> tuple[list[float], list[list[float]]]:
    """Medians and their distance to min and max, for matplotlib's ``errorbar``."""
    med = [statistics.median(v) for v in groups]
    return med, [
        [m - min(v) for m, v in zip(med, groups, strict=True)],
        [max(v) - m for m, v in zip(med, groups, strict=True)],
    ]


def config_section(rows: list[dict], cells: Cells) -> list[str]:
    configs = [r for r in rows if r.get("kind") == "config"]
    timed = [r for r in rows if r.get("kind") in ("run", "sweep")]
    stamps = sorted(r["ts"] for r in rows if r.get("ts"))
    lines = ["## Configuration", ""]
    if configs:
        c = configs[-1]
        lines += [
            f"- host `{c.get('host')}`, {c.get('cpus')} CPUs, kernel {c.get('kernel')}, pfs commit `{c.get('commit')}`,"
            f" {c.get('glusterfs') or 'glusterfs ?'}",
            *(f"- command: `benchmarks/report.py {r.get('argv', '')}`" for r in configs),
        ]
    if stamps:
        lines.append(f"- measured {stamps[0]} to {stamps[-1]}")
    trees = ", ".join(f"`{t}` ({cells.files.get(t, 0):,} files)" for t in cells.trees)
    lines += [
        f"- trees: {trees}; added RTTs: {', '.join(f'{r:g} ms' for r in cells.rtts)}",
        "- every time is the wall time of the whole command, cold: `nas.sh remount` before each run (pfs: Python "
        "start-up, its embedded LocalCluster, the work, the output); files/s = regular files of the tree / seconds "
        "(entries/s: files and directories)",
        "- cells: median seconds (min-max) over the runs; `x` = how many times faster pfs is (their median / "
        "pfs's median); `of probe` = pfs files/s / the best rate of the action's probe on the same tree and RTT "
        "(pstat's cold lstat/s; for cp and verify, which read every file, pstat -R's cold whole-file reads/s; "
        "for rm, prm.py --stat's files removed/s); "
        "`pfs job s` = the seconds pfs itself reports (--json), without the CLI's imports; `settled` = "
        "where auto-tuning settled (median over runs of the median over workers)",
        "- tools:",
        *(f"  - {LABELS.get(t, t)}: `{cmd}`" + (f" ({note})" if note else "") for t, (cmd, note) in COMMANDS.items()),
    ]
    warm = [r for r in timed if r.get("caches") != "remount"]
    if warm:
        lines.append(
            f"- **not after a remount: {len(warm)} of {len(timed)} runs** (the mount was busy, someone else was "
            "using it: only the kernel caches were dropped)"
        )
    if timed:
        load = [r["load"] for r in timed if r.get("load") is not None]
        busy = [r["host_busy"] for r in timed if r.get("host_busy") is not None]
        lines += [
            "",
            "## Host load",
            "",
            f"Load average before a run: min {min(load):.1f}, median {statistics.median(load):.1f}, max "
            f"{max(load):.1f}. Host CPU busy during a run (both cores, everyone's processes): min {min(busy)} %, "
            f"median {statistics.median(busy):.0f} %, max {max(busy)} %.",
        ]
    return lines + [""]


def targets_section(cells: Cells) -> list[str]:
    rows = []
    for action in TOOLS:
        for tree in cells.trees:
            if cells.seconds(action, tree, 1.0, "pfs"):
                f = cells.of_probe(action, tree, 1.0)
                status = "not measured (no probe)" if f is None else ("**met**" if f >= PROBE_TARGET else "missed")
                what = f"{action}: pfs >= 80 % of {probe_tool(action)}"
                rows.append([what, tree, "1 ms", fmt_x(f), status])
    for action, want in RATIO_TARGETS.items():
        for tree in cells.trees:
            if cells.seconds(action, tree, 5.0, "pfs"):
                x = cells.ratio(action, tree, 5.0, SERIAL[action])
                low = cells.lower_ratio(action, tree, 5.0, SERIAL[action])
                if low is not None:
                    status = "**met** (lower bound)" if low >= want else "not judged: serial tool killed first"
                else:
                    status = "not measured" if x is None else ("**met**" if x >= want else "missed")
                cell = cells.ratio_cell(action, tree, 5.0, SERIAL[action])
                rows.append([f"{action}: pfs >= {want:g}x {LABELS[SERIAL[action]]}", tree, "5 ms", cell, status])
    if not rows:
        return ["## Targets", "", "No runs at 1 ms or 5 ms: no target can be judged.", ""]
    return ["## Targets", "", *table(["target", "tree", "RTT", "measured", "status"], rows, right_from=3), ""]


def action_section(cells: Cells, action: str) -> list[str]:
    def ran(t: str) -> bool:
        return any(
            cells.seconds(action, tr, r, t) or cells.killed.get((action, tr, r, t))
            for tr in cells.trees
            for r in cells.rtts
        )

    tools = [t for t in TOOLS[action] if ran(t)]
    if "pfs" not in tools:
        return []
    others = [t for t in tools if t != "pfs"]
    head = ["tree", "RTT ms", *(f"{'pfs ' + action if t == 'pfs' else LABELS[t]} s" for t in tools)]
    head += ["pfs job s", "pfs files/s", "pfs entries/s"]
    head += [f"x {LABELS[t]}" for t in others] + ["of probe", "settled"]
    body = []
    for tree in cells.trees:
        for rtt in cells.rtts:
            if not any(cells.seconds(action, tree, rtt, t) for t in tools):
                continue
            settled = cells.settled_median("run", action, tree, rtt)
            body.append(
                [tree, f"{rtt:g}", *(cells.seconds_cell(action, tree, rtt, t) for t in tools)]
                + [fmt_s(cells.reported.get((action, tree, rtt), [])), fmt_rate(cells.rate(action, tree, rtt, "pfs"))]
                + [fmt_rate(cells.entry_rate(action, tree, rtt))]
                + [cells.ratio_cell(action, tree, rtt, t) for t in others]
                + [fmt_x(cells.of_probe(action, tree, rtt)), str(settled) if settled else "-"]
            )
    return [f"## {action}", "", *table(head, body, right_from=2), "", f"![{action}](plots/rtt-{action}.png)", ""]


def probe_section(cells: Cells) -> list[str]:
    lines = []
    for tool, label in PROBE_LABELS.items():
        levels = sorted({t for (pt, _, _, t) in cells.probe if pt == tool})
        body = []
        for tree in cells.trees:
            for rtt in sorted({r for (pt, tr, r, _) in cells.probe if (pt, tr) == (tool, tree)}):
                got = cells.probe_levels(tree, rtt, tool)
                best = cells.probe_best(tree, rtt, tool)
                body.append([tree, f"{rtt:g}", *(fmt_rate(got.get(t)) for t in levels), f"{best[0]:,.0f} at {best[1]}"])
        if body:
            head = ["tree", "RTT ms", *(f"{t} threads" for t in levels), "best"]
            title = f"## Probe: {label} at N in flight ({PROBE_SOURCES[tool]})"
            lines += [title, "", *table(head, body, 2), ""]
    return lines


def sweep_section(cells: Cells, plots: Path) -> list[str]:
    groups = sorted({k[:3] for k in cells.sweep}, key=str)
    if not groups:
        return []
    lines = ["## Concurrency: pfs with --threads fixed against auto-tuning", ""]
    levels = sorted({k[3] for k in cells.sweep if k[3] != "auto"})
    head = ["action", "tree", "RTT ms", *(f"--threads {t}" for t in levels), "auto", "auto settled at"]
    body = []
    for action, tree, rtt in groups:
        med = {t: statistics.median(v) for (a, tr, r, t), v in cells.sweep.items() if (a, tr, r) == (action, tree, rtt)}
        settled = cells.settled_median("sweep", action, tree, rtt)
        body.append([action, tree, f"{rtt:g}", *(fmt_rate(med.get(t)) for t in [*levels, "auto"]), str(settled or "-")])
        plot_sweep(cells, action, tree, rtt, plots / f"concurrency-{action}-{tree}-{rtt:g}ms.png")
    lines += ["Files/s, median of the runs.", "", *table(head, body, right_from=2), ""]
    lines += [f"![{a} {t}](plots/concurrency-{a}-{t}-{r:g}ms.png)" for a, t, r in groups]
    return [*lines, ""]


def plot_rtt(cells: Cells, action: str, path: Path) -> bool:
    trees = [t for t in cells.trees if any(cells.seconds(action, t, r, "pfs") for r in cells.rtts)]
    if not trees:
        return False
    ncols = min(3, len(trees))
    nrows = -(-len(trees) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows), squeeze=False)
    for ax, tree in zip(axes.flat, trees, strict=False):
        for tool in TOOLS[action]:
            pts = [(r, cells.seconds(action, tree, r, tool)) for r in cells.rtts]
            pts = [(r, [cells.files[tree] / s for s in v]) for r, v in pts if v]
            label = "pfs" if tool == "pfs" else LABELS[tool]
            if pts:
                y, err = spread([v for _, v in pts])
                line = ax.errorbar([r for r, _ in pts], y, yerr=err, marker="o", capsize=3, label=label)
                color = line.lines[0].get_color()
            else:
                color = None
            bounds = [(r, cells.killed_bound(action, tree, r, tool)) for r in cells.rtts]
            killed = [(r, cells.files[tree] / b) for r, b in bounds if b]
            if killed:  # killed at --timeout: its rate was at most this
                ax.plot(*zip(*killed, strict=True), "v", color=color, ms=9, label=f"{label}: killed (at most)")
        best = [(r, cells.probe_best(tree, r, probe_tool(action))) for r in cells.rtts]
        best = [(r, b[0]) for r, b in best if b]
        if best:
            ax.plot(*zip(*best, strict=True), "k--", marker="x", label=f"{probe_tool(action)} best")
        ax.set(title=f"{action}: {tree}", xlabel="added RTT (ms)", ylabel="files/s", xscale="log", yscale="log")
        ax.set_xticks(cells.rtts, [f"{r:g}" for r in cells.rtts])
        ax.minorticks_off()
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(trees) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def plot_sweep(cells: Cells, action: str, tree: str, rtt: float, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    fixed = sorted((k[3], v) for k, v in cells.sweep.items() if k[:3] == (action, tree, rtt) and k[3] != "auto")
    if fixed:
        y, err = spread([v for _, v in fixed])
        ax.errorbar([t for t, _ in fixed], y, yerr=err, marker="o", capsize=3, label=f"pfs {action} --threads N")
    auto = cells.sweep.get((action, tree, rtt, "auto"))
    if auto:
        rate = statistics.median(auto)
        ax.axhline(rate, color="tab:green", ls=":", label=f"pfs {action} auto: {rate:,.0f} files/s")
        settled = cells.settled_median("sweep", action, tree, rtt)
        if settled:
            ax.plot([settled], [rate], "*", color="tab:green", ms=14, label=f"auto settled at {settled}")
    probe = cells.probe_levels(tree, rtt, probe_tool(action))
    if probe:
        ax.plot(list(probe), list(probe.values()), "k--", marker="x", label=PROBE_LABELS[probe_tool(action)])
    ax.set(
        title=f"{action} {tree}, {rtt:g} ms: files/s against concurrency (pfs: per worker process)",
        xlabel="concurrency (--threads / pstat threads)",
        ylabel="files/s",
        xscale="log",
    )
    ticks = sorted({*(t for t, _ in fixed), *probe})
    if ticks:
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    ax.title.set_fontsize(9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def cpu_section(rows: list[dict]) -> list[str]:
    """Where the host's cores went: per action and tool (and probe), the tool's own CPU, the NAS harness's
    (bricks, FUSE client, delay link) and what the two need of the cores at the least."""
    cpus = next((r.get("cpus") for r in reversed(rows) if r.get("kind") == "config" and r.get("cpus")), None)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("ok") and r.get("cpu_s") is not None and r.get("nas_cpu_s") is not None and r.get("seconds"):
            if r["kind"] == "run":
                groups[r["action"], LABELS.get(r["tool"], r["tool"]), r["tree"], r["rtt_ms"]].append(r)
            elif r["kind"] == "probe":
                groups["probe", f"{r['tool']} at {r['threads']}", r["tree"], r["rtt_ms"]].append(r)
    if not groups or not cpus:
        return []
    body = []
    for (action, tool, tree, rtt), group in sorted(groups.items(), key=lambda kv: (kv[0][2], kv[0][3], kv[0][0])):
        med = {k: statistics.median(r[k] for r in group) for k in ("seconds", "cpu_s", "nas_cpu_s")}
        files = group[0].get("files") or group[0].get("ops") or 0
        busy = [r["host_busy"] for r in group if r.get("host_busy") is not None]
        body.append(
            [
                action,
                tool,
                tree,
                f"{rtt:g}",
                f"{med['seconds']:.1f}",
                f"{med['cpu_s']:.1f}",
                f"{1e6 * med['cpu_s'] / files:,.0f}" if files else "-",
                f"{med['nas_cpu_s']:.1f}",
                f"{(med['cpu_s'] + med['nas_cpu_s']) / cpus:.1f}",
                f"{statistics.median(busy):.0f}" if busy else "-",
            ]
        )
    head = ["action", "tool", "tree", "RTT ms", "wall s", "tool CPU s", "tool CPU µs/file", "NAS CPU s"]
    head += [f"(tool + NAS) / {cpus} cores s", "host busy %"]
    return [
        "## CPU: where the host's cores went",
        "",
        "Medians over the runs. `NAS CPU` is the harness's processes meanwhile (bricks, FUSE client, delay link, "
        f"sshd); `(tool + NAS) / {cpus} cores` is the wall time those two alone need of the host at the least: "
        "where it is close to `wall s`, the run was bound by this host's CPU, not by the round trips. "
        "A probe's CPU covers its whole process (its untimed directory opens too); its `wall s` is its timed part.",
        "",
        *table(head, body, right_from=3),
        "",
    ]


def failures_section(rows: list[dict]) -> list[str]:
    bad = [r for r in rows if r.get("kind") in ("run", "sweep", "probe") and not r.get("ok")]
    if not bad:
        return []
    lines = ["## Failed and killed runs (out of the medians; a killed run's time is shown as a lower bound)", ""]
    for r in bad:
        what = f"{r.get('action') or 'probe'} {r.get('tool')}"
        what += f" threads={r['threads']}" if r.get("threads") else ""
        lines.append(f"- {r.get('ts')} {r.get('rtt_ms'):g} ms {r.get('tree')} {what}: {r.get('note') or 'errors'}")
    return [*lines, ""]


def render(rows: list[dict], out: Path) -> str:
    """Write the markdown report to ``out`` and its PNGs to ``out.parent/plots``; return the markdown."""
    out = Path(out)
    plots = out.parent / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    cells = Cells(rows)
    lines = ["# Benchmark report: pfs beside the serial tools, pfutils and the probed ceilings", ""]
    lines += ["Written by `benchmarks/report.py` (`report_render.py`) from its raw rows; see benchmarks/README.md.", ""]
    lines += config_section(rows, cells) + targets_section(cells)
    for action in TOOLS:
        section = action_section(cells, action)
        if section and plot_rtt(cells, action, plots / f"rtt-{action}.png"):
            lines += section
    lines += probe_section(cells) + cpu_section(rows) + sweep_section(cells, plots) + failures_section(rows)
    text = "\n".join(lines).rstrip() + "\n"
    out.write_text(text)
    return text
