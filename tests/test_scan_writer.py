"""A scan task's parts are written on a thread of their own while its walk goes on
(``operators.scan.writer``): in order, one at a time, and a failed write still fails the task."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from operators.rows import RowBuffer, error_row
from operators.scan.task import ScanSpec, scan_chunk
from operators.scan.walk import Budget
from operators.scan.writer import PartWriter
from tests.conftest import make_balanced


def buffer_of(n: int, tag: str) -> RowBuffer:
    buf = RowBuffer()
    buf.extend(error_row(f"{tag}{i}", "file", "x") for i in range(n))
    return buf


def test_parts_are_written_in_order_on_another_thread_one_at_a_time():
    seen: list[tuple[str, int, str]] = []
    busy = threading.Lock()

    def write(buf: RowBuffer) -> None:
        assert busy.acquire(blocking=False), "two parts written at once"
        try:
            time.sleep(0.05)  # a slow part: the next submit must wait for it
            seen.append((threading.current_thread().name, len(buf), buf.rows[0][0]))
        finally:
            busy.release()

    writer = PartWriter(write)
    bufs = [buffer_of(n, tag) for n, tag in ((3, "a"), (0, "b"), (5, "c"), (2, "d"))]
    before = 0  # parts submitted before this one: all written by the time it is taken (two held at most)
    for buf in bufs:
        n = len(buf)
        writer.submit(buf)
        assert len(seen) >= before
        before += n > 0
        assert len(buf) == 0  # its rows were taken at once: the walk fills it again
    writer.close()
    assert [(n, first) for _, n, first in seen] == [(3, "a0"), (5, "c0"), (2, "d0")]  # an empty flush writes nothing
    assert {name for name, _, _ in seen} != {threading.current_thread().name}


def test_a_failed_write_surfaces_at_the_next_part_or_at_close_and_abandon_drops_it():
    def write(buf: RowBuffer) -> None:
        raise OSError(28, "No space left on device")

    writer = PartWriter(write)
    writer.submit(buffer_of(1, "a"))
    with pytest.raises(OSError, match="No space"):
        writer.submit(buffer_of(1, "b"))
    writer.close()  # the error was raised once; nothing more pending

    writer = PartWriter(write)
    writer.submit(buffer_of(1, "a"))
    with pytest.raises(OSError, match="No space"):
        writer.close()

    writer = PartWriter(write)
    writer.submit(buffer_of(1, "a"))
    writer.abandon()  # a task already failing keeps its own error


def test_a_task_whose_parts_cannot_be_written_fails(tmp_path: Path):
    """Real tree, real Parquet writes: the output is a file, so no part can be made in it."""
    make_balanced(tmp_path / "src", dirs=4, files_per_dir=30)
    out = tmp_path / "out"
    out.write_text("not a directory")
    spec = ScanSpec("file", str(tmp_path / "src"), str(out), flush_rows=25)
    with pytest.raises(OSError):
        scan_chunk(spec, [(b"", None)], "0000000", Budget(10**6, 60))


def test_small_flushes_make_sorted_parts_holding_every_row_once(tmp_path: Path):
    make_balanced(tmp_path / "src", dirs=20, files_per_dir=50)
    out = tmp_path / "out"
    out.mkdir()
    # two listings in flight, fixed: the auto-tuned limit is the process's, and earlier tests in it may have
    # raised it so far that one task starts all 20 directories before its budget is spent (one task, 2 parts)
    spec = ScanSpec("file", str(tmp_path / "src"), str(out), flush_rows=40, threads=2)
    # budgets of 400 entries: the core's steps descend 25 entries (scan_chunk), so flushes come often;
    # the frontier each task leaves goes to the next, as the driver's walk hands it on
    items, parts, entries = [(b"", None)], [], 0
    while items:
        res = scan_chunk(spec, items, f"{len(parts):07d}", Budget(400, 60))
        items, entries = res.frontier, entries + res.tally.entries
        parts += res.parts
    assert len(parts) > 2
    paths: list[str] = []
    for part in parts:
        got = pq.read_table(out / part).column("path").to_pylist()
        assert got == sorted(got)
        paths += got
    assert len(paths) == len(set(paths)) == entries == 20 * 52


def test_a_big_flush_is_written_as_consecutive_sorted_parts_at_once(tmp_path: Path, monkeypatch):
    """``operators.parts.write_parts``: one slice per core (up to 4) once a flush has ``SPLIT_ROWS`` rows
    per slice; each part holds a consecutive run of the sorted rows, so each stays sorted."""
    from operators import parts as parts_mod
    from operators.parts import part_name, write_parts
    from operators.rows import rows_to_table

    monkeypatch.setattr(parts_mod, "SPLIT_ROWS", 10)
    table = rows_to_table([error_row(f"p{i:03}", "file", "x") for i in range(95)])
    names = write_parts(table, str(tmp_path), lambda i: part_name("0000000", i))
    assert names == [part_name("0000000", i) for i in range(min(len(os.sched_getaffinity(0)), 4))]
    back = [pq.read_table(tmp_path / n).column("path").to_pylist() for n in names]
    assert [p for part in back for p in part] == [f"p{i:03}" for i in range(95)]
    assert names == sorted(p.name for p in tmp_path.iterdir())  # no temp file left
    (tmp_path / "one").mkdir()
    small = write_parts(table.slice(0, 19), str(tmp_path / "one"), lambda i: part_name("0000001", i))
    assert small == [part_name("0000001", 0)]  # under twice SPLIT_ROWS: one part
