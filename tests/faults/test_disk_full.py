"""The destination fills up during ``cp`` and ``sync`` (a 2 MB tmpfs): exit 1 with the error said,
no partial file under a final name, and ``--resume`` once there is room gives the same tree."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ..conftest import run_pfs, tree_digest
from .harness import can_mount_tmpfs, grow, leftovers, tmpfs


def make_source(root: Path, files: int = 48, size: int = 100_000) -> Path:
    """~4.8 MB in 4 directories: more than the 2 MB tmpfs holds."""
    for i in range(files):
        d = root / f"d{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:03d}.bin").write_bytes(hashlib.sha256(str(i).encode()).digest() * (size // 32))
    (root / "small.txt").write_text("x")
    return root


def assert_no_partial(src: Path, dst: Path) -> None:
    """Every file under a final name in ``dst`` is whole: byte-identical to its source."""
    want = tree_digest(src)
    for rel, what in tree_digest(dst).items():
        name = os.path.basename(rel)
        if what[0] != "file" or b".pfs-tmp-" in name or name.startswith(b".pfs-journal-") or b".pfs-journal-" in rel:
            continue
        assert want.get(rel) == what, f"{rel!r} at its final name differs from the source (a partial file?)"


@pytest.fixture
def small_fs(tmp_path, root_only):
    if not can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount a tmpfs here")
    with tmpfs(tmp_path / "mnt", "2m") as mnt:
        yield mnt


def test_cp_into_a_full_destination_then_resume(tmp_path, small_fs):
    src = make_source(tmp_path / "src")
    dst = small_fs / "dst"
    first = run_pfs("cp", src, dst, "--no-progress", "--chunk-files", "4")
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    assert "No space left on device" in out, out
    assert_no_partial(src, dst)
    grow(small_fs, "32m")
    again = run_pfs("cp", src, dst, "--no-progress", "--chunk-files", "4", "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert tree_digest(dst) == tree_digest(src)
    assert not leftovers(dst)


def test_sync_into_a_full_destination_then_resume(tmp_path, small_fs):
    src = make_source(tmp_path / "src")
    dst = small_fs / "dst"
    (dst / "d0").mkdir(parents=True)
    (dst / "extra.txt").write_text("not in the source")
    first = run_pfs("sync", src, dst, "--delete", "--no-progress", "--chunk-files", "4")
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    assert "No space left on device" in out, out
    assert_no_partial(src, dst)
    grow(small_fs, "32m")
    again = run_pfs("sync", src, dst, "--delete", "--no-progress", "--chunk-files", "4", "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert tree_digest(dst) == tree_digest(src)
    assert not leftovers(dst)
