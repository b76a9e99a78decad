"""Issue 42 B: a delete acts only on the entry the manifest saw.

Every removal of manifest rows (``rm --manifest``, ``sync --delete``, the Airflow remove operator,
which all run ``dask_pfs.remove``) compares the entry there now with the row by one identity rule
(the core's ``Expect::differs``: type, size, mtime, inode, ctime; never the per-host device), from
the ``lstat`` the removal makes anyway.  A manifest whose rows disagree with their own paths is
refused whole.  cp and sync remove only the temp files of their own job.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import operators._native as _native
from dask_pfs import PfsError, copy, remove, scan, sync
from operators.remove.backends import _changed
from tests.conftest import make_tree, tree_digest


def _replace_same_size_and_mtime(path) -> None:
    """What ``cp -p`` or ``rsync -a`` restoring a file does: another inode, same size and mtime."""
    old = os.lstat(path)
    other = f"{path}.new"
    with open(other, "wb") as f:
        f.write(b"Y" * old.st_size)
    os.utime(other, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(other, path)
    now = os.lstat(path)
    assert (now.st_size, now.st_mtime_ns) == (old.st_size, old.st_mtime_ns) and now.st_ino != old.st_ino


def test_rm_manifest_skips_a_file_replaced_by_one_of_the_same_size_and_mtime(tmp_path, dask_client):
    tree = make_tree(tmp_path / "t", {"a/f1": b"x" * 10, "a/f2": b"z" * 10})
    scan(tree, tmp_path / "m", client=dask_client)
    _replace_same_size_and_mtime(tree / "a" / "f1")
    result = remove(manifest=tmp_path / "m", where="type = 'file'", client=dask_client)
    assert (result.removed_files, result.skipped_changed) == (1, 1)
    assert (tree / "a" / "f1").read_bytes() == b"Y" * 10 and not (tree / "a" / "f2").exists()
    assert "replaced since the scan" in str(result.samples), result.samples


def test_rm_manifest_skips_a_file_whose_ctime_changed(tmp_path, dask_client):
    """A chmod back and forth keeps type, size, mtime and inode: only the ctime tells."""
    tree = make_tree(tmp_path / "t", {"f": b"data"})
    scan(tree, tmp_path / "m", client=dask_client)
    mode = os.lstat(tree / "f").st_mode
    os.chmod(tree / "f", 0o600)
    os.chmod(tree / "f", mode & 0o7777)
    result = remove(manifest=tmp_path / "m", where="type = 'file'", client=dask_client)
    assert (result.removed_files, result.skipped_changed) == (0, 1) and (tree / "f").exists()
    # --ignore-changes stays the documented way out
    result = remove(manifest=tmp_path / "m", where="type = 'file'", client=dask_client, ignore_changes=True)
    assert result.removed_files == 1 and not (tree / "f").exists()


def test_identity_rule_is_the_cores_and_never_compares_the_device():
    """The fsspec remover asks the core's rule; what a side does not know is not compared."""
    file = 0
    assert _native.rm_identity_changed((file, 1, 2, 3, 4000), (file, 1, 2, 3, 4999)) is None  # same microsecond
    assert "ctime" in _native.rm_identity_changed((file, 1, 2, 3, 4000), (file, 1, 2, 3, 5000))
    assert "inode" in _native.rm_identity_changed((file, 1, 2, 3, 4), (file, 1, 2, 9, 4))
    assert _native.rm_identity_changed((file, 1, 2, 3, 4), (file, 1, None, None, None)) is None  # an object store


def test_identity_rule_compares_an_objects_etag_where_the_row_has_one():
    """On a store size and last-modified second may match another version: the entity tag tells it (schema
    v3); quoting differences are not a change, and a row without a tag (v2) keeps the size/mtime rule."""
    row = ("k", None, "file", 1, 5_000_000_000, None, None, '"abc"')
    assert _changed(row, "file", 1, 5_000_000_000, None, None, '"abc"') is None
    assert _changed(row, "file", 1, 5_000_000_000, None, None, "abc") is None  # the same tag, unquoted
    why = _changed(row, "file", 1, 5_000_000_000, None, None, '"abd"')
    assert why is not None and "etag" in why and "replaced since the scan" in why
    assert "size" in str(_changed(row, "file", 2, 5_000_000_000, None, None, '"abc"'))  # a tag is not all there is
    assert _changed(row, "file", 1, 5_000_000_000, None, None, None) is None  # the store reported none
    v2 = ("k", None, "file", 1, 5_000_000_000, None, None, None)
    assert _changed(v2, "file", 1, 5_000_000_000, None, None, '"abd"') is None
    assert _changed(v2[:5], "file", 1, 5_000_000_000, None, None, '"abd"') is None  # rm FILE: a 5-value entry
    assert _changed(v2, "file", 1, 6_000_000_000, None, None, '"abd"') is not None


def _rewrite_column(manifest, column: str, old: str, new: str) -> None:
    """Damage: one row's ``column`` rewritten in its part (the marker and the path left alone)."""
    for part in sorted(manifest.glob("part-*.parquet")):
        table = pq.read_table(part)
        values = table.column(column).to_pylist()
        if old in values:
            values[values.index(old)] = new
            i = table.schema.get_field_index(column)
            field = table.schema.field(i)
            table = table.set_column(
                i, field, pa.array([None if v is None else str(v) for v in values]).cast(field.type)
            )
            pq.write_table(table, part)
            return
    raise AssertionError(f"no row with {column} {old!r}")


@pytest.mark.parametrize(
    ("column", "old", "new"), [("name", "keep.db", "x.tmp"), ("parent", "data", "tmp"), ("depth", 2, "1")]
)
def test_a_row_that_disagrees_with_its_path_refuses_the_manifest(tmp_path, dask_client, column, old, new):
    tree = make_tree(tmp_path / "t", {"data/keep.db": b"precious", "tmp/a.tmp": b"junk"})
    scan(tree, tmp_path / "m", client=dask_client)
    _rewrite_column(tmp_path / "m", column, old, new)
    where = {"name": "name LIKE '%.tmp'", "parent": "parent = 'tmp'", "depth": "depth = 1 AND type = 'file'"}[column]
    with pytest.raises(PfsError, match="damaged") as err:
        remove(manifest=tmp_path / "m", where=where, client=dask_client)
    assert "\n" not in str(err.value) and "data/keep.db" in str(err.value)
    assert (tree / "data" / "keep.db").read_bytes() == b"precious" and (tree / "tmp" / "a.tmp").exists()


def test_cp_leaves_a_users_file_named_like_a_temp_file(tmp_path, dask_client, monkeypatch):
    """cp removes only temp files carrying this job's token: ``.mine.pfs-tmp-old`` is a user's file."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = make_tree(tmp_path / "src", {"d/f": b"new"})
    dst = make_tree(tmp_path / "dst", {"d/.mine.pfs-tmp-old": b"mine", ".top.pfs-tmp-old": b"mine too"})
    result = copy(f"{src}/", dst, client=dask_client)
    assert result.exit_code == 0
    assert (dst / "d" / ".mine.pfs-tmp-old").read_bytes() == b"mine" and (dst / ".top.pfs-tmp-old").exists()
    assert (dst / "d" / "f").read_bytes() == b"new"


@pytest.mark.parametrize("name", [".x.pfs-tmp-old", ".pfs-journal-0123456789ab"])
def test_sync_copies_a_source_file_named_like_pfs_own_and_reaches_a_steady_state(
    tmp_path, dask_client, monkeypatch, name
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = make_tree(tmp_path / "src", {name: b"user data", "d/f": b"f"})
    dst = tmp_path / "dst"
    first = sync(src, dst, client=dask_client, delete=True)
    assert first.failed == 0 and (dst / name).read_bytes() == b"user data"
    again = sync(src, dst, client=dask_client, delete=True)
    assert again.failed == 0 and again.counts["new"] == again.counts["changed"] == 0, again.counts
    assert tree_digest(dst) == tree_digest(src)
