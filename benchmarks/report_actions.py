"""What report.py runs for each action and tool: the untimed preparation, the command, and a cheap check.

Tools per action: pfs (auto-tuned unless ``threads``), the serial tool it replaces, and pfutils where it has
the action (cp, rm; its ``du`` raises NotImplementedError in 0.0.32).  Sources are never written: rm gets a
fresh NAS copy per run, cp and sync write local destinations, verify compares the tree with a pristine local
copy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bench_sync import change
from common import PFS, Run
from report_nas import Tree, make_tree, remove_tree

PFUTILS = "/opt/pfutils-venv/bin/pfutils"
TOOLS = {
    "scan": ["pfs", "find"],
    "du": ["pfs", "du"],
    "rm": ["pfs", "rm", "pfutils"],
    "cp": ["pfs", "cp", "pfutils"],
    "sync": ["pfs", "rsync"],
    "verify": ["pfs", "diff"],
}
SERIAL = {action: tools[1] for action, tools in TOOLS.items()}
LABELS = {"find": "find", "du": "du -s", "rm": "rm -rf", "cp": "cp -r", "rsync": "rsync", "diff": "diff -rq"}
LABELS["pfutils"] = "pfutils"
COMMANDS = {  # what each label runs, and a note (for the report's configuration)
    "pfs": ("pfs ACTION ... --no-progress --json", "auto-tuned: no --threads, PFS_THREADS unset"),
    "find": ("find TREE -printf '%s\\n'", "a stat per entry, like du"),
    "du": ("du -s TREE", ""),
    "rm": ("rm -rf COPY", "COPY: a fresh NAS copy per run"),
    "cp": ("cp -r TREE DST", "DST: local"),
    "rsync": ("rsync -a --delete TREE/ DST/", "DST: a local copy, 1 % of files changed, 1 % gone, 1 % extra"),
    "diff": ("diff -rq TREE COPY", "COPY: a local copy"),
    "pfutils": ("pfutils cp|rm -r [-y] -j 16 -c 100", "pfutils 0.0.32; it has no scan, sync, verify; du raises"),
}
SYNC_CHANGED = 0.01  # of the destination's files rewritten, as many deleted, as many extra


@dataclass
class Ctx:
    """Where one tree's runs read and write."""

    tree: Tree
    rm_copy: str  # NAS path: a fresh copy of the tree per rm run
    pristine: str  # local copy of the tree (verify's DST, each sync destination's starting point)
    scratch: Path  # local: manifests, cp and sync destinations
    make_delay: int | None  # us of RTT while copies are made (None: leave it)
    run_delay: int
    _listing: dict = field(default_factory=dict)

    @property
    def dst(self) -> str:
        return str(self.scratch / "dst")

    def listing(self) -> dict[str, tuple[int, int]]:
        """The pristine copy's files: relative path -> (size, mtime s), to check sync destinations."""
        if not self._listing:
            self._listing.update(walk_files(self.pristine))
        return self._listing


def walk_files(root: str) -> dict[str, tuple[int, int]]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            st = os.lstat(os.path.join(d, f))
            out[os.path.relpath(os.path.join(d, f), root)] = (st.st_size, int(st.st_mtime))
    return out


def ensure_pristine(ctx: Ctx) -> None:
    """A local copy with the tree's mtimes (rsync -a), made once at the tree-making delay; marker beside it."""
    mark = Path(ctx.pristine).parent / f".{Path(ctx.pristine).name}.done"
    if mark.exists():
        return
    from report_nas import log, set_delay

    log(f"copying {ctx.tree.path} to {ctx.pristine} (rsync -a, once)")
    remove_tree(ctx.pristine)
    if ctx.make_delay is not None:
        set_delay(ctx.make_delay)
    try:
        subprocess.run(["rsync", "-a", ctx.tree.path + "/", ctx.pristine + "/"], check=True)
    finally:
        if ctx.make_delay is not None:
            set_delay(ctx.run_delay)
    mark.write_text(f"rsync -a {ctx.tree.path}/ {ctx.pristine}/\nmade by benchmarks/report.py\n")


def prepare(action: str, tool: str, ctx: Ctx) -> str:
    """Untimed set-up of one run; returns the path whose caches go cold before it."""
    ctx.scratch.mkdir(parents=True, exist_ok=True)
    for leftover in ("dst", "m", "plan", "cache", "verify.parquet"):
        remove_tree(str(ctx.scratch / leftover))
    if action == "rm":
        make_tree(ctx.tree, ctx.rm_copy, ctx.make_delay, ctx.run_delay, ours=True)
        return ctx.rm_copy
    if action == "sync":
        subprocess.run(["cp", "-a", ctx.pristine, ctx.dst], check=True)
        change(Path(ctx.dst), SYNC_CHANGED)
    return ctx.tree.path


def command(action: str, tool: str, ctx: Ctx, threads: int | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one run (pfs without PFS_THREADS unless ``threads``)."""
    t, dst, s = ctx.tree.path, ctx.dst, ctx.scratch
    env = {k: v for k, v in os.environ.items() if k != "PFS_THREADS"}
    if tool == "pfs":
        opts = ["--no-progress", "--json", *(["--threads", str(threads)] if threads else [])]
        cmd = {
            "scan": ["scan", t, "-o", str(s / "m"), "--overwrite"],
            "du": ["du", t],
            "rm": ["rm", ctx.rm_copy, "-y"],
            "cp": ["cp", t, dst],
            "sync": ["sync", t, dst, "--delete", "-y", "--plan", str(s / "plan")],
            "verify": ["verify", t, ctx.pristine, "--report", str(s / "verify.parquet")],
        }[action]
        env["XDG_CACHE_HOME"] = str(s / "cache")  # sync's manifests: never reused between runs
        return [*PFS, *cmd, *opts], env
    pfutils = [PFUTILS, "-r", "-j", "16", "-c", "100"]
    return {
        ("scan", "find"): ["find", t, "-printf", "%s\\n"],
        ("du", "du"): ["du", "-s", t],
        ("rm", "rm"): ["rm", "-rf", ctx.rm_copy],
        ("rm", "pfutils"): [PFUTILS, "rm", "-r", "-y", "-j", "16", "-c", "100", ctx.rm_copy],
        ("cp", "cp"): ["cp", "-r", t, dst],
        ("cp", "pfutils"): [pfutils[0], "cp", *pfutils[1:], t, dst],
        ("sync", "rsync"): ["rsync", "-a", "--delete", t + "/", dst + "/"],
        ("verify", "diff"): ["diff", "-rq", t, ctx.pristine],
    }[(action, tool)], env


def pfs_summary(run: Run) -> dict:
    try:
        return json.loads(run.stdout) if run.stdout.strip().startswith("{") else {}
    except json.JSONDecodeError:
        return {}


def concurrency(summary: dict, stderr: str) -> dict | None:
    """Where auto-tuning settled: the ``concurrency`` block of the --json summary (nested for sync), else the log."""
    stack = [summary]
    while stack:
        obj = stack.pop()
        if isinstance(obj, dict):
            if isinstance(obj.get("concurrency"), dict) and obj["concurrency"]:
                return obj["concurrency"]
            stack.extend(obj.values())
    m = re.findall(r"settled at (\d+)", stderr)
    return {"mode": "auto", "settled": int(m[-1]), "from": "log"} if m else None


def check(action: str, tool: str, ctx: Ctx, run: Run) -> tuple[bool, str, dict]:
    """Did the run do the whole job? Counts only (cheap); returns (ok, note, extra row fields)."""
    n, extra, summary = ctx.tree.files, {}, {}
    if tool == "pfs":
        summary = pfs_summary(run)
        extra["pfs_seconds"] = summary.get("seconds")
        if summary.get("phases"):
            extra["phases"] = summary["phases"]  # cp: seconds per phase (scan, dirs, files, ...)
        extra["concurrency"] = concurrency(summary, run.stderr)
    if run.rc != 0:
        return False, f"exit {run.rc}: {run.stderr.strip()[-300:]}", extra
    got: object = None
    if action == "scan":
        got = summary["counts"]["files"] if tool == "pfs" else len(run.stdout.splitlines())
        want = n if tool == "pfs" else ctx.tree.entries
    elif action == "du":
        got = summary["total"]["files"] if tool == "pfs" else int(run.stdout.split()[0]) > 0
        want = n if tool == "pfs" else True
    elif action == "rm":
        got = "gone" if not os.path.lexists(ctx.rm_copy) else "still there"
        want = "gone"
    elif action == "cp":
        got, want = len(walk_files(ctx.dst)), n
    elif action == "sync":
        got = walk_files(ctx.dst) == ctx.listing()
        want = True
    else:  # verify: exit 0 means identical; pfs also says how many files it compared
        got = summary["counts"]["files"] if tool == "pfs" else n
        want = n
    ok = got == want
    extra["checked"] = got if isinstance(got, int | str) else None
    return ok, "" if ok else f"check: got {got}, want {want}", extra


def cleanup(action: str, ctx: Ctx) -> None:
    """Local outputs go after each run (a 100k-file copy is 1.2 GB)."""
    for leftover in ("dst", "m", "plan", "cache"):
        path = ctx.scratch / leftover
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
    if action == "rm" and os.path.lexists(ctx.rm_copy):
        remove_tree(ctx.rm_copy)
