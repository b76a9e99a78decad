"""The compiled core's scan (``operators._native``, ``native/src/scan.rs``) on its own edges.

Every row the core writes must equal the row the Python reference (``operators.rows.row_from_stat``
on ``os.lstat``) makes of the same entry; the rest: names that are not UTF-8 or 255 bytes long,
symlinks never followed, error rows with DAC dropped, a step whose every entry vanished, the
prune, the ops/s cap, the fan-out over the core's threads and a descriptor limit reached.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from operators import _native
from operators.core.pool import get_pool
from operators.rows import row_from_stat, rows_to_table, sink_table
from operators.scan.local import LocalLister
from operators.scan.prune import Prune
from tests.conftest import DROP_DAC, REPO, have


def scan(root: Path, rel: bytes = b"", max_entries: int = 65_536, chunk: int = 64, width: int = 1, **kw):
    """One directory through the core: (table, counts, samples, subdirs, errno, done)."""
    sink = _native.Sink()
    fd = os.open(root / os.fsdecode(rel) if rel else root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        counts, samples, subdirs, err, done = _native.DirScan(fd, rel).step(sink, max_entries, chunk, width, **kw)
    finally:
        os.close(fd)
    return sink_table(sink), counts, samples, subdirs, err, done


def same(table: pa.Table, expected: pa.Table) -> bool:
    """Equal rows, but for a symlink's atime (the core's readlink, after its lstat, moves it)."""

    def rows(t: pa.Table) -> list[dict]:
        return [r | {"atime": None} if r["type"] == "symlink" else r for r in t.sort_by("path").to_pylist()]

    return rows(table) == rows(expected)


def reference(root: Path, rel: bytes = b"") -> pa.Table:
    """What the Python rows make of the non-directories in ``root/rel``."""
    base = os.path.join(os.fsencode(root), rel) if rel else os.fsencode(root)
    rows = []
    for name in os.listdir(base):
        full = os.path.join(base, name)
        s = os.lstat(full)
        if os.path.isdir(full) and not os.path.islink(full):
            continue
        target = os.readlink(full) if os.path.islink(full) else None
        rows.append(row_from_stat(rel + b"/" + name if rel else name, s, target))
    return rows_to_table(rows)


def test_rows_equal_the_python_reference_with_hostile_names(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    bad = os.fsencode(root) + b"/caf\xe9-\xff\xfe"
    with open(bad, "wb") as f:
        f.write(b"12345")
    long_name = "n" * 255
    (root / long_name).write_bytes(b"x")
    (root / "üñí").write_text("unicode")
    os.symlink(b"/no/such/\xff", os.fsencode(root) + b"/dangling")
    os.mkfifo(root / "fifo")
    sub = os.fsencode(root) + b"/dir-\xff"
    os.mkdir(sub)
    with open(sub + b"/inner", "wb") as f:
        f.write(b"ab")
    table, counts, samples, subdirs, err, done = scan(root)
    assert err == 0 and done and samples == []
    assert same(table, reference(root))
    assert counts == (5, 3, 1, 1, 5 + 1 + 7, 0, 0, 0)  # entries, files, symlinks, other, bytes, errors, pruned, dirs
    ((path, row),) = subdirs
    assert path == b"dir-\xff" and row[:3] == ("dir-\\xff", b"dir-\xff", "directory")
    assert row == row_from_stat(b"dir-\xff", os.lstat(sub))
    inner, *_ = scan(root, b"dir-\xff")
    assert same(inner, reference(root, b"dir-\xff"))
    assert inner.column("parent").to_pylist() == ["dir-\\xff"] and inner.column("depth").to_pylist() == [2]
    assert inner.column("path_raw").to_pylist() == [b"dir-\xff/inner"]


def test_symlinks_are_rows_never_followed(tmp_path):
    root, outside = tmp_path / "t", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("x")
    (root / "to-dir").symlink_to(outside)
    (root / "loop").symlink_to(root / "loop")
    table, counts, _, subdirs, _, _ = scan(root)
    assert subdirs == [] and counts[2] == 2
    rows = {r["path"]: r for r in table.to_pylist()}
    assert rows["to-dir"]["type"] == "symlink" and rows["to-dir"]["link_target"] == str(outside)
    assert rows["loop"]["type"] == "symlink"


@pytest.mark.skipif(not have("setpriv"), reason="setpriv not installed")
def test_stat_failures_are_error_rows(tmp_path):
    """A directory we may list but not search: every entry's fstatat fails (EACCES), as rows."""
    root = tmp_path / "t"
    (root / "locked" / "d").mkdir(parents=True)
    (root / "locked" / "f").write_text("x")
    (root / "locked").chmod(0o444)
    code = (
        "import os, sys; from operators import _native; from operators.rows import sink_table\n"
        "s = _native.Sink(); fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
        "r = _native.DirScan(fd, b'locked').step(s, 100, 8, 1)\n"
        "print(r[0], r[1], r[2], r[3])\n"
        "print(sorted((x['path'], x['type'], x['error']) for x in sink_table(s).to_pylist()))\n"
    )
    try:
        out = subprocess.run(
            [*DROP_DAC, sys.executable, "-c", code, str(root / "locked")],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        ).stdout
    finally:
        (root / "locked").chmod(0o755)
    counts, rows = out.splitlines()
    assert counts.startswith("(2, 0, 0, 1, 0, 2, 0, 1)") and "[] 0" in counts, out
    assert "('locked/d', 'directory', 'PermissionError: [Errno 13] Permission denied')" in rows  # d_type said so
    assert "('locked/f', 'other', 'PermissionError: [Errno 13] Permission denied')" in rows


def test_a_step_whose_every_entry_vanished_writes_nothing(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    for i in range(200):
        (root / f"f{i}").write_text("x")
    sink = _native.Sink()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        scan_ = _native.DirScan(fd, b"")
        first = scan_.step(sink, 1, 8, 1)  # one entry now; the rest of the listing is read already
        for p in root.iterdir():
            p.unlink()
        counts, samples, subdirs, err, done = scan_.step(sink, 10_000, 8, 4)
    finally:
        os.close(fd)
    assert first[0][0] == 1 and not first[4]
    assert counts == (0, 0, 0, 0, 0, 0, 0, 0) and samples == [] and subdirs == [] and err == 0 and done
    assert len(sink) == 1


def test_steps_bound_what_one_call_holds(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    for i in range(1000):
        (root / f"f{i:04}").write_text("x")
    sink = _native.Sink()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        scan_ = _native.DirScan(fd, b"")
        steps = []
        while True:
            counts, _, _, _, done = scan_.step(sink, 300, 32, 2)
            steps.append(counts[0])
            if done:
                break
    finally:
        os.close(fd)
    assert steps[:3] == [300, 300, 300] and sum(steps) == 1000
    assert sorted(sink_table(sink).column("path").to_pylist()) == [f"f{i:04}" for i in range(1000)]


def test_prune_and_ops_cap_are_asked_per_chunk(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    for i in range(100):
        (root / f"f{i}.{'tmp' if i % 2 else 'dat'}").write_text("x")
    (root / "sub.tmp").mkdir()  # a directory: the walk's to decide, never the core's
    taken: list[int] = []
    prune = Prune(exclude=("*.tmp",))
    keep = lambda paths: [prune.decide(p, False) == "keep" for p in paths]  # noqa: E731
    table, counts, _, subdirs, _, _ = scan(root, chunk=16, width=3, take_ops=taken.append, keep=keep)
    assert sum(taken) == 101 and max(taken) <= 16  # every entry, before its stat, chunk by chunk
    assert counts[0] == 50 and counts[6] == 50 and all(p.endswith(".dat") for p in table.column("path").to_pylist())
    assert [d[0] for d in subdirs] == [b"sub.tmp"]


def test_stats_the_kernel_has_cached_stay_on_the_callers_thread(tmp_path):
    """A warm directory's stats take microseconds, less than handing a chunk to a pool thread: a step
    with network width starts no thread (stats that are round trips fan out: tests/faults/test_fuse_requests.py).
    Each try in a fresh process (the pool is per process); a host so loaded that a chunk of cached
    stats takes over 50 us in all three sends it out, hence any of three."""
    root = tmp_path / "t"
    root.mkdir()
    for i in range(256):
        (root / f"f{i}").write_bytes(b"x" * i)
    os.listdir(root)
    code = (
        "import os, sys; from operators import _native; s = _native.Sink(); "
        "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY); "
        "c = _native.DirScan(fd, b'').step(s, 65536, 4, 16)[0]; print(c[0], _native.pool_threads())"
    )
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, cwd=REPO)
        assert out.returncode == 0, out.stderr
        entries, threads = map(int, out.stdout.split())
        assert entries == 256
        runs.append(threads)
        if threads == 0:
            break
    assert 0 in runs, runs


def test_descriptor_limit_reached_is_the_directorys_error_row(tmp_path):
    root = tmp_path / "t"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_text("x")
    code = (
        "import os, resource, sys\n"
        "from operators.scan.local import LocalLister; from operators.core.pool import get_pool\n"
        "lister = LocalLister(sys.argv[1]); lister.descend = 0\n"
        "(sub,) = lister.list_dir((b'', None), get_pool(2)).subdirs\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); held = []\n"
        "try:\n"
        "    while True: held.append(os.open('/dev/null', os.O_RDONLY))\n"
        "except OSError: pass\n"
        "listing = lister.list_dir(sub, get_pool(2)); print(listing.error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout
    assert "Errno 24" in out  # EMFILE: the directory's row carries it, the walk goes on


def test_lister_writes_the_walk_rows_through_the_sink(tmp_path):
    root = tmp_path / "t"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x").write_text("1")
    (root / "y").write_text("22")
    lister = LocalLister(str(root))
    lister.descend = 0  # one directory per call (the walk's own unit; descent: the next test)
    try:
        listing = lister.list_dir((b"", None), get_pool(2))
        assert listing.rows == [] and [d[0] for d in listing.subdirs] == [b"a"]
        assert listing.counts[0][0][:2] == (1, 1) and len(lister.sink) == 1
    finally:
        lister.close()


def test_a_step_descends_into_small_directories_as_the_walk_would(tmp_path):
    """``descend``: the subtree's rows (directories' own included) in one call, the rest handed back."""
    root = tmp_path / "t"
    for d in ("a", "a/b", "a/b/c", "big"):
        (root / d).mkdir(parents=True)
    (root / "a" / "f").write_text("1")
    (root / "a" / "b" / "c" / "g").write_text("22")
    (root / "a" / "link").symlink_to(root / "big")  # a link to a directory: a row, never entered
    for i in range(50):
        (root / "big" / f"x{i}").write_text("x")
    (root / "a" / "b" / "empty").mkdir()
    sink = _native.Sink()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        counts, _, subdirs, _, done = _native.DirScan(fd, b"").step(sink, 1000, 64, 1, descend=12)
    finally:
        os.close(fd)
    rows = {r["path"]: r for r in sink_table(sink).to_pylist()}
    assert done and [d[0] for d in subdirs] == [b"big"]  # 50 entries do not fit in what was left
    assert set(rows) == {"a", "a/f", "a/link", "a/b", "a/b/c", "a/b/c/g", "a/b/empty"}
    assert rows["a/b/c"]["type"] == "directory" and rows["a/b/c"]["parent"] == "a/b" and rows["a/b/c"]["depth"] == 3
    assert rows["a"]["ino"] == os.lstat(root / "a").st_ino and rows["a/link"]["type"] == "symlink"
    assert counts[0] == 7 and counts[7] == 4  # entries, of which directories


def test_rows_made_in_python_go_through_the_sink_unchanged(tmp_path):
    """Python rows (a directory's own, error rows) pushed into the sink read back as rows_to_table makes them."""
    from operators.rows import error_row, with_error

    (tmp_path / "d").mkdir()
    rows = [
        row_from_stat(b"a/d\xff", os.lstat(tmp_path / "d")),
        with_error(row_from_stat(b"top", os.lstat(tmp_path / "d")), OSError(13, "Permission denied")),
        error_row(b".", "directory", OSError(2, "gone")),
        row_from_stat(b"a/l", os.lstat(tmp_path / "d"), b"/x/\xfe"),
    ]
    sink = _native.Sink()
    sink.push_rows(rows)
    assert sink_table(sink).sort_by("path").to_pylist() == rows_to_table(rows).to_pylist()
    with pytest.raises(ValueError):
        sink.push_rows([(*rows[0][:15], "a checksum", None)])
