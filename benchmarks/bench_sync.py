#!/usr/bin/env python3
"""pfs sync vs rsync -a --delete vs fpsync on a tree with 1% of its files changed.

    benchmarks/bench_sync.py --base /mnt/nas/mine-sync --files 20000 [--changed 0.01] [--workers 2] [--rtt-us 1000]

Makes ``BASE/src`` with /work/shared/nas/mktree.py (seeded; skipped when it is there), one
destination per tool copied from it (``BASE/dst-<tool>``; on /mnt/nas both at ``nas.sh delay 0``),
then changes ``--changed`` of the source files (rewritten with new contents, new mtime), deletes as
many and adds as many.  Each tool then brings its own destination in line, cold: caches dropped before each run
(``nas.sh remount`` for /mnt/nas paths, ``drop_caches`` elsewhere when allowed).  Every
destination is checked against the source afterwards (rsync -n --checksum finds nothing).
Prints a markdown table: tool, seconds, files in the tree, files/s.

Tool ``pfs-nightly`` is the scheduled-sync use: the destination's manifest from the previous run
(made during the setup) is passed with ``--dst-manifest ... --update-dst-manifest``, so a run
scans only the source.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from report_nas import set_delay

REPO = Path(__file__).resolve().parent.parent
NAS = Path("/work/shared/nas")
PFS = [str(REPO / ".venv/bin/pfs")]


def sh(cmd: list[str], **kw) -> float:
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.monotonic() - t0


def drop_caches(path: Path) -> str:
    if str(path).startswith("/mnt/nas"):
        r = subprocess.run([str(NAS / "nas.sh"), "remount"], capture_output=True, text=True)
        if r.returncode == 0:
            return "remount"
        print(f"nas.sh remount failed (mount busy?): {r.stderr.strip()[-200:]}", file=sys.stderr)
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "drop_caches"
    except OSError:
        return "warm (drop_caches not allowed)"


def change(src: Path, fraction: float, seed: int = 7) -> int:
    files = sorted(p for p in src.rglob("*") if p.is_file())
    rng = random.Random(seed)
    n = max(1, int(len(files) * fraction))
    picked = rng.sample(files, 3 * n)
    for p in picked[:n]:  # changed
        p.write_bytes(os.urandom(max(1, p.stat().st_size)))
    for p in picked[n : 2 * n]:  # deleted at the source
        p.unlink()
    for i, p in enumerate(picked[2 * n :]):  # added next to others
        (p.parent / f"added-{i}.dat").write_bytes(os.urandom(4096))
    return n


def pfs_command(tool: str, src: Path, dst: Path, args) -> list[str]:
    """``pfs``: scan both sides.  ``pfs-nightly``: keep DST's manifest between runs (one scan, of SRC)."""
    cmd = PFS + ["sync", str(src), str(dst), "--delete", "-y", "--workers", str(args.workers)]
    if tool == "pfs-nightly":
        manifest, plan = args.base / "nightly.dst.manifest", args.base / "nightly.plan"
        return cmd + ["--dst-manifest", str(manifest), "--update-dst-manifest", "--plan", str(plan)]
    return cmd + ["--plan", str(args.base / "pfs.plan")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, type=Path)
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--changed", type=float, default=0.01)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tools", default="pfs,pfs-nightly,rsync,fpsync")
    ap.add_argument(
        "--rtt-us",
        type=int,
        default=1000,
        help="on /mnt/nas: the setup (tree, copies) runs at nas.sh delay 0, the timed runs at this",
    )
    ap.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compare each destination with the source afterwards (rsync -n --checksum: minutes on the NAS)",
    )
    args = ap.parse_args()
    on_nas = str(args.base).startswith("/mnt/nas")
    if on_nas:  # making 3 copies of a 20k tree at 1 ms costs ~8 minutes and measures nothing
        set_delay(0)
    src = args.base / "src"
    if not (args.base / ".src.done").exists():
        shutil.rmtree(src, ignore_errors=True)
        sh([sys.executable, str(NAS / "mktree.py"), str(src), "--files", str(args.files), "-j", "32"])
        (args.base / ".src.done").write_text("ok")
    tools = args.tools.split(",")
    env = {**os.environ, "XDG_CACHE_HOME": str(args.base / "cache")}
    for tool in tools:
        dst = args.base / f"dst-{tool}"
        shutil.rmtree(dst, ignore_errors=True)
        sh(["cp", "-a", str(src), str(dst)])
        if tool == "pfs-nightly":  # last night's run: it left the destination's manifest behind
            shutil.rmtree(args.base / "nightly.dst.manifest", ignore_errors=True)
            sh(pfs_command(tool, src, dst, args), env=env)
    n = change(src, args.changed)
    if on_nas:
        set_delay(args.rtt_us)
    rows = []
    for tool in tools:
        dst = args.base / f"dst-{tool}"
        cache = drop_caches(args.base)
        if tool.startswith("pfs"):
            cmd = pfs_command(tool, src, dst, args)
        elif tool == "rsync":
            cmd = ["rsync", "-a", "--delete", f"{src}/", f"{dst}/"]
        else:
            cmd = ["fpsync", "-n", "8", "-E", f"{src}/", f"{dst}/"]  # -E: per-directory rsync with --delete
        seconds = sh(cmd, env=env)
        if not args.check:
            rows.append((tool, seconds, "not checked", cache))
            continue
        diff = subprocess.run(
            ["rsync", "-a", "-n", "--checksum", "--delete", "--itemize-changes", f"{src}/", f"{dst}/"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        ok = "ok" if not diff else f"DIFFERS ({len(diff.splitlines())} lines)"
        rows.append((tool, seconds, ok, cache))
    print(f"\n{args.files:,} files, {n} changed + {n} deleted + {n} added, base {args.base}\n")
    print("| tool | seconds | files/s (tree) | check | caches |")
    print("|---|---|---|---|---|")
    for tool, seconds, ok, cache in rows:
        print(f"| {tool} | {seconds:.1f} | {args.files / seconds:,.0f} | {ok} | {cache} |")


if __name__ == "__main__":
    main()
