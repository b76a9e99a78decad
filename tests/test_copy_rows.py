"""The copy phases skip a query only where ``CopyRows.census`` proves it would return no row
(``dask_pfs.copy.rows``): on real scans of trees with directories, hard links (a whole group, and one
whose other links are outside the tree), non-UTF-8 names and rows the scan could not read, with and
without a user's selection and a streamed copy's parts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dask_pfs.copy.rows import CopyRows
from dask_pfs.manifests.manifest import Selection, open_manifest
from tests.conftest import DROP_DAC

REPO = Path(__file__).resolve().parent.parent


def _one_file(root: Path) -> None:
    (root / "f").write_bytes(b"x")


def _empty(root: Path) -> None:
    pass


def _nested(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_bytes(b"xy")
    (root / "top").write_bytes(b"z" * 10)
    os.symlink("top", root / "link")


def _hard_links(root: Path) -> None:
    (root / "d").mkdir()
    (root / "d" / "one").write_bytes(b"h")
    os.link(root / "d" / "one", root / "two")
    (root / "plain").write_bytes(b"p")


def _lone_link(root: Path) -> None:
    """A file with a second link outside the tree: nlink 2, but no group inside it."""
    (root / "in").write_bytes(b"l")
    os.link(root / "in", root.parent / "outside")


def _raw_name(root: Path) -> None:
    (root / "sub").mkdir()
    (root / "sub" / os.fsdecode(b"caf\xe9")).write_bytes(b"r")


def _unreadable(root: Path) -> None:
    """Listed but not searchable (the scan runs without DAC capabilities): error rows."""
    (root / "locked" / "d").mkdir(parents=True)
    (root / "locked" / "f").write_bytes(b"e")
    (root / "ok").write_bytes(b"o")
    (root / "locked").chmod(0o444)


TREES = [_one_file, _empty, _nested, _hard_links, _lone_link, _raw_name, _unreadable]


def _scan(tmp_path: Path, make) -> str:
    root = tmp_path / "t"
    root.mkdir()
    make(root)
    out = tmp_path / "m"
    cmd = [sys.executable, "-m", "dask_pfs", "scan", str(root), "-o", str(out)]
    env = {**os.environ, "PFS_SERVER": "off", "PFS_DASHBOARD": "0"}
    try:
        done = subprocess.run([*DROP_DAC, *cmd] if make is _unreadable else cmd, env=env, cwd=REPO,
                              capture_output=True, text=True)  # fmt: skip
        # exit 1: a scan that wrote error rows (the manifest is whole)
        assert done.returncode == (1 if make is _unreadable else 0), done.stderr
    finally:
        if (root / "locked").exists():
            (root / "locked").chmod(0o755)
    return str(out)


def _count(rows: CopyRows, sql: str) -> int:
    return sum(b.num_rows for b in rows.batches(sql))


@pytest.mark.parametrize("make", TREES, ids=lambda f: f.__name__.strip("_"))
def test_a_phase_is_skipped_only_when_its_query_has_no_row(tmp_path, make):
    m = open_manifest(_scan(tmp_path, make))
    parts = tuple(os.path.basename(p) for p in m.part_files())
    if make is _unreadable:
        with Selection(m) as sel:
            assert sel.totals()["errors"] > 0  # the case is what it claims
    for where in (None, "size >= 0"):
        for streamed in ((), parts):  # as after a streamed copy that took every part's streamable rows
            rows = CopyRows(m, where, 1 << 30, links=True, streamed_parts=streamed)
            try:
                case = f"{make.__name__} where={where} streamed={bool(streamed)}"
                errors, files = _count(rows, rows.scan_errors_sql()), _count(rows, rows.files_sql())
                dirs, links = _count(rows, rows.dirs_sql()), _count(rows, rows.links_sql())
                assert rows.has_scan_errors() == (errors > 0), case
                assert rows.has_files() == (files > 0), case
                assert dirs == 0 or rows.has_dirs(), case  # a selection adds ancestors: asked when it has one
                if where is None:
                    assert rows.has_dirs() == (dirs > 0), case
                assert links == 0 or rows.has_links(), case
                with Selection(m, where) as sel:  # the census's totals are the selection's
                    t = sel.totals()
                assert rows.totals() == {"total_files": t["entries"], "total_bytes": t["file_bytes"]}, case
            finally:
                rows.close()
    if make is _hard_links:
        rows = CopyRows(m, None, 1 << 30, links=True, streamed_parts=())
        try:
            assert rows.has_links() and _count(rows, rows.links_sql()) == 1
        finally:
            rows.close()


def test_a_one_file_copy_asks_no_query_of_a_phase_with_nothing_to_do(tmp_path):
    """The streamed 1-file copy: census, and nothing else (before: 7 queries after the scan)."""
    m = open_manifest(_scan(tmp_path, _one_file))
    parts = tuple(os.path.basename(p) for p in m.part_files())
    rows = CopyRows(m, None, 1 << 30, links=True, streamed_parts=parts)
    try:
        rows.check_paths()
        assert not (rows.has_scan_errors() or rows.has_files() or rows.has_dirs() or rows.has_links())
        assert rows.totals() == {"total_files": 1, "total_bytes": 1}
    finally:
        rows.close()


def test_a_selection_borrows_a_connection_only_within_its_access_rules(tmp_path):
    """A streamed copy's phases select on the streamer's connection (one database, not two): the
    borrowed connection stays its owner's, and a manifest outside its locked directories is refused
    by DuckDB itself, as any read there is."""
    import duckdb

    from dask_pfs.manifests.sql import connect

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mine = open_manifest(_scan(tmp_path / "a", _one_file))
    other = open_manifest(_scan(tmp_path / "b", _nested))
    con = connect(dirs=[mine.local_dir])
    try:
        sel = Selection(mine, on=con)
        assert not sel.owned and sel.count() == 1
        sel.close()
        assert con.execute("SELECT 42").fetchall() == [(42,)]  # still open: its owner closes it
        with pytest.raises(duckdb.PermissionException):
            Selection(other, on=con)
        with Selection(mine, "path = 'f'", on=con) as sel:  # a user's clause, checked and probed as ever
            assert sel.count() == 1
    finally:
        con.close()
