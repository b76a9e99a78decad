#!/usr/bin/env python3
"""One benchmark report: every pfs action beside its serial tool and pfutils, per round trip, against pstat.

    .venv/bin/python benchmarks/report.py                        # the full matrix (many hours; see README.md)
    .venv/bin/python benchmarks/report.py --rtts 1 --trees bal20k --actions scan,rm --runs 1
    .venv/bin/python benchmarks/report.py --quick                # smoke test: 300-file tree, one run
    .venv/bin/python benchmarks/report.py --render RAW.jsonl...  # re-render a report, run nothing

For each RTT, tree, action, run and tool: make what the run needs (a fresh NAS copy for rm, made at
--make-delay-us), set the delay, cold caches (``nas.sh remount``), time the whole command, check counts,
append a row to the raw JSON-lines file.  Per RTT and tree, pstat (benchmarks/probe) measures the best
cold lstat rate over --probe-threads; a sweep times pfs with --threads fixed against auto-tuning.  Rows
already in --raw are skipped, so an interrupted run goes on where it stopped.  Then the report
(report_render.py): medians, min/max, ratios, fraction of the probe, targets, plots.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report_nas as nas
from common import REPO, loadavg, timed
from report_actions import TOOLS, Ctx, check, cleanup, command, ensure_pristine, prepare
from report_render import probe_tool, render

ALL_ACTIONS = list(TOOLS)
DEFAULT_TREES = ["bal20k", "flat20k", "deep20k", "bal100k", "flat100k", "deep100k"]


def csv(kind):
    return lambda s: [kind(x) for x in s.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtts", type=csv(float), help="added round trips, ms (default 0.2,1,5; --quick: current)")
    ap.add_argument("--trees", type=csv(str), help="default bal20k,flat20k,deep20k,bal100k,flat100k,deep100k")
    ap.add_argument("--actions", type=csv(str), default=ALL_ACTIONS, help=f"default {','.join(ALL_ACTIONS)}")
    ap.add_argument("--tools", type=csv(str), help="only these tools (pfs, find, du, rm, cp, rsync, diff, pfutils)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900, help="s; kill a run then, its time a lower bound")
    ap.add_argument("--probe-threads", type=csv(int), help="pstat concurrencies (default 1,8,32,64,128,256)")
    ap.add_argument("--read-probe-threads", type=csv(int), help="pstat -R concurrencies (default 8,32,128)")
    ap.add_argument("--rm-probe-threads", type=csv(int), help="prm.py --stat concurrencies (default 8,64)")
    ap.add_argument("--sweep-actions", type=csv(str), default=["scan", "rm"], help="'' to skip the sweep")
    ap.add_argument("--sweep-threads", type=csv(int), help="fixed --threads values (default 8,16,32,64,128,256)")
    ap.add_argument("--sweep-rtt", type=float, help="ms (default 1 if among --rtts, else the first RTT)")
    ap.add_argument("--sweep-tree", help="default: the first tree")
    ap.add_argument("--make-delay-us", type=int, help="RTT while trees and copies are made (default 0; -1 = leave)")
    ap.add_argument("--nas-dir", default="/mnt/nas")
    ap.add_argument("--local-dir", default="/srv/bench-local", help="pristine copies, scratch, path lists")
    ap.add_argument("--raw", type=Path, help="JSON-lines rows (appended; rows in it are not run again)")
    ap.add_argument("--out", type=Path, help="report (default benchmarks/RESULTS-report.md; plots/ beside it)")
    ap.add_argument("--lock", default="/run/nasbench/bench.lock", help="flock'd around each timed run ('' = none)")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny trees, one run, one RTT")
    ap.add_argument("--render", type=Path, nargs="+", metavar="RAW", help="only render these raw files")
    args = ap.parse_args(argv)
    q = args.quick
    args.trees = args.trees or (["bal300"] if q else DEFAULT_TREES)
    args.runs = 1 if q and args.runs == 3 else args.runs
    args.probe_threads = args.probe_threads or ([1, 8, 32] if q else [1, 8, 32, 64, 128, 256])
    args.read_probe_threads = args.read_probe_threads or ([8] if q else [8, 32, 128])
    args.rm_probe_threads = args.rm_probe_threads or ([8] if q else [8, 64])
    args.sweep_threads = args.sweep_threads or ([8, 64] if q else [8, 16, 32, 64, 128, 256])
    args.sweep_tree = args.sweep_tree or args.trees[0]
    make = args.make_delay_us if args.make_delay_us is not None else (-1 if q else 0)
    args.make_delay = None if make < 0 else make
    prefix = "report-quick-" if q else "report-"
    args.work = Path(args.local_dir) / f"{prefix}work"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = args.work if q else REPO / "benchmarks" / "results"
    args.raw = args.raw or results / f"raw-{stamp}.jsonl"
    args.out = args.out or (args.work / "RESULTS-report.md" if q else REPO / "benchmarks" / "RESULTS-report.md")
    args.prefix = prefix
    bad = set(args.actions) - set(ALL_ACTIONS)
    if bad:
        ap.error(f"unknown actions {sorted(bad)}")
    return args


class Raw:
    """The raw rows: appended as they come, so a crash loses at most the run in progress."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        self.done = {self.key(r) for r in rows if self.finished(r)}

    @staticmethod
    def finished(r: dict) -> bool:
        """Not to be run again: it succeeded, or it was killed at --timeout (a lower bound is its result)."""
        return bool(r.get("ok", True) or r.get("timed_out"))

    @staticmethod
    def key(r: dict) -> tuple:
        return tuple(r.get(k) for k in ("kind", "rtt_ms", "tree", "action", "tool", "threads", "run"))

    def add(self, row: dict) -> None:
        row = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **row}
        with open(self.path, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        if self.finished(row):
            self.done.add(self.key(row))


def config_row(args) -> dict:
    def out(cmd: list[str]) -> str:
        """The first line a version command prints, or "" (missing tool)."""
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        except OSError:
            return ""
        return ((r.stdout or r.stderr).strip().splitlines() or [""])[0]

    return {
        "kind": "config",
        "argv": " ".join(sys.argv[1:]),
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "commit": out(["git", "rev-parse", "--short", "HEAD"]),
        "glusterfs": out(["glusterfs", "--version"]),
        "rtts_ms": args.rtts,
        "trees": args.trees,
        "actions": args.actions,
        "runs": args.runs,
        "quick": args.quick,
        "load": loadavg(),
    }


def measure(args, raw: Raw, ctx: Ctx, rtt_ms: float, action: str, tool: str, run: int, kind: str, threads=None):
    base = {"kind": kind, "rtt_ms": rtt_ms, "tree": ctx.tree.name, "action": action, "tool": tool}
    base |= {"threads": (threads or "auto") if tool == "pfs" else None, "run": run}
    if Raw.key(base) in raw.done:
        return
    with nas.team_lock(args.lock):
        nas.set_delay(round(rtt_ms * 1000))
        cache_path = prepare(action, tool, ctx)
        cmd, env = command(action, tool, ctx, threads)
        load = loadavg()
        r = timed(f"{action} {tool}", cmd, cache_path, capture=True, env=env, timeout=args.timeout)
        try:
            ok, note, extra = check(action, tool, ctx, r)
        except (KeyError, ValueError, IndexError, TypeError) as exc:
            ok, note, extra = False, f"check failed: {exc!r}: {r.stderr.strip()[-200:]}", {}
        if r.timed_out:
            ok, note = False, f"killed after {args.timeout:g} s: its time is a lower bound"
            extra["timed_out"] = True
        cleanup(action, ctx)
    row = base | {
        "files": ctx.tree.files,
        "entries": ctx.tree.entries,
        "seconds": round(r.seconds, 3),
        "files_per_s": round(ctx.tree.files / r.seconds, 1),
        "ok": ok,
        "note": note,
        "rc": r.rc,
        "caches": r.caches,
        "host_busy": round(r.busy),
        "cpu_s": r.cpu_s,
        "nas_cpu_s": r.nas_cpu_s,
        "load": round(load, 2),
        "cmd": " ".join(cmd),
        **extra,
    }
    raw.add(row)
    settled = (extra.get("concurrency") or {}).get("settled")
    nas.log(
        f"{rtt_ms:g} ms {ctx.tree.name} {action} {tool}{'' if threads is None else f' --threads {threads}'} "
        f"run {run + 1}: {r.seconds:.1f} s {'ok' if ok else 'FAILED ' + note}"
        + (f" (settled {settled})" if settled else "")
    )


def probe(args, raw: Raw, ctx: Ctx, rtt_ms: float, exe: str, actions: list[str]) -> None:
    """The ceilings: pstat's lstat rate; its read mode (pstat -R) when an action reads every file; for rm,
    prm.py --stat on a fresh copy (raw threads doing pfs rm's per-file work)."""
    paths = nas.path_list(ctx.tree, args.work)
    wanted = {"pstat"} | {probe_tool(a) for a in actions}  # pstat always: the lstat ceiling of every tree
    threads = {"pstat": args.probe_threads, "pread": args.read_probe_threads, "prm": args.rm_probe_threads}
    levels = [(tool, t) for tool, ts in threads.items() if tool in wanted for t in ts]
    for tool, t in levels:
        key = {"kind": "probe", "rtt_ms": rtt_ms, "tree": ctx.tree.name, "action": None, "tool": tool}
        key |= {"threads": t, "run": 0}
        if Raw.key(key) in raw.done:
            continue
        with nas.team_lock(args.lock):
            nas.set_delay(round(rtt_ms * 1000))
            if tool == "prm":
                nas.make_tree(ctx.tree, ctx.rm_copy, ctx.make_delay, ctx.run_delay, ours=True)
            load = loadavg()
            if tool == "prm":
                got = nas.prm_probe(ctx.rm_copy, t)
                nas.remove_tree(ctx.rm_copy)
            else:
                got = nas.probe(exe, paths, t, ctx.tree.path, read=tool == "pread")
            row = key | got | {"load": round(load, 2), "files": ctx.tree.files}
        row["ok"] = row["errors"] == 0 and row["ops"] == ctx.tree.files
        raw.add(row)
        unit = {"pread": "whole-file reads/s", "prm": "files removed/s"}.get(tool, "lstat/s")
        nas.log(f"{rtt_ms:g} ms {ctx.tree.name} {tool} -t {t}: {row['files_per_s'] or 0:,.0f} {unit}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.render:
        rows = [json.loads(line) for p in args.render for line in p.read_text().splitlines() if line.strip()]
        print(render(rows, args.out))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    nas.ensure_up(round((args.rtts or [1.0])[0] * 1000))
    start_delay = nas.current_delay()
    args.rtts = args.rtts or ([start_delay / 1000] if args.quick else [0.2, 1.0, 5.0])
    if args.sweep_rtt is None:
        args.sweep_rtt = 1.0 if 1.0 in args.rtts else args.rtts[0]
    raw = Raw(args.raw)
    raw.add(config_row(args))
    nas.log(f"raw rows: {args.raw}")

    def ctx_for(name: str) -> Ctx:
        tree = nas.Tree.parse(name, f"{args.nas_dir}/{'report-quick-' if args.quick else ''}{name}")
        local = Path(args.local_dir)
        return Ctx(
            tree,
            rm_copy=f"{args.nas_dir}/{args.prefix}rm-{name}",
            pristine=str(local / f"{args.prefix}copy-{name}"),
            scratch=local / f"{args.prefix}scratch",
            make_delay=args.make_delay,
            run_delay=start_delay,
        )

    def tools(action: str) -> list[str]:
        return [t for t in TOOLS[action] if not args.tools or t in args.tools]

    try:
        ctxs = {name: ctx_for(name) for name in dict.fromkeys([*args.trees, args.sweep_tree])}
        with nas.team_lock(args.lock):
            for ctx in ctxs.values():
                nas.ensure_tree(ctx.tree, args.make_delay, start_delay, ours=args.quick)
                if {"sync", "verify"} & set(args.actions):
                    ensure_pristine(ctx)
            exe = nas.pstat_binary(args.work)
        for rtt in args.rtts:
            for name in args.trees:
                ctx = ctxs[name]
                ctx.run_delay = round(rtt * 1000)
                probe(args, raw, ctx, rtt, exe, args.actions)
                for action in args.actions:
                    for run in range(args.runs):
                        for tool in tools(action):
                            measure(args, raw, ctx, rtt, action, tool, run, "run")
        ctx = ctxs[args.sweep_tree]
        ctx.run_delay = round(args.sweep_rtt * 1000)
        if args.sweep_actions:
            probe(args, raw, ctx, args.sweep_rtt, exe, args.sweep_actions)
        for run in range(args.runs):
            for threads in [*args.sweep_threads, None]:
                for action in args.sweep_actions:
                    measure(args, raw, ctx, args.sweep_rtt, action, "pfs", run, "sweep", threads)
    finally:
        nas.set_delay(start_delay)
    rows = [json.loads(line) for line in args.raw.read_text().splitlines() if line.strip()]
    print(render(rows, args.out))
    nas.log(f"report: {args.out}")


if __name__ == "__main__":
    main()
