"""Manifests as frames (Dask, pandas, pyarrow, DuckDB) and frames as selections for copy/remove/verify.

Real trees, a real scan and real worker processes: the frame is filtered the way a notebook would,
and the engine acts on exactly the manifest rows it picks.
"""

from __future__ import annotations

import os
import subprocess
import sys

import dask.dataframe as dd
import pandas as pd
import pytest

from dask_pfs import PfsError, copy, open_manifest, remove, scan, verify
from tests.conftest import REPO, make_tree, tree_digest

BAD = b"bad-\xff.txt"


@pytest.fixture
def scanned(tmp_path, dask_client):
    """A tree with logs, data, a non-UTF-8 name and a symlink; its manifest."""
    src = make_tree(
        tmp_path / "src",
        {
            "logs/a.log": b"a" * 10,
            "logs/old/b.log": b"b" * 20,
            "data/x.csv": b"x" * 300,
            "data/y.csv": b"y" * 4000,
            "data/deep/z.csv": b"z" * 5000,
            b"data/" + BAD: b"raw bytes",
            "link": "->data/x.csv",
            "empty": None,
        },
    )
    scan(src, tmp_path / "m", dask_client)
    return src, open_manifest(tmp_path / "m")


def test_manifest_reads_as_arrow_pandas_dask_and_a_query(scanned):
    _, m = scanned
    table = m.to_arrow()
    assert table.num_rows == 12  # 6 files, 1 symlink, 5 directories
    assert set(table.column_names) >= {"path", "path_raw", "type", "size", "mtime"}
    big = m.to_arrow(where="type = 'file' AND size > 1000", columns=["path", "size"])
    assert sorted(big.column("path").to_pylist()) == ["data/deep/z.csv", "data/y.csv"]
    assert big.column_names == ["path", "size"]
    frame = m.to_pandas(where="name LIKE '%.log'")
    assert sorted(frame["path"]) == ["logs/a.log", "logs/old/b.log"]
    ddf = m.to_dask()
    assert isinstance(ddf, dd.DataFrame)
    assert len(ddf) == table.num_rows
    sizes = zip(table["size"].to_pylist(), table["type"].to_pylist(), strict=True)
    file_bytes = sum(s for s, t in sizes if t == "file")
    assert int(ddf[ddf.type == "file"]["size"].sum().compute()) == file_bytes == 10 + 20 + 300 + 4000 + 5000 + 9
    rel = m.query("type = 'directory'", select="path", order="path")
    assert [r[0] for r in rel.fetchall()] == ["data", "data/deep", "empty", "logs", "logs/old"]
    with pytest.raises(PfsError, match="query failed"):
        m.query("no_such_column > 1")


def test_dask_selection_copies_exactly_the_filtered_rows(scanned, tmp_path, dask_client):
    src, m = scanned
    ddf = m.to_dask()
    picked = ddf[(ddf.type == "file") & ddf.path.str.startswith("data/") & (ddf["size"] > 100)]
    res = copy(None, tmp_path / "out", manifest=m.url, selection=picked, client=dask_client)
    assert res.exit_code == 0
    got = tree_digest(tmp_path / "out")
    files = {p for p, v in got.items() if v[0] == "file"}
    assert files == {b"data/x.csv", b"data/y.csv", b"data/deep/z.csv"}
    assert got[b"data/y.csv"] == tree_digest(src)[b"data/y.csv"]
    # a selection AND a where: both must hold
    res = copy(None, tmp_path / "out2", manifest=m.url, selection=picked, where="size > 1000", client=dask_client)
    assert {p for p, v in tree_digest(tmp_path / "out2").items() if v[0] == "file"} == {
        b"data/y.csv",
        b"data/deep/z.csv",
    }


def test_pandas_selection_reaches_a_non_utf8_name_by_its_bytes(scanned, tmp_path, dask_client):
    src, m = scanned
    frame = m.to_pandas()
    picked = frame[frame["path_raw"].notna()]
    assert len(picked) == 1
    res = remove(manifest=m.url, selection=picked, client=dask_client)
    assert res.removed_files == 1 and res.exit_code == 0
    assert not os.path.lexists(os.path.join(os.fsencode(src), b"data", BAD))
    assert (src / "data" / "x.csv").exists()


def test_arrow_and_duckdb_selections_and_a_saved_one(scanned, tmp_path, dask_client):
    _, m = scanned
    logs = m.to_arrow(where="name LIKE '%.log'", columns=["path", "path_raw"])
    dry = remove(manifest=m.url, selection=logs, dry_run=True, client=dask_client)
    assert sorted(dry.would_remove) == ["logs/a.log", "logs/old/b.log"]
    rel = m.query("path = 'data/x.csv'", select="path, path_raw")
    res = copy(None, tmp_path / "one", manifest=m.url, selection=rel, client=dask_client)
    assert res.counts["files"] == 1 and (tmp_path / "one" / "data" / "x.csv").read_bytes() == b"x" * 300
    saved = tmp_path / "sel.parquet"
    m.to_dask(columns=["path", "path_raw", "type"]).query("type == 'file'").to_parquet(saved)
    assert saved.is_dir()
    res = copy(None, tmp_path / "saved", manifest=m.url, selection=saved, client=dask_client)
    assert res.counts["files"] == 6  # every file, none of the link or directories as rows of their own


def test_selection_only_picks_rows_it_cannot_add_paths(scanned, tmp_path, dask_client):
    _, m = scanned
    outside = pd.DataFrame({"path": ["../etc/passwd", "data/x.csv", "not/in/the/manifest"]})
    res = copy(None, tmp_path / "o", manifest=m.url, selection=outside, client=dask_client)
    assert res.counts["files"] == 1
    assert {p for p, v in tree_digest(tmp_path / "o").items() if v[0] == "file"} == {b"data/x.csv"}


def test_verify_with_a_selection_compares_only_those_rows(scanned, tmp_path, dask_client):
    src, m = scanned
    copy(None, tmp_path / "dst", manifest=m.url, client=dask_client)
    (tmp_path / "dst" / "logs" / "a.log").write_bytes(b"changed!!!")  # same size, other content
    only_data = m.to_pandas(where="starts_with(path, 'data/')", columns=["path", "path_raw"])
    res = verify(src, tmp_path / "dst", selection=only_data, client=dask_client)
    assert res.exit_code == 0 and res.counts["different"] == 0
    everything = verify(src, tmp_path / "dst", client=dask_client)
    assert everything.counts["different"] == 1


def test_bad_selections_are_refused_before_anything_runs(scanned, tmp_path, dask_client):
    src, m = scanned
    with pytest.raises(PfsError, match="no 'path' column"):
        remove(manifest=m.url, selection=pd.DataFrame({"name": ["a.log"]}), client=dask_client)
    with pytest.raises(PfsError, match="needs manifest="):
        remove(src, selection=m.to_pandas(), client=dask_client)
    with pytest.raises(PfsError, match="not a frame"):
        copy(None, tmp_path / "x", manifest=m.url, selection=["data/x.csv"], client=dask_client)
    with pytest.raises(PfsError, match="refused"):  # the user's clause beside a selection is checked as ever
        copy(None, tmp_path / "x", manifest=m.url, selection=m.to_pandas(), client=dask_client,
             where="path IN (SELECT content FROM read_text('/etc/passwd'))")  # fmt: skip
    with pytest.raises(PfsError, match="no such file"):
        copy(None, tmp_path / "x", manifest=m.url, selection=tmp_path / "missing.parquet", client=dask_client)
    assert (src / "logs" / "a.log").exists() and not (tmp_path / "x").exists()
    empty = remove(manifest=m.url, selection=m.to_pandas(where="false"), client=dask_client)
    assert empty.removed_files == 0 and (src / "logs" / "a.log").exists()


def test_notebook_example_selects_with_dask_and_copies(tmp_path, scheduler_address):
    src = make_tree(
        tmp_path / "src",
        {"a/big.h5": b"h" * 3000, "a/small.h5": b"h", "b/c/big.h5": b"h" * 5000, "b/big.txt": b"t" * 9000,
         ".git/objects/x.h5": b"g" * 9000},
    )  # fmt: skip
    env = {**os.environ, "PFS_SCHEDULER": scheduler_address, "PYTHONPATH": str(REPO)}
    script = REPO / "examples" / "notebook_select_copy.py"
    args = [str(src), str(tmp_path / "m"), str(tmp_path / "dst"), ".h5", "1000"]
    proc = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "selected 2 files" in proc.stdout and "verified: 2 the same, 0 differing" in proc.stdout
    assert {p for p, v in tree_digest(tmp_path / "dst").items() if v[0] == "file"} == {b"a/big.h5", b"b/c/big.h5"}
