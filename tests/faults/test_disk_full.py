"""The destination fills up during ``cp`` and ``sync`` (a 2 MB tmpfs): exit 1 with the error said,
no partial file under a final name, and ``--resume`` once there is room gives the same tree."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ..conftest import run_pfs, tree_digest
from .harness import can_mount_tmpfs, grow, leftovers, tmpfs

ENOSPC = "No space left on device"


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


def assert_enospc_named(summary: dict, dst: Path) -> None:
    """docs/reliability.md: every failed file named with ENOSPC in the summary and the Parquet failure
    log, and the temp file of each failed copy unlinked already (before any --resume)."""
    copy = summary.get("copy") or summary  # sync nests its copy engine's summary
    table = pq.read_table(copy["log"])
    rows = table.to_pylist()
    assert copy["failed"] > 0 and len(rows) == copy["failed"], (copy["failed"], rows[:3])
    assert all(ENOSPC in str(r["error"]) for r in rows), [r for r in rows if ENOSPC not in str(r["error"])][:3]
    assert copy["samples"] and all(ENOSPC in error for _, error in copy["samples"]), copy["samples"]
    named = {os.fsencode(r["path"]) if r.get("path") is not None else r["path_raw"] for r in rows}
    assert len(named) == len(rows)  # one row per failed file
    for rel in named:
        assert not os.path.lexists(os.path.join(os.fsencode(dst), rel)) or os.path.isdir(
            os.path.join(os.fsencode(dst), rel)
        ), f"{rel!r} failed but is at its final name"
    temps = [p for p in leftovers(dst) if ".pfs-tmp-" in os.path.basename(p)]
    assert not temps, f"temp files of failed copies left before the resume: {temps[:5]}"


@pytest.fixture
def small_fs(tmp_path, root_only):
    if not can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount a tmpfs here")
    with tmpfs(tmp_path / "mnt", "2m") as mnt:
        yield mnt


def test_cp_into_a_full_destination_then_resume(tmp_path, small_fs):
    src = make_source(tmp_path / "src")
    dst = small_fs / "dst"
    first = run_pfs("cp", src, dst, "--no-progress", "--chunk-files", "4", "--json")
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    if first.stdout.strip():  # the --json summary: every failed file named with ENOSPC
        assert_enospc_named(json.loads(first.stdout), dst)
    else:  # the disk filled before cp's own scan could record its manifest in the journal (streamed copy)
        lines = first.stderr.strip().splitlines()
        assert len(lines) == 1 and "No space left on device" in lines[0] and "--resume" in lines[0], out
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
    first = run_pfs("sync", src, dst, "--delete", "--no-progress", "--chunk-files", "4", "--json")
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    assert first.stdout.strip(), out  # the --json summary
    assert_enospc_named(json.loads(first.stdout), dst)
    assert_no_partial(src, dst)
    grow(small_fs, "32m")
    again = run_pfs("sync", src, dst, "--delete", "--no-progress", "--chunk-files", "4", "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert tree_digest(dst) == tree_digest(src)
    assert not leftovers(dst)
