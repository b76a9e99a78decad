#!/usr/bin/env python3
"""Per-file CPU of rm and cp of a tree of small local files: pfs (this checkout, and optionally
another source tree such as main's) beside ``rm -rf``, ``cp -r`` and pfutils (issue 18).

Two levels, warm caches, on tmpfs by default (`--base`: the disk of this VM made system time swing
20x between runs, so tmpfs shows what pfs itself costs):

- ``core``: the engine-free task functions in one process (``remove_tree_chunk`` over the whole
  tree; ``copy_files`` over every file), CPU (user + system, all threads) and wall time of that
  call only, from inside the process: what a worker spends per file.
- ``cmd``: the whole command (``pfs rm TREE -y``, ``pfs cp SRC DST``; embedded cluster, scan and
  workers included), CPU of the whole process tree; per file is (N files - 1 file) / (N - 1), so
  start-up is left out as the issue measures it.  ``rm -rf`` and ``cp -r`` are CPU / N.

    benchmarks/bench_core_rmcp.py --files 20000 --other main=/tmp/main-src --out benchmarks/RESULTS.md

``--other NAME=DIR`` runs the same Python commands with ``PYTHONPATH=DIR`` (a ``git archive`` of
another commit), so before/after come from one run on one host.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = str(REPO / ".venv/bin/python")

CORE_RM = """
import os, resource, sys, time
from operators.remove.tasks import RemoveSpec, remove_tree_chunk
from operators.scan.walk import Budget
root = sys.argv[1]
spec = RemoveSpec(protocol="file", root=root)
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
res = remove_tree_chunk(spec, [(b"", None)], Budget(max_entries=10**9, max_seconds=3600))
r1 = resource.getrusage(resource.RUSAGE_SELF)
assert res.counts.failed == 0 and not res.frontier, res.counts
print(r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, res.counts.removed_files, time.monotonic() - t0)
"""

CORE_CP = """
import os, resource, sys, time
from operators.copy.tasks import CopySpec, Entry, copy_files
src, dst = sys.argv[1], sys.argv[2]
entries = []
for d, dirs, files in os.walk(src):
    rel = os.path.relpath(d, src)
    os.makedirs(os.path.join(dst, rel), exist_ok=True)
    for f in files:
        s = os.lstat(os.path.join(d, f))
        r = os.fsencode(f if rel == "." else os.path.join(rel, f))
        entries.append(Entry(r, "file", s.st_size, s.st_mtime_ns, s.st_atime_ns, s.st_mode))
spec = CopySpec("file", src, "file", dst, token="bench", check_existing=False)
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
done = 0
for i in range(0, len(entries), 500):  # the driver's chunks
    out = copy_files(spec, entries[i : i + 500])
    assert not out.failures, out.failures[:3]
    done += out.files
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, done, time.monotonic() - t0)
"""


def make_tree(root: Path, files: int, seed: int = 18) -> None:
    """``files`` small files (1 B - 4 KiB) in 10 x 10 directories."""
    rng = random.Random(seed)
    per = max(1, files // 100)
    made = 0
    for a in range(10):
        for b in range(10):
            d = root / f"d{a}" / f"e{b}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(per if made + per <= files else files - made):
                (d / f"f{i:05d}.dat").write_bytes(rng.randbytes(rng.randint(1, 4096)))
                made += 1
    while made < files:
        (root / f"extra{made}").write_bytes(b"x")
        made += 1


def children() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime, r.ru_stime


def run(cmd: list[str], env: dict | None = None) -> tuple[float, tuple[float, float], str]:
    """Wall seconds, (user, system) CPU seconds of the whole process tree, stdout."""
    (u0, s0), t0 = children(), time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    (u1, s1), seconds = children(), time.monotonic() - t0
    cpu = (u1 - u0, s1 - s0)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr[-800:]}")
    return seconds, cpu, proc.stdout


def env_for(src: str | None) -> dict:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    return env


def measure(args, work: Path, template: Path, one: Path) -> list[dict]:
    rows = []
    n = args.files
    codes = [("this", None)] + [tuple(o.split("=", 1)) for o in args.other]

    def fresh(name: str, src: Path) -> Path:
        path = work / name
        if path.exists():
            shutil.rmtree(path)
        subprocess.run(["cp", "-a", str(src), str(path)], check=True)
        return path

    def row(op: str, tool: str, level: str, seconds: float, cpu: tuple[float, float], files: int, less=(0.0, 0.0)):
        """``cpu`` (user, system) over ``files``, less ``less`` (a one-file run of the same command)."""
        user, system = (cpu[0] - less[0]) / files * 1e6, (cpu[1] - less[1]) / files * 1e6
        r = {"op": op, "tool": tool, "level": level, "seconds": round(seconds, 2), "cpu_s": round(sum(cpu), 2)}
        r |= {"user_us": round(user, 1), "sys_us": round(system, 1), "cpu_us_per_file": round(user + system, 1)}
        print(json.dumps(r), flush=True)
        rows.append(r)

    for _ in range(args.repeat):
        for name, src in codes:
            env = env_for(src)
            # core level: the call's own CPU, from inside the process
            tree = fresh("rm", template)
            _, _, out = run([PY, "-c", CORE_RM, str(tree)], env)
            user, system, count, secs = out.split()
            row("rm", f"pfs ({name})", "core", float(secs), (float(user), float(system)), int(count))
            dst = work / "cp-dst"
            shutil.rmtree(dst, ignore_errors=True)
            _, _, out = run([PY, "-c", CORE_CP, str(template), str(dst)], env)
            user, system, count, secs = out.split()
            row("cp", f"pfs ({name})", "core", float(secs), (float(user), float(system)), int(count))
            if args.core_only:
                continue
            # whole command, less a one-file run of the same command
            base = {}
            for label, tree_src in (("one", one), ("all", template)):
                tree = fresh("rm", tree_src)
                base[label] = run([PY, "-m", "dask_pfs", "rm", str(tree), "-y", "--no-progress", "--json"], env)
            (_, c1, _), (sn, cn, _) = base["one"], base["all"]
            row("rm", f"pfs ({name})", "cmd", sn, cn, n - 1, c1)
            for label, tree_src in (("one", one), ("all", template)):
                shutil.rmtree(dst, ignore_errors=True)
                cmd = [PY, "-m", "dask_pfs", "cp", f"{tree_src}/", str(dst), "--no-progress", "--json"]
                base[label] = run(cmd, env)
            (_, c1, _), (sn, cn, _) = base["one"], base["all"]
            row("cp", f"pfs ({name})", "cmd", sn, cn, n - 1, c1)
        if args.core_only:
            continue
        tree = fresh("rm", template)
        secs, cpu, _ = run(["rm", "-rf", str(tree)])
        row("rm", "rm -rf", "cmd", secs, cpu, n)
        shutil.rmtree(dst, ignore_errors=True)
        secs, cpu, _ = run(["cp", "-r", "--preserve=mode,timestamps", f"{template}/.", str(dst)])
        row("cp", "cp -r", "cmd", secs, cpu, n)
        if args.pfutils:
            tree = fresh("rm", template)
            secs, cpu, _ = run([args.pfutils, "rm", "-r", "-y", "-j", "16", str(tree)])
            row("rm", "pfutils -j16", "cmd", secs, cpu, n)
            shutil.rmtree(dst, ignore_errors=True)
            secs, cpu, _ = run([args.pfutils, "cp", "-r", "-j", "16", f"{template}/", str(dst)])
            row("cp", "pfutils -j16", "cmd", secs, cpu, n)
        shutil.rmtree(dst, ignore_errors=True)
    return rows


def table(rows: list[dict], files: int, where: str) -> str:
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["op"], r["tool"], r["level"])
        if key not in best or r["cpu_us_per_file"] < best[key]["cpu_us_per_file"]:
            best[key] = r
    lines = [
        f"{files:,} small files (1 B - 4 KiB) in 100 directories on `{where}`, PFS_THREADS="
        f"{os.environ.get('PFS_THREADS', 'auto')}, warm caches, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f} (best of runs)",
        "",
        "| op | tool | level | seconds | CPU s | user µs / file | sys µs / file | CPU µs / file |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in sorted(best.values(), key=lambda r: (r["op"], r["level"], r["tool"])):
        lines.append(
            f"| {r['op']} | {r['tool']} | {r['level']} | {r['seconds']} | {r['cpu_s']} | {r['user_us']:,} "
            f"| {r['sys_us']:,} | {r['cpu_us_per_file']:,} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=20000)
    p.add_argument("--base", default="/dev/shm", help="where the work directory is made (tmpfs: no disk in the way)")
    p.add_argument("--src-base", help="where the source tree is made (default: --base); e.g. tmpfs, to copy to a NAS")
    p.add_argument("--core-only", action="store_true", help="only the core level (PFS_THREADS fixes its fan-out)")
    p.add_argument("--other", action="append", default=[], help="NAME=DIR: also run the Python source in DIR")
    p.add_argument("--pfutils", help="a pfutils executable to run beside")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out", help="append the markdown table to this file")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pfs-bench-rmcp-", dir=args.base))
    src = Path(tempfile.mkdtemp(prefix="pfs-bench-rmcp-src-", dir=args.src_base or args.base))
    try:
        template, one = src / "template", src / "one"
        make_tree(template, args.files)
        make_tree(one, 1)
        rows = measure(args, work, template, one)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(src, ignore_errors=True)
    text = table(rows, args.files, args.base)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
