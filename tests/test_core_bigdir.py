"""A huge directory through the compiled core in bounded memory (issue 18's "1,000,000 entries" edge).

Two levels: the walk must not list a big directory ahead of its part writes (fast, in process), and
the whole ``pfs scan`` of a real 1,000,000-entry directory must peak at an RSS set by the flush and step
sizes, not by the directory (a subprocess on a tmpfs of its own, measured with ``wait4``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from operators import local_scan
from operators.local_scan import LocalLister
from operators.pool import get_pool
from operators.rows import RowBuffer
from operators.walk import Budget, walk


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
