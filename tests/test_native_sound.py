"""The compiled core's soundness at its Python boundary (issue 28): special files never block a core
thread, a panic becomes a Python exception, times past 2262 are exact, a failing hook drops no
listed entry, and corrupt offsets never reach a table.  The core's own tests are in Rust
(``native/core/tests``, ``cargo test`` in ``make test``); these check what Python sees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from operators import _native
from operators.rows import sink_table
from tests.conftest import REPO

Y2300_NS = 10_413_792_000 * 10**9 + 123_456_789  # 2300-01-01: past int64 nanoseconds


def run_child(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter: a core call that blocks fails the test instead of hanging it."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )


def _scanned(root, entries: int = 100) -> _native.Sink:
    """The core's sink after one scan step of ``root`` of up to ``entries`` entries (every entry fits)."""
    sink = _native.Sink()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _native.DirScan(fd, b"").step(sink, entries, 16, 1)
    finally:
        os.close(fd)
    return sink


def test_checksums_and_cp_refuse_a_fifo_at_once(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    os.mkfifo(src / "fifo")
    code = f"""
from operators import _native
sums = _native.checksum_files({bytes(src)!r}, [b"fifo"], "xxh3", 1)
assert sums[0][0] is False and "not a regular file" in sums[0][1], sums
status, errnos, refused = _native.cp_files({bytes(src)!r}, {bytes(dst)!r}, [b"fifo"], [b"fifo"], [b".t"], [None],
                                           [None], False, -1, -1, True, False, True, 2, 0o022, 1)
assert status == bytes([2]) and errnos == [22] and refused == [], (status, errnos, refused)
print("ok")
"""
    try:
        out = run_child(code, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a FIFO blocked the core")
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert os.listdir(dst) == []


def test_a_panic_in_the_core_is_a_python_exception_and_the_pool_goes_on():
    code = """
from operators import _native
try:
    _native._pool_selftest(64, 4, 10)
except BaseException as exc:
    assert type(exc).__name__ == "PanicException", type(exc)
else:
    raise SystemExit("no exception")
assert _native._pool_selftest(64, 4) == 64
print("ok")
"""
    out = run_child(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_times_after_2262_are_exact_in_the_scan_and_in_rm(tmp_path):
    f = tmp_path / "future"
    f.write_bytes(b"x")
    os.utime(f, ns=(Y2300_NS, Y2300_NS))
    sink = _scanned(tmp_path)
    table = sink_table(sink)
    assert table.column("mtime").cast(pa.int64()).to_pylist() == [Y2300_NS // 1000]
    # rm's re-check takes the manifest's time as nanoseconds past int64 too
    result = _native.rm_unlink_rels(bytes(tmp_path), [b"future"], bytes([0]), [1], [Y2300_NS], True, False, 1, 0)
    assert result[:3] == (1, 1, 0) and result[3] == [], result
    assert not f.exists()


def test_a_failing_keep_drops_no_listed_entry(tmp_path):
    for i in range(30):
        (tmp_path / f"f{i:02}").write_bytes(b"x")
    calls = []

    def keep(paths):
        calls.append(len(paths))
        raise KeyboardInterrupt  # as a Ctrl-C in the prune would

    sink = _native.Sink()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        scan = _native.DirScan(fd, b"")
        with pytest.raises(KeyboardInterrupt):
            scan.step(sink, 1000, 8, 1, None, keep)
        counts, _, _, _, done = scan.step(sink, 1000, 8, 1)
    finally:
        os.close(fd)
    assert calls and counts[0] == 30 and done
    assert sorted(sink_table(sink).column("path").to_pylist()) == [f"f{i:02}" for i in range(30)]


class _Corrupt:
    """A sink whose path offsets wrapped negative, as an unchecked `as i32` made them past 2 GiB."""

    def __init__(self, real) -> None:
        self.real = real

    def take(self, sort: bool = False):
        n, cols, parents = self.real.take(sort)
        validity, offsets, data = cols["path"]
        bad = bytearray(offsets)
        bad[4:8] = (-5).to_bytes(4, "little", signed=True)
        cols["path"] = (validity, bytes(bad), data)
        return n, cols, parents


def test_offsets_that_do_not_cover_the_data_never_make_a_table(tmp_path):
    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "b").write_bytes(b"x")
    sink = _scanned(tmp_path)
    with pytest.raises(ValueError, match="offsets"):
        sink_table(_Corrupt(sink))


def test_a_table_from_the_cores_buffers_outlives_the_sink_and_cannot_write_them(tmp_path):
    """``Sink.take`` hands Arrow the core's own memory (no copy): the table keeps it alive after the sink
    and every other reference are gone, and nothing can write through a view of it."""
    import gc

    names = [f"f{i:03}" for i in range(200)]
    for name in reversed(names):
        (tmp_path / name).write_bytes(b"x" * len(name))

    n, cols, _ = _scanned(tmp_path, 1000).take(True)
    view = memoryview(cols["path"][2])
    assert view.readonly and bytes(view[:4]) == b"f000"
    with pytest.raises(TypeError):
        view[0] = 0
    del n, cols, view
    table = sink_table(_scanned(tmp_path, 1000), sort=True)
    gc.collect()
    pa.default_memory_pool().release_unused()
    _ = [bytearray(1 << 20) for _ in range(64)]  # reuse freed memory, if any was freed too early
    assert table.column("path").to_pylist() == names  # in path order, from the core's sort
    assert table.column("size").to_pylist() == [4] * 200
    table.validate(full=True)


def test_a_full_sink_is_an_overflow_error_with_nothing_added():
    sink = _native.Sink()
    row = ("p", None, "file", 1, 0, 0, 0, 0o644, 0, 0, 1, 1, 1, None, None, None, None)
    sink.push_rows([row])
    assert len(sink) == 1
    huge = ("x" * (1 << 20), None, "file", 1, 0, 0, 0, 0o644, 0, 0, 1, 1, 1, None, None, None, None)
    # rows that could pass 2 GiB of text are refused before any is copied or appended
    with pytest.raises(OverflowError):
        sink.push_rows([huge] * 300)
    assert len(sink) == 1


def test_far_future_mtime_of_a_copied_file_is_kept(tmp_path: Path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "f").write_bytes(b"data")
    os.utime(src / "f", ns=(Y2300_NS, Y2300_NS))
    status, errnos, refused = _native.cp_files(
        bytes(src), bytes(dst), [b"f"], [b"f"], [b".t"], [4], [Y2300_NS], False, -1, -1, True, False, True, 2, 0o022, 1
    )
    assert status == bytes([0]) and not refused, errnos
    assert os.lstat(dst / "f").st_mtime_ns == Y2300_NS
