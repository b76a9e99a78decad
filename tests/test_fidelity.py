"""What ``cp -a`` and ``rsync -aHAX`` do, pfs does (issue 42, part C): each case of the issue, compared entry
by entry (``tests/treecmp.py``: type, mode, owner, size, bytes, ns mtime, link target, hard-link groups,
sparseness, xattrs and ACLs) with what the oracle makes of the same tree.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

from tests.conftest import run_pfs
from tests.treecmp import differences, snapshot

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="owners, sockets and devices: needs root")


def _cp_a(src, dst) -> None:
    subprocess.run(["cp", "-a", os.fsencode(src), os.fsencode(dst)], check=True)


def _rsync(src, dst, *extra: str) -> None:
    if shutil.which("rsync") is None:
        pytest.skip("rsync missing (scripts/ensure-tools.sh installs it)")
    subprocess.run(["rsync", "-aHAX", *extra, os.fsencode(src) + b"/", os.fsencode(dst) + b"/"], check=True)


def _same_as_cp_a(tmp_path, src, *args: str) -> None:
    ref, out = tmp_path / "ref", tmp_path / "out"
    _cp_a(src, ref)
    proc = run_pfs("cp", src, out, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert differences(snapshot(ref), snapshot(out), ignore=_journal_free(out)) == []


def _journal_free(out) -> tuple[str, ...]:
    assert not [n for n in os.listdir(out) if n.startswith(".pfs-journal-")], "the journal stayed after success"
    return ()


def test_hard_links_of_every_type_and_a_non_utf8_name(tmp_path):
    """A hard link with one non-UTF-8 name (its other name UTF-8), hard-linked symlinks and FIFOs, a
    socket: all as ``cp -a`` makes them (was: the non-UTF-8 name missing and exit 1 on every rerun,
    symlinks and FIFOs unlinked, the socket skipped with exit 0)."""
    src = os.fsencode(tmp_path / "src")
    os.mkdir(src)
    src_dir = tmp_path / "src"
    with open(src + b"/u", "wb") as f:
        f.write(b"x")
    os.link(src + b"/u", src + b"/u\xfe")
    os.symlink(b"target", src + b"/sl")
    os.link(src + b"/sl", src + b"/sl2", follow_symlinks=False)
    os.mkfifo(src + b"/ff")
    os.link(src + b"/ff", src + b"/ff2")
    os.mknod(src + b"/sock", stat.S_IFSOCK | 0o640)
    os.link(src + b"/sock", src + b"/sock2")
    _same_as_cp_a(tmp_path, src_dir)
    again = run_pfs("cp", f"{src_dir}/", tmp_path / "out", "--skip-existing")
    assert again.returncode == 0, again.stderr


def test_file_into_a_missing_directory_with_a_trailing_slash_is_refused(tmp_path):
    """``cp f dir/nodir/``: "Not a directory" and nothing made (was: a file named ``nodir``, exit 0)."""
    (tmp_path / "f").write_text("hi")
    (tmp_path / "dir").mkdir()
    proc = run_pfs("cp", tmp_path / "f", f"{tmp_path / 'dir'}/nodir/")
    assert proc.returncode != 0
    assert "not a directory" in proc.stderr
    assert os.listdir(tmp_path / "dir") == []


def _sync_like_rsync(tmp_path, src, mutate, *args: str) -> None:
    """Sync ``src`` to ``out`` and rsync it to ``ref``, apply ``mutate(src)``, then both again."""
    ref, out = tmp_path / "ref", tmp_path / "out"
    os.mkdir(ref)
    _rsync(src, ref, *args)
    proc = run_pfs("sync", src, out, *args, "-y")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mutate(src)
    _rsync(src, ref, *args)
    proc = run_pfs("sync", src, out, *args, "-y")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got, mine = snapshot(out), snapshot(src)
    assert differences(mine, got) == []  # the source itself: a mirror has every attribute of it
    slips = {line.split(" expected ")[0] for line in differences(mine, snapshot(ref))}  # rsync's own (README)
    assert [line for line in differences(snapshot(ref), got) if line.split(" expected ")[0] not in slips] == []
    again = run_pfs("sync", src, out, *args, "-y", "--json")
    assert '"changed": 0' in again.stdout and '"new": 0' in again.stdout, again.stdout  # a steady state


def test_sync_carries_a_change_of_mode_or_owner_only_and_a_symlinks_mtime(tmp_path):
    """A file whose mode alone changed, one whose owner alone changed, a symlink whose owner alone
    changed and one whose mtime alone changed (was: all four left as they were, reported unchanged)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("mode", "owner"):
        (src / name).write_text(name)
    os.symlink("t1", src / "lowner")
    os.symlink("t2", src / "ltime")

    def mutate(s) -> None:
        os.chmod(s / "mode", 0o600)
        os.chown(s / "owner", 1000, 1000)
        os.chown(s / "lowner", 1000, 1000, follow_symlinks=False)
        os.utime(s / "ltime", ns=(10**9, 10**9), follow_symlinks=False)
        os.utime(s, ns=(2 * 10**9, 2 * 10**9))

    _sync_like_rsync(tmp_path, src, mutate)


def test_times_before_1970_and_after_2262(tmp_path):
    """Found by the oracle: an mtime past 2262 failed the copy (``epoch_ns`` overflow in the copy's query), and
    an entry before 1970 looked changed since the scan (the manifest truncates, the checks floored), so
    ``sync --delete`` skipped removing it (was: exit 0, the entry still there)."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for name, ns in (("old", -86_400_000_000_123), ("late", 10_000_000_000_000_000_001)):
        (src / "d" / name).write_text(name)
        os.utime(src / "d" / name, ns=(ns, ns))
    os.utime(src / "d", ns=(-5_000_000_123, -5_000_000_123))
    _same_as_cp_a(tmp_path, src)

    def mutate(s) -> None:
        os.unlink(s / "d" / "old")
        os.unlink(s / "d" / "late")
        os.utime(s / "d", ns=(-5_000_000_123, -5_000_000_123))

    shutil.rmtree(tmp_path / "ref")
    _sync_like_rsync(tmp_path, src, mutate, "--delete")


def test_sync_delete_gives_a_directory_that_only_lost_entries_its_mtime_back(tmp_path):
    """An extra entry removed from a directory the source did not change (was: the directory's mtime left at
    the time of the deletion; rsync --delete sets it from the source)."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "keep").write_text("k")
    os.utime(src / "d", ns=(10**18, 10**18))

    def mutate(s) -> None:
        (tmp_path / "ref" / "d" / "extra").write_text("x")
        (tmp_path / "out" / "d" / "extra").write_text("x")
        for side in ("ref", "out"):
            os.utime(tmp_path / side / "d", ns=(10**18, 10**18))

    _sync_like_rsync(tmp_path, src, mutate, "--delete")


def test_sync_links_files_that_became_hard_links(tmp_path):
    """Separate files in source and destination that became names of one inode in the source (same bytes, size
    and mtime: nothing else changed), and a new name added to an existing file: after ``pfs sync`` the
    destination names are hard-linked as ``rsync -aH`` links them (was: they stayed separate files)."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for name in ("a", "b", "d/c", "solo"):
        (src / name).write_bytes(b"same bytes")
        os.utime(src / name, ns=(1_700_000_000_123_456_789,) * 2)
    os.utime(src / "d", ns=(10**18, 10**18))

    def mutate(s) -> None:
        for name in ("b", "d/c"):
            os.unlink(s / name)
            os.link(s / "a", s / name)
        os.link(s / "solo", s / "d" / "solo2")
        os.utime(s / "d", ns=(10**18, 10**18))
        os.utime(s, ns=(10**18, 10**18))

    _sync_like_rsync(tmp_path, src, mutate)
    out = tmp_path / "out"
    assert os.stat(out / "a").st_ino == os.stat(out / "b").st_ino == os.stat(out / "d" / "c").st_ino
    assert os.stat(out / "solo").st_ino == os.stat(out / "d" / "solo2").st_ino
