"""cp and rm hand out a manifest's files a few of every directory at a time (``dask_pfs.manifests.spread``):
creates and unlinks in one directory queue on its lock, so chunks must span directories."""

from __future__ import annotations

import itertools
from pathlib import Path

from dask_pfs import scan
from dask_pfs.copy.rows import CopyRows
from dask_pfs.manifests.manifest import Selection, open_manifest
from dask_pfs.manifests.spread import PER_DIR
from dask_pfs.remove import journal as rm_journal


def _tree(root: Path, dirs: int = 3, files: int = 100) -> None:
    for d in range(dirs):
        (root / f"d{d}").mkdir(parents=True)
        for i in range(files):
            (root / f"d{d}" / f"f{i:03d}").write_bytes(b"x")


def _runs(paths: list[str]) -> list[tuple[str, int]]:
    """(directory, how many consecutive paths are in it), in order."""
    return [(d, len(list(g))) for d, g in itertools.groupby(paths, key=lambda p: p.rsplit("/", 1)[0])]


def _check(paths: list[str], dirs: int, files: int) -> None:
    assert sorted(paths) == sorted(f"d{d}/f{i:03d}" for d in range(dirs) for i in range(files))
    runs = _runs(paths)
    # round after round, PER_DIR files of each directory (the last round holds what is left)
    rounds = -(-files // PER_DIR)
    assert len(runs) == dirs * rounds, runs
    assert [d for d, _ in runs] == [f"d{d}" for d in range(dirs)] * rounds, runs
    assert all(n == PER_DIR for _, n in runs[:-dirs]), runs
    for d in range(dirs):  # within a directory, path order
        mine = [p for p in paths if p.startswith(f"d{d}/")]
        assert mine == sorted(mine)


def test_rm_and_cp_deal_out_every_directorys_files_a_few_at_a_time(tmp_path, dask_client):
    _tree(tmp_path / "t")
    scan(tmp_path / "t", tmp_path / "m", client=dask_client)
    m = open_manifest(str(tmp_path / "m"))
    with Selection(m) as sel:
        rm_paths = [p for b in sel.batches(rm_journal.files_sql(sel)) for p in b.column("path").to_pylist()]
    _check(rm_paths, 3, 100)
    rows = CopyRows(m, None, 1 << 30, links=True, streamed_parts=())
    try:
        cp_paths = [p for b in rows.batches(rows.files_sql()) for p in b.column("path").to_pylist()]
    finally:
        rows.close()
    _check(cp_paths, 3, 100)


def test_a_frozen_rm_selection_is_stored_spread(tmp_path, dask_client):
    _tree(tmp_path / "t", dirs=2, files=70)
    scan(tmp_path / "t", tmp_path / "m", client=dask_client)
    m = open_manifest(str(tmp_path / "m"))
    (tmp_path / "j").mkdir()
    with Selection(m) as sel:
        sel.write(sel.sql(rm_journal.FROZEN_COLUMNS, order=rm_journal.SELECTION_ORDER),
                  str(tmp_path / "j" / "sel.parquet"))  # fmt: skip
    frozen = Selection.of_file(str(tmp_path / "j" / "sel.parquet"))
    try:
        paths = [p for b in frozen.batches(rm_journal.files_sql(frozen)) for p in b.column("path").to_pylist()]
    finally:
        frozen.close()
    _check(paths, 2, 70)
