"""The native core's rm and cp (``native/src/remove.rs``, ``copy.rs``) at the edges, engine-free:
hostile names, symlinks planted or swapped in mid-run, permission errors with DAC dropped,
batches that vanished, and a final name that never holds a partial file."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from operators import _native
from operators.copy.spec import temp_name
from operators.copy.tasks import CopySpec, Entry, copy_files
from operators.remove.backends import LocalRemover
from operators.remove.tasks import RemoveSpec, remove_tree_chunk, unlink_entries
from operators.scan.walk import Budget
from tests.conftest import DROP_DAC, REPO

HOSTILE = [b"caf\xe9", b"\xff\xfe name", b"new\nline", b"-rf", b" lead", b"x" * 255]


def remove_tree(root: Path, threads: int | None = 4, **kw):
    spec = RemoveSpec(protocol="file", root=str(root), threads=threads, **kw)
    return remove_tree_chunk(spec, [(b"", None)], Budget(max_entries=10**9, max_seconds=600))


def outside_tree(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    (out / "sub").mkdir(parents=True)
    (out / "keep.txt").write_text("keep")
    (out / "sub" / "deep.txt").write_text("deep")
    return out


def listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# ---------------------------------------------------------------- rm


def test_tree_with_hostile_names_is_removed_and_counted(tmp_path):
    root = os.fsencode(tmp_path / "t")
    for d in (b"", b"d\xff", b"d\xff/" + b"y" * 255):
        os.makedirs(root + b"/" + d, exist_ok=True)
        for name in HOSTILE:
            with open(root + b"/" + d + b"/" + name if d else root + b"/" + name, "wb") as f:
                f.write(b"12345")
    result = remove_tree(tmp_path / "t")
    assert result.counts.removed_files == 3 * len(HOSTILE)
    assert result.counts.bytes == 3 * len(HOSTILE) * 5
    assert result.counts.removed_dirs == 2  # the root itself goes in the driver's last pass
    assert result.counts.problems == [] and result.left_dirs == [] and result.frontier == []
    assert os.listdir(root) == []


def test_planted_symlinks_are_unlinked_not_followed(tmp_path):
    out = outside_tree(tmp_path)
    root = tmp_path / "t"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f").write_text("x")
    (root / "to_dir").symlink_to(out)
    (root / "a" / "to_file").symlink_to(out / "keep.txt")
    (root / "a" / "dangling").symlink_to(tmp_path / "nowhere")
    result = remove_tree(root)
    assert result.counts.removed_files == 4 and result.counts.problems == []
    assert os.listdir(root) == []
    assert listing(out) == ["keep.txt", "sub", "sub/deep.txt"]


def test_directory_swapped_for_a_symlink_after_listing_touches_nothing_outside(tmp_path):
    out = outside_tree(tmp_path)
    root = tmp_path / "t"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    spec = RemoveSpec(protocol="file", root=str(root), threads=2)
    lister = LocalRemover(spec).tree_lister()
    try:
        first = lister.list_dir((b"", None), None)  # the root listed: "a" queued to walk
        assert [rel for rel, _ in first.subdirs] == [b"a"]
        os.rename(root / "a", tmp_path / "moved")
        (root / "a").symlink_to(out / "sub")  # swapped before the walk opens it
        second = lister.list_dir(first.subdirs[0], None)
    finally:
        lister.close()
    assert second.error is not None and "not followed" in str(second.error)
    assert second.subdirs == [] and lister.counts.removed_files == 0
    assert listing(out) == ["keep.txt", "sub", "sub/deep.txt"]
    # manifest rows below the swapped directory: refused per row, nothing outside removed
    counts = unlink_entries(spec, [("a/deep.txt", None, "file", 4, None), ("a", None, "directory", None, None)])
    assert counts.removed_files == 0 and counts.failed == 1 and counts.skipped_changed == 1
    assert "not followed" in counts.problems[0][2]
    dirs = LocalRemover(spec).rmdir_chunk([b"a"], True)
    assert dirs.removed_dirs == 0 and dirs.skipped_changed == 1
    assert listing(out) == ["keep.txt", "sub", "sub/deep.txt"] and (root / "a").is_symlink()


def test_batch_where_every_entry_vanished(tmp_path):
    spec = RemoveSpec(protocol="file", root=str(tmp_path), threads=4)
    rows = [(f"gone/{i}", None, "file", 1, None) for i in range(100)] + [("nope", None, "file", 1, None)]
    counts = unlink_entries(spec, rows)
    assert counts.skipped_missing == 101 and counts.removed_files == 0 and counts.problems == []
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        result = _native.rm_clear_dir(fd, False, False, 4, 5, [b"a", b"b", b"c"])
    finally:
        os.close(fd)
    assert result[2:] == (0, 0, [], [], [])  # names that vanished since the listing: no phantom rows


def test_manifest_rows_changed_since_the_scan_are_skipped(tmp_path):
    (tmp_path / "f").write_text("now longer")
    (tmp_path / "d").mkdir()
    spec = RemoveSpec(protocol="file", root=str(tmp_path), threads=1)
    counts = unlink_entries(spec, [("f", None, "file", 3, None), ("d", None, "file", 0, None)])
    assert sorted(p[2] for p in counts.problems) == ["size 3 -> 10", "type file -> directory"]
    assert counts.skipped_changed == 2 and (tmp_path / "f").exists()


RM_AS_USER = """
import sys
import time
from operators.remove.tasks import RemoveSpec, remove_tree_chunk
from operators.scan.walk import Budget
spec = RemoveSpec(protocol="file", root=sys.argv[1], threads=2)
r = remove_tree_chunk(spec, [(b"", None)], Budget(max_entries=10**9, max_seconds=600))
print(r.counts.removed_files, r.counts.failed, r.counts.skipped_nonempty)
for rel, status, error in r.counts.problems:
    print(rel.decode(), status, error)
"""


def test_permission_error_is_reported_per_entry(tmp_path):
    root = tmp_path / "t"
    (root / "locked").mkdir(parents=True)
    (root / "open").mkdir()
    for d in ("locked", "open"):
        for i in range(3):
            (root / d / f"f{i}").write_text("x")
    (root / "locked").chmod(0o555)  # its files cannot be unlinked without DAC override
    try:
        run = subprocess.run(
            [*DROP_DAC, sys.executable, "-c", RM_AS_USER, str(root)], capture_output=True, text=True, cwd=REPO
        )
    finally:
        (root / "locked").chmod(0o755)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "3 3 1"  # open/* removed; locked/* failed; locked left (not empty)
    failed = sorted(line for line in lines[1:] if " failed " in line)
    assert failed == [f"locked/f{i} failed PermissionError: [Errno 13] Permission denied" for i in range(3)]
    assert sorted(os.listdir(root)) == ["locked"] and len(os.listdir(root / "locked")) == 3


# ---------------------------------------------------------------- cp


def cp_spec(src: Path, dst: Path, **kw) -> CopySpec:
    return CopySpec("file", str(src), "file", str(dst), token="tok", **{"threads": 4, **kw})


def entries_of(src: Path, rels: list[bytes]) -> list[Entry]:
    out = []
    for rel in rels:
        s = os.lstat(os.fsencode(src) + b"/" + rel)
        out.append(Entry(rel, "file", s.st_size, s.st_mtime_ns, s.st_atime_ns, s.st_mode))
    return out


def test_copy_hostile_names_with_metadata(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    raw = os.fsencode(src)
    for i, name in enumerate(HOSTILE):
        with open(raw + b"/" + name, "wb") as f:
            f.write(bytes([i]) * (1000 * i + 1))
        os.chmod(raw + b"/" + name, 0o640 if i % 2 else 0o604)
        os.utime(raw + b"/" + name, ns=(1_000_000_123, 2_000_000_456 + i))
    out = copy_files(cp_spec(src, dst, check_existing=False), entries_of(src, HOSTILE))
    assert out.failures == [] and out.files == len(HOSTILE)
    for name in HOSTILE:
        a, b = os.lstat(raw + b"/" + name), os.lstat(os.fsencode(dst) + b"/" + name)
        assert (b.st_mode, b.st_size, b.st_mtime_ns) == (a.st_mode, a.st_size, a.st_mtime_ns)
        assert b.st_atime_ns == 1_000_000_123  # as the source had it before this copy read it
        assert (
            Path(os.fsdecode(os.fsencode(dst) + b"/" + name)).read_bytes()
            == Path(os.fsdecode(raw + b"/" + name)).read_bytes()
        )
    assert sorted(os.listdir(os.fsencode(dst))) == sorted(HOSTILE)  # no temp file left (255 bytes: hashed)


def test_failed_copy_leaves_no_temp_and_no_partial_file_at_the_final_name(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "ok").write_text("fine")
    (src / "was_file").mkdir()  # a file in the manifest, a directory by copy time: reading it fails
    (dst / "was_file").write_text("the old content")
    (dst / temp_name(b"ok", "tok").decode()).write_text("stale temp of a killed attempt")
    spec = cp_spec(src, dst, on_exist="overwrite")
    entries = entries_of(src, [b"ok"]) + [Entry(b"was_file", "file", 5, None, None, 0o100644)]
    out = copy_files(spec, entries)
    assert out.files == 1 and [f[0] for f in out.failures] == ["was_file"]
    assert out.failures[0][1].startswith(f"IsADirectoryError: [Errno {errno.EISDIR}]"), out.failures  # read(2) of a dir
    assert (dst / "was_file").read_text() == "the old content"  # never truncated, never replaced
    assert sorted(os.listdir(dst)) == ["ok", "was_file"] and (dst / "ok").read_text() == "fine"


def test_existing_destination_verdicts(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    for name in ("same", "differs"):
        (src / name).write_text("abc")
    (dst / "differs").write_text("abcdef")
    os.link(src / "same", dst / "same")  # identical size and mtime
    entries = entries_of(src, [b"same", b"differs"])
    out = copy_files(cp_spec(src, dst), entries)
    assert out.skipped == 1 and out.files == 0 and "exists and differs" in out.failures[0][1]
    out = copy_files(cp_spec(src, dst, on_exist="overwrite"), entries)
    assert out.files == 2 and (dst / "differs").read_text() == "abc"


CP_AS_USER = """
import sys, os
from operators.copy.tasks import CopySpec, Entry, copy_files
spec = CopySpec("file", sys.argv[1], "file", sys.argv[2], token="t", threads=2, check_existing=False)
es = [Entry(n.encode(), "file", 1, None, None, 0o100644) for n in ("a", "secret", "b")]
out = copy_files(spec, es)
print(out.files, out.failures)
"""


def test_cp_permission_error_is_reported_per_entry(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    for name in ("a", "secret", "b"):
        (src / name).write_text("x")
    (src / "secret").chmod(0o000)
    run = subprocess.run(
        [*DROP_DAC, sys.executable, "-c", CP_AS_USER, str(src), str(dst)], capture_output=True, text=True, cwd=REPO
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "2 [('secret', 'PermissionError: [Errno 13] Permission denied')]"
    assert sorted(os.listdir(dst)) == ["a", "b"]


def test_fanned_out_batch_copies_every_file_in_order(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    rels = []
    for d in range(5):
        (src / f"d{d}").mkdir(parents=True)
        (dst / f"d{d}").mkdir(parents=True)
        for i in range(60):
            (src / f"d{d}" / f"f{i}").write_bytes(os.urandom(i * 37))
            rels.append(f"d{d}/f{i}".encode())
    out = copy_files(cp_spec(src, dst, threads=16, check_existing=False), entries_of(src, rels))
    assert out.failures == [] and out.files == 300
    for rel in rels:
        assert (dst / rel.decode()).read_bytes() == (src / rel.decode()).read_bytes()


def test_symlinked_source_directory_is_not_followed(tmp_path):
    out_dir = outside_tree(tmp_path)
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (dst / "sub").mkdir(parents=True)
    (src / "sub").symlink_to(out_dir / "sub")  # swapped in after the scan listed sub/deep.txt
    out = copy_files(cp_spec(src, dst), [Entry(b"sub/deep.txt", "file", 4, None, None, 0o100644)])
    assert out.files == 0 and len(out.failures) == 1
    assert os.listdir(dst / "sub") == []


@pytest.mark.parametrize("rel", [b"../escape", b"/abs", b"a/../../b"])
def test_core_is_never_handed_an_escaping_path(tmp_path, rel):
    spec = RemoveSpec(protocol="file", root=str(tmp_path), threads=1)
    with pytest.raises(ValueError):
        unlink_entries(spec, [(rel.decode(), None, "file", None, None)])


# ---------------------------------------------------------------- caps and concurrency


def test_ops_cap_paces_native_rm_and_cp(tmp_path):
    from operators import ratelimit

    src = tmp_path / "src"
    for d in range(2):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(150):
            (src / f"d{d}" / f"f{i}").write_text("x")
    rels = [f"d{d}/f{i}".encode() for d in range(2) for i in range(150)]
    ratelimit.configure(ratelimit.Limits(ops_per_second=600))
    try:
        t = time.monotonic()
        dst = tmp_path / "dst"
        for d in range(2):
            (dst / f"d{d}").mkdir(parents=True)
        out = copy_files(cp_spec(src, dst, check_existing=False), entries_of(src, rels))
        copied = time.monotonic() - t
        t = time.monotonic()
        result = remove_tree(src)
        removed = time.monotonic() - t
    finally:
        ratelimit.configure(None)
    assert out.files == 300 and result.counts.removed_files == 300
    assert copied >= 0.4 and removed >= 0.4, (copied, removed)  # 300 ops at 600/s, 30 saved up


def test_core_batches_feed_the_concurrency_controller(tmp_path, monkeypatch):
    from operators.core import concurrency

    monkeypatch.setattr(concurrency, "_controller", concurrency.Controller())
    ctl = concurrency.controller()
    spec = RemoveSpec(protocol="file", root=str(tmp_path), threads=None)
    rows = [(f"gone/{i}", None, "file", 1, None) for i in range(300)]
    widths = []
    real = _native.rm_unlink_rels

    def spy(*args, **kwargs):
        widths.append(args[7])
        return real(*args, **kwargs)

    monkeypatch.setattr(_native, "rm_unlink_rels", spy)
    for _ in range(3):
        unlink_entries(spec, rows)
    assert widths == [ctl.limit] * 3  # the controller's limit is the core's fan-out
    assert ctl.report()["completed"] >= 300 and ctl.inflight == 0  # measured like pool jobs


CP_FEW_FDS = """
import json, os, resource, sys
import operators._native as native
src, dst = sys.argv[1].encode(), sys.argv[2].encode()
rels = [f"f{i}".encode() for i in range(60)]
# what the process holds (the listing's own descriptor included) and 2 more: the two roots fit, a
# source file too, its temp file never, so EMFILE comes mid-file whether or not the batch fans out
free = 2 + len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (free, free))
status, errnos, _ = native.cp_files(src, dst, rels, rels, [b".t" + r for r in rels], [4096] * 60, [None] * 60,
                                    False, -1, -1, True, False, False, 0, 0o022, 8)
print(json.dumps({"status": list(status), "errnos": list(errnos)}))
"""


def test_descriptor_limit_reached_mid_batch_fails_per_file_and_leaves_no_partial_file(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    for i in range(60):
        (src / f"f{i}").write_bytes(bytes([i]) * 4096)
    run = subprocess.run(
        [sys.executable, "-c", CP_FEW_FDS, str(src), str(dst)], capture_output=True, text=True, cwd=REPO
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    failed = {e for e in got["errnos"] if e}
    # EMFILE and nothing else, reported per file: some copies failed, the process did not
    assert failed == {errno.EMFILE}, got
    names = os.listdir(dst)
    assert not [f"f{i}" for i, e in enumerate(got["errnos"]) if e and f"f{i}" in names]  # failed: not at its name
    names = os.listdir(dst)
    assert all(not n.startswith(".t") for n in names)  # no temp file left behind
    for n in names:  # whatever reached a final name is complete
        assert (dst / n).read_bytes() == (src / n).read_bytes()
