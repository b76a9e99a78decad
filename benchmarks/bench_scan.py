#!/usr/bin/env python3
"""Benchmark ``pfs scan`` beside ``find -printf '%s\\n'``, ``du -s`` and a plain 64-thread scandir walk.

    benchmarks/bench_scan.py /mnt/nas/bal20k /mnt/nas/flat50k [--repeat 3] [--out FILE]
    benchmarks/bench_scan.py --rss /srv/bench-local/rss   # client peak RSS, 100k vs 1M entries
    benchmarks/bench_scan.py --vs-find TREE --rounds 5 [--base DIR] [--out FILE]   # warm, interleaved

``--vs-find`` (issue 30): a warm local tree, in rounds whose order rotates: ``find -printf '%s\\n'``, the
``pfs scan`` command as a user runs it (through the per-user warm server, ``dask_pfs.warm``), the same
command in its own process (``PFS_SERVER=off``), and ``dask_pfs.scan()`` in a warm interpreter (a process
that imported pfs and scanned once, then scans on request); wall and CPU of the whole process tree each
(``os.wait4``, plus the warm servers' CPU meanwhile, their children's included; the warm process's own
``getrusage``, all its threads).  ``--base DIR``
adds the same two pfs modes from another checkout (``DIR`` first on ``PYTHONPATH``: ``git archive`` of
the commit before, with its built ``operators/_native.abi3.so``).  Raw rows: ``--raw FILE`` (JSON lines).

Every run starts cold (``nas.sh remount`` for /mnt/nas paths, else drop_caches) unless ``--warm``.
``pfs scan`` is timed as a whole command: Python start-up, the embedded LocalCluster, the walk and the
manifest write.  Prints a markdown table per tree with ratios against ``find``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import NAS, PFS, REPO, Run, loadavg, measured_env, served_cpu, table, timed

PWALK = [sys.executable, str(NAS / "pwalk.py"), "-j", "64", "--stat"]


def count_files(path: str) -> int:
    out = subprocess.run(["find", path, "-type", "f", "-printf", "."], capture_output=True, check=True).stdout
    return len(out)


def bench_tree(path: str, repeat: int, warm: bool, extra: list[str]) -> tuple[str, list[Run]]:
    out = Path(tempfile.mkdtemp(prefix="pfs-bench-scan-"))
    cache = None if warm else path
    tools = {
        "find": (["find", path, "-printf", "%s\\n"], False),
        "du -s": (["du", "-s", path], False),
        "pwalk -j64 --stat": (PWALK + [path], False),
        "pfs scan": (PFS + ["scan", path, "-o", str(out / "m"), "--overwrite", "--no-progress", *extra], False),
    }
    if not (NAS / "pwalk.py").exists():
        tools.pop("pwalk -j64 --stat")
    runs: dict[str, list[Run]] = {t: [] for t in tools}
    for i in range(repeat):
        for tool, (cmd, shell) in tools.items():
            r = timed(tool, cmd, cache, shell)
            runs[tool].append(r)
            print(f"  run {i + 1} {tool}: {r.seconds:.2f} s (busy {r.busy:.0f}%, {r.caches})", file=sys.stderr)
    shutil.rmtree(out, ignore_errors=True)
    med = []
    for rs in runs.values():
        best = sorted(rs, key=lambda r: r.seconds)[len(rs) // 2]
        best.seconds = statistics.median(r.seconds for r in rs)
        med.append(best)
    return path, med


def make_empty_tree(root: str, files: int, fanout: int = 10, depth: int = 3) -> None:
    """``files`` empty files dealt over a balanced tree: the client's memory depends on entry counts, not
    bytes, and a million empty files take minutes to make instead of the 37 GB of the sample tree."""
    import itertools
    import os

    dirs = [os.path.join(root, *(f"d{i:02d}" for i in path)) for path in itertools.product(range(fanout), repeat=depth)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    for i in range(files):
        os.close(os.open(os.path.join(dirs[i % len(dirs)], f"f{i:07d}"), os.O_CREAT | os.O_WRONLY, 0o644))


def bench_rss(base: str) -> str:
    """Client peak RSS for 100k vs 1M local entries, against an external cluster (so only the client is measured)."""
    rows = []
    sched = subprocess.Popen(
        [
            str(REPO / ".venv/bin/dask"),
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--scheduler-file",
            f"{base}/sched.json",
            "--no-dashboard",
        ],
        stderr=subprocess.DEVNULL,
    )
    import time

    while not Path(f"{base}/sched.json").exists():
        time.sleep(0.2)
    worker = subprocess.Popen(
        [
            str(REPO / ".venv/bin/dask"),
            "worker",
            "--scheduler-file",
            f"{base}/sched.json",
            "--nworkers",
            "2",
            "--nthreads",
            "4",
            "--no-dashboard",
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        for n in (100_000, 1_000_000):
            tree = f"{base}/tree{n}"
            if not Path(tree, ".done").exists():
                print(f"  making {n:,} files in {tree}", file=sys.stderr)
                make_empty_tree(tree, files=n)
                Path(tree, ".done").write_text("")
            r = timed(
                f"pfs scan {n:,}",
                PFS
                + [
                    "scan",
                    tree,
                    "-o",
                    f"{base}/m{n}",
                    "--overwrite",
                    "--no-progress",
                    "--scheduler-file",
                    f"{base}/sched.json",
                ],
                None,
            )
            rows.append((n, r))
    finally:
        worker.terminate()
        sched.terminate()
    ratio = rows[1][1].max_rss_kb / rows[0][1].max_rss_kb
    lines = ["| entries | seconds | client peak RSS (MiB) |", "| ---: | ---: | ---: |"]
    lines += [f"| {n:,} | {r.seconds:.1f} | {r.max_rss_kb / 1024:.0f} |" for n, r in rows]
    return "\n".join(lines) + f"\n\nRSS ratio 1M / 100k: **{ratio:.2f}** (target <= 1.5)\n"


WARM_SERVER = """
import json, resource, sys, time
import dask_pfs
tree, out = sys.argv[1], sys.argv[2]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
dask_pfs.scan(tree, out, overwrite=True)  # the warm-up: imports, first allocations
print("{}", flush=True)
for _ in sys.stdin:
    c, t = cpu(), time.perf_counter()
    res = dask_pfs.scan(tree, out, overwrite=True)
    print(json.dumps({"wall": time.perf_counter() - t, "cpu": cpu() - c, "entries": res.counts["entries"]}), flush=True)
"""


def wait_timed(cmd: list[str], env: dict) -> dict:
    """Wall and CPU seconds (user + system of the command and every process it waited for, and of the served
    child that ran it when a pfs warm server did: ``common.served_cpu``)."""
    t0 = time.monotonic()
    # cwd "/": the console script's directory, not the working directory, comes first on sys.path
    proc = subprocess.Popen(cmd, env=measured_env(env), cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    stderr = proc.stderr.read()  # type: ignore[union-attr]
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)}: exit {os.waitstatus_to_exitcode(status)}: {stderr[-400:]!r}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime + served_cpu(stderr)}


class WarmScan:
    """A warm interpreter that scans ``tree`` into ``out`` each time it is asked (``WARM_SERVER``)."""

    def __init__(self, tree: str, out: str, env: dict) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WARM_SERVER, tree, out], env=env, cwd="/", stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdin and self.proc.stdout
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.stdout.readline()  # warmed up

    def __call__(self) -> dict:
        self.stdin.write("scan\n")
        self.stdin.flush()
        return json.loads(self.stdout.readline())

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait()


def vs_find(tree: str, rounds: int, base: Path | None, raw: str | None) -> str:
    """Warm local scan against ``find``, interleaved (module docstring); a markdown table of every round."""
    work = Path(tempfile.mkdtemp(prefix="pfs-bench-vsfind-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PFS_THREADS", "PYTHONPATH")} | {"PFS_DASHBOARD": "0"}
    checkouts = {"": env} | ({" (base)": env | {"PYTHONPATH": str(base.resolve())}} if base else {})
    modes: dict[str, Callable[[], dict]] = {"find": lambda: wait_timed(["find", tree, "-printf", "%s\\n"], env)}
    servers = []
    for tag, e in checkouts.items():
        out = work / f"m{len(servers)}"
        cmd = [*PFS, "scan", tree, "-o", str(out), "--overwrite", "--no-progress"]
        subprocess.run([*PFS, "cluster", "start"], env=e, cwd="/", check=True, stdout=subprocess.DEVNULL)
        modes[f"pfs scan{tag}"] = lambda cmd=cmd, e=e: wait_timed(cmd, e)  # through the warm server
        own = e | {"PFS_SERVER": "off"}
        modes[f"pfs scan, own process{tag}"] = lambda cmd=cmd, e=own: wait_timed(cmd, e)
        servers.append(WarmScan(tree, str(work / f"w{len(servers)}"), e))
        modes[f"warm API{tag}"] = servers[-1]
    modes["find"]()  # the tree in the kernel's caches
    names, rows = list(modes), []
    try:
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            row = {"round": r, "load": round(loadavg(), 1)} | {name: modes[name]() for name in order}
            rows.append(row)
            print(f"  round {r}: " + ", ".join(f"{n} {row[n]['wall']:.2f} s ({row[n]['cpu']:.2f})" for n in names),
                  file=sys.stderr)  # fmt: skip
    finally:
        for s in servers:
            s.close()
        shutil.rmtree(work, ignore_errors=True)
    if raw:
        with open(raw, "a") as f:
            for row in rows:
                f.write(json.dumps({"tree": tree} | row) + "\n")
    pfs = [n for n in names if n != "find"]
    lines = [
        "| round (load) | " + " | ".join(f"{n}: wall s (CPU s)" for n in names) + " | "
        + " | ".join(f"find / {n}" for n in pfs) + " |",
        "| --- |" + " ---: |" * (len(names) + len(pfs)),
    ]  # fmt: skip
    for row in rows:
        cells = [f"{row[n]['wall']:.2f} ({row[n]['cpu']:.2f})" for n in names]
        ratios = [f"{row['find']['wall'] / row[n]['wall']:.2f}x" for n in pfs]
        lines.append(f"| {row['round']} ({row['load']}) | " + " | ".join(cells + ratios) + " |")
    med = {n: [statistics.median(r[n][k] for r in rows) for k in ("wall", "cpu")] for n in names}
    ratios = [f"{statistics.median(r['find']['wall'] / r[n]['wall'] for r in rows):.2f}x" for n in pfs]
    lines.append("| median | " + " | ".join([f"{w:.2f} ({c:.2f})" for w, c in med.values()] + ratios) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="*")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--warm", action="store_true", help="do not drop caches (local warm-cache figure)")
    ap.add_argument("--rss", metavar="DIR", help="measure client RSS for 100k vs 1M entries under DIR")
    ap.add_argument("--out", help="append the tables to this markdown file")
    ap.add_argument("--pfs-args", default="", help="extra arguments for pfs scan, e.g. '--workers 2'")
    ap.add_argument("--vs-find", metavar="TREE", help="warm scan of TREE against find, interleaved rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base", type=Path, help="--vs-find: another checkout's pfs too (PYTHONPATH)")
    ap.add_argument("--raw", help="--vs-find: append each round as a JSON line to this file")
    args = ap.parse_args()
    text = []
    if args.vs_find:
        n = count_files(args.vs_find)
        text.append(f"### `{args.vs_find}` ({n:,} files, warm, {args.rounds} interleaved rounds)\n\n"
                    + vs_find(args.vs_find, args.rounds, args.base, args.raw))  # fmt: skip
    for path in args.trees:
        n = count_files(path)
        la = loadavg()
        _, runs = bench_tree(path, args.repeat, args.warm, args.pfs_args.split())
        text.append(
            f"### `{path}` ({n:,} files, {'warm' if args.warm else 'cold'}, median of {args.repeat}, "
            f"load before {la:.1f})\n\n" + table(runs, "find", n) + "\n"
        )
    if args.rss:
        Path(args.rss).mkdir(parents=True, exist_ok=True)
        text.append("### Client peak RSS\n\n" + bench_rss(args.rss))
    report = "\n".join(text)
    print(report)
    if args.out:
        with open(args.out, "a") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
