"""scan of S3 and Azure Blob on obstore (operators.scan.objstore): the rows the fsspec path gave, on real servers."""

from __future__ import annotations

import obstore
import pyarrow.dataset as ds
import pytest

from dask_pfs import scan
from operators.core.pool import get_pool
from operators.rows import RowBuffer
from operators.scan import objstore
from operators.scan.objstore import ObstoreLister
from operators.scan.remote import FsspecLister
from operators.scan.walk import Budget, walk
from operators.schema import ROW_COLUMNS
from operators.stores import store_of

ERROR, TYPE = ROW_COLUMNS.index("error"), ROW_COLUMNS.index("type")
ETAG = len(ROW_COLUMNS)  # a listed row carries its etag after its ROW_COLUMNS (operators.rows.Row)
KEYS = [
    "data/top.txt",
    "data/a/1.txt",
    "data/a/2.txt",
    "data/b/c/3.bin",
    "data/b/c/d/e/deep.txt",
    "data/z/4.txt",
    "data/wide/k/leaf.txt",
    *(f"data/wide/f{i:04d}.dat" for i in range(120)),  # more than two pages: a split prefix
    *(f"data/flat/q/g{i:04d}" for i in range(120)),  # a deep prefix of pages: steps, not a split
    "other/x.txt",  # outside the root
]


@pytest.fixture(autouse=True)
def small_pages(monkeypatch):
    monkeypatch.setattr(objstore, "PAGE", 50)  # pages of 50 keys: a few hundred keys make many
    monkeypatch.setattr(objstore, "FLAT_PAGES", 2)  # split after two of them (and a third)


def walked(lister) -> list[tuple]:
    rows: list[tuple] = []

    def emit(buf: RowBuffer) -> None:
        rows.extend(buf.rows)
        buf.rows = []

    _tally, frontier = walk(lister, [("", None)], get_pool(8), 16, Budget(max_entries=10**9, max_seconds=600), emit)
    assert frontier == []
    return sorted(rows, key=lambda r: r[0])


@pytest.fixture(scope="module")
def s3_tree(s3_server):
    store = store_of("s3", "objscan", s3_server)
    import s3fs

    s3fs.S3FileSystem(**s3_server, skip_instance_cache=True).mkdir("objscan")
    pool = get_pool(16)
    list(pool.map(lambda k: obstore.put(store, k, k.encode()), KEYS))
    return store


def test_rows_are_the_fsspec_rows_on_the_same_bucket(s3_server, s3_tree):
    new = walked(ObstoreLister("s3", "objscan/data", s3_server))
    old = walked(FsspecLister("s3", "objscan/data", s3_server, flat=True))
    assert (
        len(new)
        == len(old)
        == len(KEYS) - 1 + len({"a", "b", "b/c", "b/c/d", "b/c/d/e", "z", "wide", "wide/k", "flat", "flat/q"})
    )
    assert new == old  # the etags too (s3fs's ETag): schema v3
    etags = {r[0]: r[ETAG] for r in new if r[TYPE] == "file"}
    assert etags == {r[0]: obstore.head(s3_tree, f"data/{r[0]}")["e_tag"] for r in new if r[TYPE] == "file"}
    assert all(r[ETAG] is None for r in new if r[TYPE] == "directory")


def test_a_backend_without_etags_lists_none():
    """fsspec's memory file system has no entity tags: its rows' etag is null (as a POSIX tree's)."""
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe({"/h45e-etag/a.txt": b"a", "/h45e-etag/d/b.txt": b"bb"})
    rows = walked(FsspecLister("memory", "/h45e-etag"))
    assert {r[0] for r in rows} == {"a.txt", "d", "d/b.txt"}
    assert all(len(r) < len(ROW_COLUMNS) + 1 or r[ETAG] is None for r in rows)
    fs.rm("/h45e-etag", recursive=True)


def test_tree_mode_gives_the_same_rows(s3_server, s3_tree):
    flat = walked(ObstoreLister("s3", "objscan/data", s3_server))
    assert walked(ObstoreLister("s3", "objscan/data", s3_server, tree=True)) == flat


def test_a_big_prefix_is_split_and_a_deep_one_paged(s3_server, s3_tree, monkeypatch):
    levels: list[str] = []
    real = objstore.obstore.list_with_delimiter

    def counted(store, prefix=None):
        levels.append(prefix or "")
        return real(store, prefix)

    monkeypatch.setattr(objstore.obstore, "list_with_delimiter", counted)
    walked(ObstoreLister("s3", "objscan/data", s3_server))
    assert sorted(levels) == ["data", "data/flat"]  # the root and a prefix of pages with prefixes below it
    levels.clear()
    small = walked(ObstoreLister("s3", "objscan/data/b", s3_server))
    assert [r[0] for r in small] == ["c", "c/3.bin", "c/d", "c/d/e", "c/d/e/deep.txt"]
    assert levels == []  # a small tree: one flat listing, no delimiter


def test_a_failed_prefix_is_its_own_error(s3_server, s3_tree, monkeypatch):
    real = objstore.obstore.list

    def failing(store, prefix=None, **kw):
        if prefix == "data/a":
            raise OSError("injected listing failure")
        return real(store, prefix, **kw)

    monkeypatch.setattr(objstore.obstore, "list", failing)
    rows = {r[0]: r for r in walked(ObstoreLister("s3", "objscan/data", s3_server))}
    assert "injected listing failure" in rows["a"][ERROR]
    assert "a/1.txt" not in rows and rows["z/4.txt"][ERROR] is None and "wide/f0000.dat" in rows


def manifest_rows(path) -> dict[str, dict]:
    return {r["path"]: r for r in ds.dataset(str(path), format="parquet").to_table().to_pylist()}


def test_scan_s3_on_a_cluster_with_checksums_and_metadata(tmp_path, s3_server, s3fs_fs, dask_client):
    s3fs_fs.mkdir("objscan2")
    s3fs_fs.pipe_file("objscan2/d/x.txt", b"hello", Metadata={"k": "v"})
    s3fs_fs.pipe_file("objscan2/d/e/y.txt", b"world")
    res = scan(
        "s3://objscan2/d", tmp_path / "m", client=dask_client, storage_options=s3_server, checksum="xxh3", xattrs=True
    )
    got = manifest_rows(tmp_path / "m")
    assert set(got) == {"x.txt", "e", "e/y.txt"} and res.errors == 0
    assert got["x.txt"]["checksum"] == got["x.txt"]["checksum"] and got["x.txt"]["checksum"].startswith("xxh3:")
    assert [x["name"] for x in got["x.txt"]["xattrs"]] == ["user.k"]
    one = scan(
        "s3://objscan2/d/x.txt", tmp_path / "one", client=dask_client, storage_options=s3_server, checksum="xxh3"
    )
    assert one.counts["files"] == 1
    assert manifest_rows(tmp_path / "one")["x.txt"]["checksum"] == got["x.txt"]["checksum"]


def test_scan_azure_on_a_cluster(tmp_path, azurite, dask_client):
    store = store_of("az", azurite.container, azurite.options)
    keys = ["r/a/1.txt", "r/a/b/2.txt", "r/3.txt", *(f"r/many/{i:04d}" for i in range(1200))]
    list(get_pool(16).map(lambda k: obstore.put(store, k, b"x" * 7), keys))
    url = f"az://{azurite.container}/r"
    res = scan(url, tmp_path / "m", client=dask_client, storage_options=azurite.options, checksum="xxh3")
    got = manifest_rows(tmp_path / "m")
    assert res.errors == 0 and res.counts["files"] == len(keys)
    assert {p for p, r in got.items() if r["type"] == "directory"} == {"a", "a/b", "many"}
    assert got["a/b/2.txt"]["size"] == 7 and got["a/b/2.txt"]["mtime"] is not None


# key ranges: a prefix of many keys side by side, listed by concurrent ranges (objstore._Ranges) ----------


def test_boundaries_cut_above_the_last_key_and_below_the_end():
    alphabet = sorted(set("0123456789k"))
    assert objstore.boundaries("k0001999", None, alphabet, 0) == [f"k{c}" for c in "123456789k"]
    assert objstore.boundaries("k0002999", "k1", alphabet, 0) == [f"k0{c}" for c in "123456789k"]
    assert objstore.boundaries("k0002999", "k0003", alphabet, 0) == [f"k0002{c}" for c in "k"]
    many = objstore.boundaries("a", None, [chr(c) for c in range(48, 123)], 0, fanout=8)
    assert len(many) == 7 and many == sorted(many)
    # obstore refuses these as offsets: a trailing "/" and "." segments are never boundaries
    assert objstore.boundaries("p/", None, ["/", ".", "x"], 2) == ["p/x"]
    assert objstore.boundaries("zz", "zz0", ["z"], 0) == []  # nothing left to cut: paged


FLAT = [
    *(f"k{i:06d}" for i in range(0, 1200, 2)),  # numbered keys, no "/" at all
    *(f"k{i:06d}.tmp" for i in range(0, 300, 7)),  # keys that extend other keys
    "k000100",
    "k000100a",
    "k000100z/b/c.txt",  # implied directories from a range
    *(f"m-{c}{i}_x" for c in "ABXaz~é" for i in range(15)),  # characters the first pages never show
    "zz top",
    "~end",
]


@pytest.fixture(scope="module")
def flat_bucket(s3_server):
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server, skip_instance_cache=True)
    keys = sorted(set(FLAT))
    for bucket, pre in (("objflat", ""), ("objdeep", "deep/er/")):  # moto lists a bucket in O(its keys): two small
        fs.mkdir(bucket)
        store = store_of("s3", bucket, s3_server)
        list(get_pool(16).map(lambda k, s=store, p=pre: obstore.put(s, p + k, b"x" * (len(k) % 5)), keys))
    return keys


@pytest.mark.parametrize("root", ["objflat", "objdeep/deep/er"])
def test_a_flat_prefix_is_listed_by_key_ranges_with_the_unsplit_rows(s3_server, flat_bucket, root, monkeypatch):
    offsets: list[str | None] = []
    real = objstore.obstore.list

    def recorded(store, prefix=None, **kw):
        offsets.append(kw.get("offset"))
        return real(store, prefix, **kw)

    monkeypatch.setattr(objstore.obstore, "list", recorded)
    split = walked(ObstoreLister("s3", root, s3_server))
    ranges = [o for o in offsets if o is not None]
    monkeypatch.setattr(objstore.obstore, "list", real)
    old = walked(FsspecLister("s3", root, s3_server, flat=True))
    assert [r[0] for r in split] == [r[0] for r in old]  # each row once, none missing
    assert split == old
    assert len(ranges) >= 20 and len(set(ranges)) == len(ranges)  # many ranges, each listed from its own start
    files = {r[0] for r in split if r[ROW_COLUMNS.index("type")] == "file"}
    assert files == set(flat_bucket)


def test_a_failed_range_is_its_prefix_error_and_the_rest_stays(s3_server, flat_bucket, monkeypatch):
    real = objstore.obstore.list
    failed: list[str] = []

    def failing(store, prefix=None, **kw):
        offset = kw.get("offset")
        if offset is not None and not failed and offset > "deep/er/k000700":
            failed.append(offset)
            raise OSError("injected range failure")
        return real(store, prefix, **kw)

    monkeypatch.setattr(objstore.obstore, "list", failing)
    rows = walked(ObstoreLister("s3", "objdeep/deep", s3_server))
    paths = [r[0] for r in rows]
    assert len(paths) == len(set(paths)) and failed
    by = {r[0]: r for r in rows}
    assert "injected range failure" in by["er"][ERROR]  # the prefix listed by ranges carries the error
    assert by["er/k000000"][ERROR] is None and by["er/~end"][ERROR] is None


def test_scan_of_a_flat_bucket_on_a_cluster_has_every_key_once(tmp_path, s3_server, dask_client):
    import s3fs

    s3fs.S3FileSystem(**s3_server, skip_instance_cache=True).mkdir("objflat2")
    store = store_of("s3", "objflat2", s3_server)
    keys = [f"f{i:05d}" for i in range(2600)]  # over two pages of 1,000: the workers list it by ranges
    list(get_pool(32).map(lambda k: obstore.put(store, k, b""), keys))
    res = scan("s3://objflat2", tmp_path / "m", client=dask_client, storage_options=s3_server)
    got = ds.dataset(str(tmp_path / "m"), format="parquet").to_table(columns=["path"]).column("path").to_pylist()
    assert res.errors == 0 and sorted(got) == keys
