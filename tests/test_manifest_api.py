"""``Manifest`` in a notebook: queries joinable with the user's own DuckDB data, aggregates, a one-line
repr and an HTML summary; a data tree opened as a manifest is called what it is."""

from __future__ import annotations

import duckdb
import pytest

from dask_pfs import PfsError, open_manifest, scan
from dask_pfs.errors import IncompleteManifestError, NotAManifestError

from .conftest import make_tree, run_pfs


@pytest.fixture
def manifest(tmp_path):
    src = make_tree(tmp_path / "src", {"a.txt": b"1", "b.txt": b"22", "d/c.csv": b"333"})
    scan(src, tmp_path / "m")
    return open_manifest(tmp_path / "m"), src


def test_query_on_the_users_connection_joins_their_data(manifest):
    m, _ = manifest
    con = duckdb.connect()
    con.execute("CREATE TABLE owners AS SELECT * FROM (VALUES ('a.txt', 'ann'), ('d/c.csv', 'bob')) t(path, who)")
    m.query("type = 'file'", select="path, size", con=con).create_view("files")
    joined = con.execute("SELECT who, size FROM files JOIN owners USING (path) ORDER BY who").fetchall()
    assert joined == [("ann", 1), ("bob", 3)]
    default = duckdb.default_connection()  # the one duckdb.sql() uses
    rel = m.query(select="path", con=default)  # noqa: F841  (read by name below: DuckDB's replacement scan)
    assert duckdb.sql("SELECT count(*) FROM rel").fetchall() == [(4,)]  # 3 files and d/
    with pytest.raises(PfsError, match=r"^where= refused"):  # the user's clause is still checked
        m.query("1=1; SELECT 1", con=con)


def test_aggregates(manifest):
    m, _ = manifest
    assert m.query(select="count(*), sum(size)", where="type = 'file'").fetchall() == [(3, 6)]
    per_type = dict(m.query(select="type, count(*)", group_by="type").fetchall())
    assert per_type["file"] == 3 and per_type["directory"] >= 1
    with pytest.raises(PfsError, match=r"^group_by= refused"):
        m.query(select="count(*)", group_by="1 HAVING count(*) > 0")


def test_repr_is_one_line_and_html_summarises(manifest):
    m, src = manifest
    text = repr(m)
    assert "\n" not in text and len(text) < 200 and text.startswith("<Manifest ") and str(src) in text, text
    html = m._repr_html_()
    for shown in (str(src), "schema_version", "entries", "bytes", "scanned"):
        assert shown in html, html


def test_a_data_tree_is_not_a_manifest(tmp_path, manifest):
    _, src = manifest
    for allow in (False, True):
        with pytest.raises(NotAManifestError, match="not a manifest"):
            open_manifest(src, allow_incomplete=allow)
    proc = run_pfs("query", src)
    assert proc.returncode == 2 and "not a manifest" in proc.stderr and proc.stdout == "", proc
    (tmp_path / "m" / "_manifest.json").unlink()  # parts without a marker: an interrupted scan, as before
    with pytest.raises(
        IncompleteManifestError, match=r"failed or was interrupted .*resume=True.*allow_incomplete=True"
    ):
        open_manifest(tmp_path / "m")
