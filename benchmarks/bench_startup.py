#!/usr/bin/env python3
"""Start-up of a small job: scan, cp, rm, sync and verify of a 1-file tree, wall and CPU of the whole process tree.

Each command runs as ``pfs`` would from a shell (a fresh interpreter), ``--runs`` times, the modes
interleaved within each run: ``server`` (opt-in: the command runs in a child of this user's warm
server, ``dask_pfs.warm``, started by ``pfs cluster start``), ``alone`` (``PFS_SERVER=off``, what users
meet by default: the command's own process, the driver alone,
``dask_pfs.runtime.here``) and ``cluster`` (``PFS_SERVER=off PFS_ALONE_SECONDS=0``: an embedded
cluster from the start).  CPU is user+system of the command and every process it started
(``os.wait4``), so worker processes count; in mode ``server`` also the server's child that ran the
command (its CPU, reported by the server) and the server's own CPU during the command (its fork).

    .venv/bin/python benchmarks/bench_startup.py --dir /tmp/startup            # local disk
    .venv/bin/python benchmarks/bench_startup.py --dir /mnt/lat/startup        # a FUSE mount (latfs)

``--base DIR`` adds a mode "base": the same commands with ``DIR`` (another checkout's ``dask_pfs`` and
``operators``, e.g. ``git archive`` of main plus the built ``_native`` library) first on ``PYTHONPATH``,
interleaved with this checkout's, for A/B ratios on a busy host (``--modes alone,base``).  Both trees are
byte-compiled first (``compiled``), so neither side pays for compiling its modules in every run.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import measured_env, served_cpu  # the one reading of a served command's CPU

PFS = [sys.executable, "-m", "dask_pfs"]


def server_cpu(pid: int | None) -> float:
    """The server's own user+system seconds (not its children's: the job's CPU comes in its report)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(env: dict) -> int:
    """Start the warm server for ``env`` and return its pid."""
    subprocess.run([*PFS, "cluster", "start"], env=env, cwd="/", check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run([*PFS, "cluster", "status", "--json"], env=env, cwd="/", check=True, capture_output=True)
    return next(s["pid"] for s in json.loads(out.stdout) if s.get("this_environment"))


def timed(cmd: list[str], env: dict, server: int | None = None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of the whole process tree (and of the server's part), exit code."""
    before = server_cpu(server)
    t0 = time.monotonic()
    # cwd "/": ``python -m`` puts the working directory first on sys.path, ahead of PYTHONPATH
    proc = subprocess.Popen(cmd, env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode()
    if proc.returncode:
        sys.stderr.write(f"{' '.join(cmd)}: exit {proc.returncode}: {err[-400:]}\n")
    cpu = usage.ru_utime + usage.ru_stime
    if server is not None:
        job = served_cpu(err)
        if not job:
            sys.stderr.write(f"{' '.join(cmd)}: not run by the server\n")
        cpu += job + server_cpu(server) - before
    return wall, cpu, proc.returncode


def prepare(root: Path) -> dict[str, list[str]]:
    """The 1-file trees and what each command does with them (its target made again before every run)."""
    src = root / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "one").write_bytes(b"x" * 1000)
    return {
        "scan": [*PFS, "scan", str(src), "-o", str(root / "m"), "--overwrite"],
        "cp": [*PFS, "cp", f"{src}/", str(root / "cp")],
        "rm": [*PFS, "rm", str(root / "rmme"), "-y"],
        "sync": [*PFS, "sync", f"{src}/", str(root / "sync")],
        "verify": [*PFS, "verify", str(src), str(root / "copy")],
        "query": [*PFS, "query", str(root / "qm"), "--select", "count(*)"],  # a 1-row manifest's bounded query
    }


def reset(root: Path, action: str) -> None:
    for name in ("cp", "sync", "rmme"):
        shutil.rmtree(root / name, ignore_errors=True)
    if action == "rm":
        (root / "rmme").mkdir()
        (root / "rmme" / "one").write_bytes(b"x")
    if not (root / "copy").exists():
        shutil.copytree(root / "src", root / "copy")
    if action == "query" and not (root / "qm").exists():
        env = {**os.environ, "PFS_SERVER": "off"}
        subprocess.run(
            [*PFS, "scan", str(root / "src"), "-o", str(root / "qm")], env=env, check=True, capture_output=True
        )


def compiled(checkouts: list[Path]) -> None:
    """Byte-compile each checkout's ``dask_pfs`` and ``operators`` first: with ``PYTHONDONTWRITEBYTECODE``
    set (or a fresh ``git archive``) a tree without ``__pycache__`` compiles every module in every run,
    ~0.1 s of CPU that is not start-up and would weigh on one side of an A/B only."""
    for root in checkouts:
        for package in ("dask_pfs", "operators"):
            if not compileall.compile_dir(str(root / package), quiet=1):
                sys.exit(f"{root / package}: does not compile")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--actions", default="scan,cp,rm,sync,verify,query")
    ap.add_argument("--modes", default="server,alone,cluster")
    ap.add_argument("--json", type=Path, help="append raw rows here")
    ap.add_argument("--base", type=Path, help="another checkout, run as mode 'base' (PYTHONPATH)")
    args = ap.parse_args()
    compiled([Path(__file__).resolve().parent.parent, *([args.base] if args.base else [])])
    cmds = prepare(args.dir)
    base = {k: v for k, v in os.environ.items() if k != "PFS_THREADS"}
    base.update({"PFS_DASHBOARD": "0", "XDG_CACHE_HOME": str(args.dir / "cache")})
    modes = {
        "server": measured_env({}),  # the served child's CPU is reported on stderr (common.served_cpu)
        "alone": {"PFS_SERVER": "off"},
        "cluster": {"PFS_SERVER": "off", "PFS_ALONE_SECONDS": "0"},
    }
    if args.base:
        modes["base"] = {"PFS_SERVER": "off", "PYTHONPATH": str(args.base.resolve())}
    server = start_server(base | modes["server"]) if "server" in args.modes.split(",") else None
    rows: list[dict] = []
    for run in range(args.runs):
        for action in args.actions.split(","):
            for mode in args.modes.split(","):
                reset(args.dir, action)
                wall, cpu, rc = timed(
                    [*cmds[action], *([] if action == "query" else ["--no-progress"])],
                    base | modes[mode],
                    server if mode == "server" else None,
                )
                rows.append({"run": run, "action": action, "mode": mode, "wall": wall, "cpu": cpu, "rc": rc})
    if args.json:
        with args.json.open("a") as f:
            for r in rows:
                f.write(json.dumps({"dir": str(args.dir), **r}) + "\n")
    print(f"| action | {' | '.join(f'{m}: wall s (CPU s)' for m in args.modes.split(','))} |")
    print("|---|" + "---|" * len(args.modes.split(",")))
    for action in args.actions.split(","):
        cells = []
        for mode in args.modes.split(","):
            mine = [r for r in rows if r["action"] == action and r["mode"] == mode]
            w, c = (statistics.median(r[k] for r in mine) for k in ("wall", "cpu"))
            lo, hi = min(r["wall"] for r in mine), max(r["wall"] for r in mine)
            cells.append(f"{w:.2f} ({c:.2f}) [{lo:.2f}-{hi:.2f}]")
        print(f"| {action} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
