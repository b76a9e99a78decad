"""Forged markers and rows (issue 27, finding 3 and the smaller items): a manifest is bound to the
tree it was scanned from, and rows that contradict the tree are not acted on as they say."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dask_pfs import copy, scan
from dask_pfs.manifests.root import root_identity

from ..conftest import make_tree, tree_digest
from .conftest import cli, one_line_error

TREE = {"d/f": "hello", "d/e/g": "x", "h": "yy"}


def edit_marker(m: Path, **changes) -> None:
    path = m / "_manifest.json"
    info = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            info.pop(key, None)
        else:
            info[key] = value
    path.write_text(json.dumps(info))


def rewrite_part(m: Path, change) -> None:
    """Rewrite the manifest's one part with ``change(table)`` (page checksums on: only the rows lie)."""
    (part,) = sorted(m.glob("part-*.parquet"))
    table = change(pq.read_table(part))
    pq.write_table(table, part, write_page_checksum=True, compression="zstd")
    info = json.loads((m / "_manifest.json").read_text())
    info["counts"]["entries"] = table.num_rows
    (m / "_manifest.json").write_text(json.dumps(info))


@pytest.fixture
def scanned(tmp_path, dask_client):
    tree = make_tree(tmp_path / "t", TREE)
    scan(tree, tmp_path / "m", dask_client)
    return tree, tmp_path / "m"


def test_the_marker_records_the_roots_identity(scanned):
    tree, m = scanned
    info = json.loads((m / "_manifest.json").read_text())
    assert info["root_identity"] == root_identity(str(tree)) and info["root_identity"]["ino"] == os.stat(tree).st_ino


def test_rm_refuses_a_marker_pointed_at_a_copy(scanned, tmp_path, capsys, scheduler_address):
    """The issue's case: root edited to a ``cp -a`` copy; the copy must survive, exit 2, one line."""
    tree, m = scanned
    twin = tmp_path / "twin"
    shutil.copytree(tree, twin, symlinks=True, copy_function=shutil.copy2)
    edit_marker(m, root=str(twin))
    before = tree_digest(twin)
    code, _, err = cli(capsys, "rm", "--manifest", m, "-y", "--scheduler", scheduler_address)
    one_line_error(code, err)
    assert "not the tree manifest" in err and "--allow-other-root" in err
    assert tree_digest(twin) == before
    # told the copy is the target, each of its entries is still not the one the manifest saw (another inode:
    # the identity rule of every delete), so each is skipped as changed ...
    code, _, err = cli(capsys, "rm", "--manifest", m, "-y", "--scheduler", scheduler_address, "--allow-other-root")
    assert code == 0, err
    assert tree_digest(twin) == before
    # ... unless changes are ignored too: the documented way out
    args = ("--allow-other-root", "--ignore-changes")
    code, _, err = cli(capsys, "rm", "--manifest", m, "-y", "--scheduler", scheduler_address, *args)
    assert code == 0, err
    assert not (twin / "d" / "f").exists()


def test_cp_and_sync_refuse_another_tree_too(scanned, tmp_path, capsys, scheduler_address):
    tree, m = scanned
    twin = tmp_path / "twin"
    shutil.copytree(tree, twin)
    edit_marker(m, root=str(twin))
    code, _, err = cli(capsys, "cp", "--manifest", m, tmp_path / "out", "--scheduler", scheduler_address)
    one_line_error(code, err)
    assert not (tmp_path / "out").exists()
    code, _, err = cli(
        capsys, "sync", twin, tmp_path / "out2", "--src-manifest", m, "-y", "--scheduler", scheduler_address
    )
    one_line_error(code, err)
    assert not (tmp_path / "out2" / "d").exists()


def test_a_relative_root_is_refused(scanned, tmp_path, capsys, scheduler_address, monkeypatch):
    tree, m = scanned
    monkeypatch.chdir(tree.parent)
    edit_marker(m, root=tree.name)
    before = tree_digest(tree)
    code, _, err = cli(capsys, "rm", "--manifest", m, "-y", "--scheduler", scheduler_address, "--allow-other-root")
    one_line_error(code, err)
    assert "relative root" in err
    assert tree_digest(tree) == before


def test_an_older_marker_without_identity(scanned, tmp_path, capsys, scheduler_address, dask_client):
    """rm refuses it unless told; cp warns and copies."""
    tree, m = scanned
    edit_marker(m, root_identity=None)
    code, _, err = cli(capsys, "rm", "--manifest", m, "-y", "--scheduler", scheduler_address)
    one_line_error(code, err)
    assert "records no root identity" in err and (tree / "h").exists()
    with pytest.warns(UserWarning, match="records no root identity"):
        r = copy(None, tmp_path / "out", dask_client, manifest=m)
    assert r.exit_code == 0 and (tmp_path / "out" / "d" / "f").read_text() == "hello"


def test_a_forged_directory_row_for_a_file(scanned, tmp_path, dask_client):
    """A row that says directory where the tree holds a file: no directory of that name is made."""
    _tree, m = scanned
    rewrite_part(m, lambda t: t.set_column(t.schema.get_field_index("type"), "type", forged_type(t, "h")))
    r = copy(None, tmp_path / "out", dask_client, manifest=m)
    assert r.exit_code == 1 and any(path == "h" for path, _ in r.samples), r.samples
    assert not (tmp_path / "out" / "h").is_dir()


def forged_type(t: pa.Table, path: str) -> pa.Array:
    kinds = t.column("type").to_pylist()
    paths = t.column("path").to_pylist()
    forged = pa.array(["directory" if p == path else k for p, k in zip(paths, kinds, strict=True)])
    return pc.cast(forged, t.column("type").type)


def test_duplicated_rows_are_copied_and_counted_once(scanned, tmp_path, dask_client):
    tree, m = scanned
    rewrite_part(m, lambda t: pa.concat_tables([t, t]).sort_by("path"))
    assert pc.count_distinct(pq.read_table(next(m.glob("part-*.parquet"))).column("path")).as_py() * 2 == len(
        pq.read_table(next(m.glob("part-*.parquet")))
    )
    r = copy(None, tmp_path / "out", dask_client, manifest=m)
    assert r.exit_code == 0, r.samples
    assert r.counts["files"] == 3 and r.counts["dirs"] == 2, r.counts
    assert tree_digest(tmp_path / "out") == tree_digest(tree)
