"""A huge directory through the compiled core in bounded memory (issue 18's "1,000,000 entries" edge).

Two levels: the walk must not list a big directory ahead of its part writes (fast, in process), and
the whole ``pfs scan`` of a real 1,000,000-entry directory must peak at an RSS set by the flush and step
sizes, not by the directory (a subprocess on a tmpfs of its own, measured with ``wait4``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from operators.core.pool import get_pool
from operators.rows import RowBuffer
from operators.scan import local as local_scan
from operators.scan.local import LocalLister
from operators.scan.walk import Budget, walk
from tests.conftest import REPO


def make_flat(root: Path, n: int) -> None:
    """``n`` empty files ``f0000000``... in ``root``: one ``mknod`` each, ~7 us apiece on tmpfs."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(n):
            os.mknod(f"f{i:07}", dir_fd=fd)
    finally:
        os.close(fd)


def test_a_big_directory_is_listed_no_faster_than_its_rows_are_written(tmp_path, monkeypatch):
    """The next step of a directory starts only once the walk has taken (and flushed) the last one.

    While ``emit`` writes a part (here a 0.1 s sleep: a slow output), no step may add rows to the
    sink: before this was so, each step submitted its successor itself, and a 10,000-entry
    directory in steps of 500 was listed whole behind the first slow write.
    """
    monkeypatch.setattr(local_scan, "STEP_ENTRIES", 500)
    root = tmp_path / "big"
    make_flat(root, 10_000)
    lister = LocalLister(str(root))
    lister.descend = 0
    held: list[int] = []

    def emit(buf: RowBuffer) -> None:
        time.sleep(0.1)  # a slow part write: steps that ran ahead would land in the sink meanwhile
        held.append(len(buf))
        if len(buf):
            buf.take_table()

    try:
        tally, frontier = walk(lister, [(b"", None)], get_pool(4), 4, Budget(10**9, 1e9, 1e9), emit, 2_000)
    finally:
        lister.close()
    assert tally.entries == 10_000 and frontier == []  # the root's own row is the scan's
    assert sum(held) == 10_000
    assert max(held) <= 2_000 + 500, held  # flush_rows plus one step, never more


# Run in a process of its own (inside a mount namespace with a tmpfs, when the test can make one):
# makes each directory, scans it with the whole `pfs scan` command, and prints the command's peak RSS
# (`wait4`: the largest of the process and its reaped children) and what its manifest holds (CHECK).
# It imports nothing big: the kernel counts in a process's peak that of the image it replaced at exec,
# here a copy of this process (`subprocess` uses vfork), so this process must stay far below pfs.
MEASURE = r"""
import json, os, subprocess, sys, time

base, mount, check, sizes = sys.argv[1], sys.argv[2] == "1", sys.argv[3], [int(n) for n in sys.argv[4:]]
if mount:  # freed with the namespace, however this process ends
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m,nr_inodes=1200k,mode=700", "pfs-test", base], check=True)
for n in sizes:
    tree, out = os.path.join(base, f"flat{n}"), os.path.join(base, f"out{n}")
    os.mkdir(tree)
    t0 = time.monotonic()
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(n):
        os.mknod(f"f{i:07}", dir_fd=fd)
    os.close(fd)
    t1 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "dask_pfs", "scan", tree, "-o", out, "--no-progress"],
                            stdout=subprocess.DEVNULL, env={**os.environ, "PFS_SERVER": "off"})  # its own memory
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    t2 = time.monotonic()
    found = json.loads(subprocess.run([sys.executable, "-c", check, out], capture_output=True, check=True).stdout)
    with open("/proc/self/status") as f:
        own = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    print(json.dumps({"n": n, "peak_kb": usage.ru_maxrss, "own_kb": own, "make_s": round(t1 - t0, 1),
                      "scan_s": round(t2 - t1, 1), **found}), flush=True)
    if not mount:  # on disk: removed here, not left to pytest's retention of old temp dirs
        subprocess.run(["rm", "-rf", tree, out], check=True)
"""

# What a manifest holds: its rows, distinct paths, and whether they are exactly f0000000...f{n-1}.
CHECK = r"""
import json, os, sys
import pyarrow.compute as pc
import pyarrow.parquet as pq

out = sys.argv[1]
parts = sorted(os.path.join(out, p) for p in os.listdir(out) if p.endswith(".parquet"))
paths = pq.read_table(parts, columns=["path"]).column("path")
numbers = pc.cast(pc.utf8_slice_codeunits(paths, 1), "int64")
with open(os.path.join(out, "_manifest.json")) as f:
    marker = json.load(f)
print(json.dumps({
    "rows": len(paths), "distinct": pc.count_distinct(paths).as_py(),
    "named": int(pc.all(pc.match_like(paths, "f_______")).as_py()),
    "sum": pc.sum(numbers).as_py(), "min": pc.min(numbers).as_py(), "max": pc.max(numbers).as_py(),
    "files": marker["counts"]["files"], "workers": marker["options"]["workers"],
}))
"""


def test_a_million_entry_directory_is_scanned_in_bounded_memory(tmp_path):
    """``pfs scan`` of one directory of 1,000,000 empty files: every entry exactly once, in memory
    set by the flush and step sizes, not by the directory.

    A scan holds at most ``flush_rows`` (200,000; since issue 30 two parts of 100,000: one being written
    by ``operators.scan.writer`` while the next fills) rows plus one step of the core
    (``STEP_ENTRIES``, 65,536) before it writes a part: 0.27 of this directory.  The 10,000-entry
    scan is the command's fixed cost; the 100,000-entry one (one part: all its rows held at once)
    prices a held row, so ``whole`` is what holding the 1,000,000 rows would add, by that price.
    Measured on this 2-core host: 105-107, 145-146 and 197 MB peak, 0.42-0.45 KB a held row,
    ``whole`` 410-440 MB, and the big scan 88-90 MB over the small one (0.2 of ``whole``).  The same
    scan with its rows never flushed (``flush_rows`` unbounded) peaked at 373 MB, 262 over the small
    one (0.6 of ``whole``: a big table costs less a row than a small one); before the walk held back
    a big directory's next step and the core's big buffers were mapped on their own
    (``native/src/lib.rs``), the bounded scan peaked at 281-359 MB.  The bound, 0.4 of ``whole``,
    sits between the two.

    The directories are made on a tmpfs in a mount namespace of their own (1M ``mknod``: 7 s idle,
    11-17 s at load 30-40; freed with the namespace), or under ``tmp_path`` when the test cannot
    make one (not root, no ``unshare``; on disk making them takes ~30 s and removing them as long).
    """
    base = tmp_path / "big"
    base.mkdir()
    sizes = [10_000, 100_000, 1_000_000]
    mount = _private_tmpfs(base)
    cmd = [sys.executable, "-c", MEASURE, str(base), "1" if mount else "0", CHECK, *map(str, sizes)]
    if mount:
        cmd = ["unshare", "--mount", "--propagation", "private", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    small, medium, big = (json.loads(line) for line in done.stdout.splitlines())
    for got in (small, medium, big):
        n = got["n"]
        assert got["rows"] == got["distinct"] == n  # every entry, none twice (a scan has no row for its root)
        assert got["named"] and got["min"] == 0 and got["max"] == n - 1 and got["sum"] == n * (n - 1) // 2
        assert got["files"] == n
        assert got["own_kb"] < got["peak_kb"] / 3  # the measuring process's own peak is no floor under pfs's
    per_row = (medium["peak_kb"] - small["peak_kb"]) / (medium["n"] - small["n"])
    whole = per_row * big["n"]
    extra = big["peak_kb"] - small["peak_kb"]
    assert per_row > 0.1, (small, medium)  # a held row costs something, or the bound means nothing
    assert extra < 0.4 * whole, (
        f"1M entries peaked {extra / 1024:.0f} MB over 10k; holding them all: ~{whole / 1024:.0f} MB"
    )


def _private_tmpfs(at: Path) -> bool:
    """Whether this process may mount a tmpfs at ``at`` in a mount namespace of its own."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "pfs-probe", str(at)]
    return subprocess.run(probe, capture_output=True).returncode == 0
