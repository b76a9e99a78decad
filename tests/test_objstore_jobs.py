"""scan, cp both ways, sync, verify and rm on each real object store the tests start (S3: moto server; Azure
Blob: Azurite; GCS: fake-gcs-server), all through obstore (operators.stores): one test body per job,
parametrized over the stores.  GCS's server is fake-gcs-server with the XML API's writes (tests/conftest.py
``gcs_server``): every case runs on all three, seeded and checked through obstore as pfs reads them."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass

import obstore
import pyarrow.parquet as pq
import pytest

from dask_pfs import copy, open_manifest, remove, scan, sync, verify
from operators.copy.tasks import TEMP_MARK
from operators.ratelimit import Limits
from operators.remove.objstore import ObstoreRemover
from operators.remove.tasks import RemoveSpec
from operators.schema import MARKER_NAME
from operators.stores import store_of
from tests.conftest import azure_request, make_tree, run_pfs
from tests.test_objstore_cp import MiB, local_files, objects, put_all, store_objects
from tests.test_resume import killed_mid_copy

SMALL = {"split_size": 64 * 1024, "chunk_files": 4, "chunk_bytes": 256 * 1024}


@dataclass
class Bucket:
    """A new bucket (or container) on a real store: its protocol, name, options and CLI environment."""

    protocol: str
    bucket: str
    options: dict
    env: dict

    def url(self, key: str = "") -> str:
        return f"{self.protocol}://{self.bucket}/{key}".rstrip("/")

    @property
    def store(self):
        return store_of(self.protocol, self.bucket, self.options)

    def keys(self, prefix: str) -> dict[str, bytes]:
        """``{key below prefix: content}`` of every object below ``prefix``."""
        got = {}
        for page in obstore.list(self.store, prefix):
            for meta in page:
                got[meta["path"][len(prefix) + 1 :]] = bytes(obstore.get(self.store, meta["path"]).bytes())
        return got

    def put(self, key: str, data: bytes) -> None:
        obstore.put(self.store, key, data)


@pytest.fixture(params=["s3", "az", "gs"])
def bucket(request) -> Bucket:
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        name = f"b{uuid.uuid4().hex[:12]}"
        request.getfixturevalue("s3fs_fs").mkdir(name)
        endpoint = server["client_kwargs"]["endpoint_url"]
        env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        return Bucket("s3", name, server, env)
    if request.param == "gs":
        gcs = request.getfixturevalue("fake_gcs")
        return Bucket("gs", gcs.bucket, gcs.options, {"STORAGE_EMULATOR_HOST": gcs.endpoint})
    az = request.getfixturevalue("azurite")
    return Bucket("az", az.container, az.options, {"AZURE_STORAGE_CONNECTION_STRING": az.options["connection_string"]})


TREE = {"a.txt": "a", "d/b.txt": "b" * 50, "d/e/c.txt": "c", "old.txt": "o", "d/f/g/h.bin": "h" * 3000}


def files_of(spec: dict) -> dict[str, bytes]:
    return {k: v.encode() for k, v in spec.items()}


def up(bucket: Bucket, tmp_path, dask_client, prefix: str = "t") -> dict[str, bytes]:
    make_tree(tmp_path / "src", TREE)
    res = copy(f"{tmp_path / 'src'}/", bucket.url(prefix), client=dask_client, dst_storage_options=bucket.options,
               **SMALL)  # fmt: skip
    assert res.exit_code == 0, res.failure_samples
    return files_of(TREE)


def seed(bucket: Bucket, prefix: str = "t") -> dict[str, bytes]:
    """The objects of ``TREE`` below ``prefix``, written without pfs."""
    want = files_of(TREE)
    for key, data in want.items():
        bucket.put(f"{prefix}/{key}", data)
    return want


def test_cp_local_to_store(bucket, tmp_path, dask_client, request):
    want = up(bucket, tmp_path, dask_client)
    assert bucket.keys("t") == want


def test_scan_and_cp_to_local(bucket, tmp_path, dask_client):
    want = seed(bucket)
    out = tmp_path / "m.parquet"
    scanned = scan(bucket.url("t"), out, client=dask_client, storage_options=bucket.options)
    assert scanned.errors == 0
    rows = {r["path"]: r for r in pq.read_table(out).to_pylist()}
    assert {p for p, r in rows.items() if r["type"] == "file"} == set(want)
    assert {p for p, r in rows.items() if r["type"] == "directory"} >= {"d", "d/e", "d/f", "d/f/g"}
    assert all(rows[p]["size"] == len(want[p]) and rows[p]["mtime"] is not None for p in want)
    back = copy(bucket.url("t") + "/", tmp_path / "back", client=dask_client, storage_options=bucket.options)
    assert back.exit_code == 0, back.failure_samples
    assert {str(p.relative_to(tmp_path / "back")): p.read_bytes() for p in (tmp_path / "back").rglob("*")
            if p.is_file()} == want  # fmt: skip


def test_verify_against_the_store(bucket, tmp_path, dask_client):
    seed(bucket, "v")
    src = make_tree(tmp_path / "src", TREE)
    url = bucket.url("v")
    assert verify(src, url, client=dask_client, dst_storage_options=bucket.options).exit_code == 0
    bucket.put("v/d/b.txt", b"x" * 50)  # same size, other content: only the checksums tell
    bad = verify(src, url, client=dask_client, dst_storage_options=bucket.options)
    assert bad.exit_code != 0


def test_sync_and_verify(bucket, tmp_path, dask_client, request):
    src = make_tree(tmp_path / "src", TREE)
    url = bucket.url("mirror")
    first = sync(src, url, client=dask_client, dst_storage_options=bucket.options)
    assert first.exit_code == 0 and first.counts["new"] == len(TREE) + 4  # and d, d/e, d/f, d/f/g
    assert verify(src, url, client=dask_client, dst_storage_options=bucket.options).exit_code == 0
    (src / "d/b.txt").write_text("B" * 60)  # changed (size: object stores keep no source mtime)
    (src / "old.txt").unlink()
    (src / "n.txt").write_text("new")
    differs = verify(src, url, client=dask_client, dst_storage_options=bucket.options)
    assert differs.exit_code != 0
    second = sync(src, url, client=dask_client, dst_storage_options=bucket.options, delete=True)
    assert second.exit_code == 0, second.failure_samples
    assert (second.counts["new"], second.counts["changed"], second.counts["deleted"]) == (1, 1, 1)
    want = {**files_of(TREE), "d/b.txt": b"B" * 60, "n.txt": b"new"}
    del want["old.txt"]
    assert bucket.keys("mirror") == want
    assert verify(src, url, client=dask_client, dst_storage_options=bucket.options).exit_code == 0
    bucket.put("mirror/a.txt", b"x")  # same size, other content: only the checksums tell
    bad = verify(src, url, client=dask_client, dst_storage_options=bucket.options)
    assert bad.exit_code != 0


def test_rm_tree_dry_run_then_for_real(bucket, tmp_path, dask_client):
    want = seed(bucket)
    bucket.put("keep/x.txt", b"x")
    dry = remove(bucket.url("t"), client=dask_client, storage_options=bucket.options, dry_run=True)
    assert dry.removed_files == len(want) and dry.failed == 0
    assert bucket.keys("t") == want  # a dry run removes nothing
    done = remove(bucket.url("t"), client=dask_client, storage_options=bucket.options)
    assert done.removed_files == len(want) and done.failed == 0
    assert bucket.keys("t") == {} and bucket.keys("keep") == {"x.txt": b"x"}


def test_rm_manifest_keeps_what_was_replaced_since_the_scan(bucket, tmp_path, dask_client):
    want = seed(bucket)
    out = tmp_path / "m.parquet"
    assert scan(bucket.url("t"), out, client=dask_client, storage_options=bucket.options).errors == 0
    time.sleep(1.1)  # past the store's last-modified resolution (a second on S3)
    bucket.put("t/a.txt", b"A")  # another object under the same key, of the same size: its time tells
    bucket.put("t/new.txt", b"not in the manifest")
    obstore.delete(bucket.store, "t/old.txt")  # gone already: skipped, not failed
    dry = remove(manifest=out, client=dask_client, storage_options=bucket.options, dry_run=True)
    assert (dry.removed_files, dry.skipped_changed, dry.failed) == (len(want) - 2, 1, 0)
    assert len(bucket.keys("t")) == len(want)  # nothing went in the dry run
    done = remove(manifest=out, client=dask_client, storage_options=bucket.options)
    assert (done.removed_files, done.skipped_changed, done.skipped_missing, done.failed) == (len(want) - 2, 1, 1, 0)
    assert bucket.keys("t") == {"a.txt": b"A", "new.txt": b"not in the manifest"}


def test_scan_records_each_objects_etag_as_head_reports_it(bucket, tmp_path, dask_client):
    """Schema v3: a file row's ``etag`` is the store's entity tag, the one a HEAD gives (directories, implied
    by prefixes, have none); a root that is one object too."""
    want = seed(bucket, "e")
    assert scan(bucket.url("e"), tmp_path / "m", client=dask_client, storage_options=bucket.options).errors == 0
    rows = {r["path"]: r for r in pq.read_table(tmp_path / "m").to_pylist()}
    heads = {p: obstore.head(bucket.store, f"e/{p}")["e_tag"] for p in want}
    assert all(heads.values())
    assert {p: rows[p]["etag"] for p in want} == heads
    assert all(r["etag"] is None for r in rows.values() if r["type"] == "directory")
    one = scan(bucket.url("e/d/b.txt"), tmp_path / "one", client=dask_client, storage_options=bucket.options)
    assert one.errors == 0
    assert [r["etag"] for r in pq.read_table(tmp_path / "one").to_pylist()] == [heads["d/b.txt"]]


def _next_second_starts() -> None:
    """Sleep until just after a second begins (the store's clock is this host's)."""
    time.sleep(1 - time.time() % 1 + 0.01)


def test_rm_manifest_keeps_an_object_rewritten_in_the_same_second(bucket, tmp_path, dask_client):
    """An object rewritten after the scan with the same size within the same last-modified second (a store's
    times have seconds) looks like the scanned one by size and time: its entity tag tells, and rm keeps it."""
    for attempt in range(6):  # the scan and the rewrite must fit in the second the object was written in
        prefix = f"same{attempt}"
        _next_second_starts()
        bucket.put(f"{prefix}/x.txt", b"1")
        bucket.put(f"{prefix}/y.txt", b"2")
        first = obstore.head(bucket.store, f"{prefix}/x.txt")
        out = tmp_path / f"m{attempt}"
        assert scan(bucket.url(prefix), out, client=dask_client, storage_options=bucket.options).errors == 0
        bucket.put(f"{prefix}/x.txt", b"X")  # another object under the same key, of the same size
        now = obstore.head(bucket.store, f"{prefix}/x.txt")
        if int(now["last_modified"].timestamp()) == int(first["last_modified"].timestamp()):
            break
    else:
        pytest.fail("the rewrite never landed in the scanned object's second (a loaded host?)")
    assert now["size"] == first["size"] and now["e_tag"] != first["e_tag"]
    done = remove(manifest=out, client=dask_client, storage_options=bucket.options)
    assert (done.removed_files, done.skipped_changed, done.failed) == (1, 1, 0), done.samples
    assert "etag" in str(done.samples)
    assert bucket.keys(prefix) == {"x.txt": b"X"}  # the unchanged y.txt went


def test_sync_update_dst_manifest_gives_copied_objects_no_etag_of_the_source(bucket, tmp_path, dask_client):
    """A copied object's tag is the destination's own (Azure's never the source's): the updated destination
    manifest leaves it null, not the source row's, which a later delete would take for another version."""
    seed(bucket, "src")
    bucket.put("dst/a.txt", b"a")  # unchanged: keeps the destination's own row, its tag with it
    dm = tmp_path / "dm"
    done = sync(bucket.url("src"), bucket.url("dst"), client=dask_client, storage_options=bucket.options,
                dst_storage_options=bucket.options, dst_manifest=dm, update_dst_manifest=True)  # fmt: skip
    assert done.exit_code == 0 and done.counts["new"] >= len(TREE) - 1, done.failure_samples
    rows = {r["path"]: r for r in open_manifest(dm).to_arrow(where="type = 'file'").to_pylist()}
    assert set(rows) == set(TREE)
    assert rows["a.txt"]["etag"] == obstore.head(bucket.store, "dst/a.txt")["e_tag"]
    assert all(r["etag"] is None for p, r in rows.items() if p != "a.txt")


def _as_v2(manifest) -> None:
    """Rewrite a manifest as schema version 2 wrote it: no ``etag`` column."""
    for part in manifest.glob("part-*.parquet"):
        pq.write_table(pq.read_table(part).drop_columns(["etag"]), part)
    marker = manifest / MARKER_NAME
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "schema_version": 2}))


def test_a_v2_manifest_of_a_store_is_still_read_by_query_and_rm(bucket, tmp_path, dask_client):
    """Rows without a tag (schema v2) read with a null ``etag`` and are judged by size and time, as before."""
    want = seed(bucket, "two")
    out = tmp_path / "m"
    assert scan(bucket.url("two"), out, client=dask_client, storage_options=bucket.options).errors == 0
    _as_v2(out)
    assert "etag" not in pq.read_schema(next(out.glob("part-*.parquet"))).names
    m = open_manifest(out)
    assert m.info["schema_version"] == 2
    assert m.to_arrow(where="type = 'file' AND etag IS NULL").num_rows == len(want)
    q = run_pfs("query", out, "--where", "etag IS NULL AND path = 'a.txt'", check=True)
    assert "a.txt" in q.stdout
    time.sleep(1.1)  # past the store's last-modified second
    bucket.put("two/a.txt", b"A")  # same size, a later second: the time tells
    done = remove(manifest=out, client=dask_client, storage_options=bucket.options)
    assert (done.removed_files, done.skipped_changed, done.failed) == (len(want) - 1, 1, 0)
    assert bucket.keys("two") == {"a.txt": b"A"}


def test_rm_manifest_rows_on_obstore_missing_skipped_paths_kept_below_root(bucket):
    spec = RemoveSpec(bucket.protocol, f"{bucket.bucket}/p", bucket.options)
    remover = spec.remover()
    assert isinstance(remover, ObstoreRemover)
    bucket.put("p/1", b"1")
    bucket.put("p/2", b"22")
    entries = [("1", None, "file", 1, None), ("2", None, "file", 2, None), ("3", None, "file", 3, None)]
    counts = remover.unlink_chunk(entries)  # no mtime in these rows: only the size is compared
    assert (counts.removed_files, counts.bytes, counts.skipped_missing, counts.failed) == (2, 3, 1, 0)
    assert bucket.keys("p") == {}
    bucket.put("p/4", b"4")
    bucket.put("p/5", b"5")
    at = obstore.head(bucket.store, "p/4")["last_modified"]
    ns = int(at.timestamp()) * 1_000_000_000
    listed = ("4", None, "file", 1, ns + 789_000_000)  # the milliseconds a listing may carry (GCS's)
    older = ("5", None, "file", 1, ns - 5_000_000_000)  # a second that is not the object's
    counts = remover.unlink_chunk([listed, older])
    assert (counts.removed_files, counts.skipped_changed) == (1, 1)
    assert bucket.keys("p") == {"5": b"5"}
    with pytest.raises(ValueError):
        remover.locate(b"../escape")


def test_killed_copy_into_a_store_resumes_exactly(bucket, tmp_path, request):
    spec = {f"d{i % 4}/f{i:03d}.bin": os.urandom(4096 + i) for i in range(300)}
    src = make_tree(tmp_path / "src", spec)
    env = {**bucket.env, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # a store destination's journal is there
    args = ["cp", f"{src}/", bucket.url("resumed"), "--chunk-files", "2", "--split-size", "128K", "--workers", "1",
            "--json"]  # fmt: skip
    killed_mid_copy(args, tmp_path / "cache" / "pfs" / "journals", env)
    assert bucket.keys("resumed") != spec  # really interrupted
    resumed = run_pfs(*args, "--resume", env=env, check=True)
    summary = json.loads(resumed.stdout)
    assert summary["exit_code"] == 0 and summary["resumed"] > 0
    assert bucket.keys("resumed") == spec  # every object whole, no temporary ones left


def test_rm_errors_are_per_object(azurite, dask_client):
    """A blob under an infinite lease cannot be deleted: that blob fails with its own error, the rest go."""
    bucket = Bucket("az", azurite.container, azurite.options, {})
    for i in range(5):
        bucket.put(f"l/{i}.txt", b"x")
    leased = {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "-1"}
    assert azure_request(azurite.endpoint, f"{azurite.container}/l/2.txt", {"comp": "lease"}, leased) == 201
    done = remove(bucket.url("l"), client=dask_client, storage_options=bucket.options)
    assert (done.removed_files, done.failed) == (4, 1)
    assert [p for p, _ in done.samples] == ["2.txt"] and "lease" in done.samples[0][1].lower()
    assert bucket.keys("l") == {"2.txt": b"x"}


@pytest.mark.parametrize("by_manifest", [False, True])
def test_rm_keeps_the_job_wide_ops_cap(bucket, tmp_path, dask_client, by_manifest):
    """60 deletes at 20 ops/s take about 3 s, listing or manifest (a cap only slows: a lower bound)."""
    for i in range(60):
        bucket.put(f"c/{i:02d}", b"x")
    target: dict = {"url": bucket.url("c")}
    if by_manifest:
        assert scan(bucket.url("c"), tmp_path / "m", client=dask_client, storage_options=bucket.options).errors == 0
        target = {"manifest": tmp_path / "m"}
    done = remove(**target, client=dask_client, storage_options=bucket.options, limits=Limits(ops_per_second=20))
    assert (done.removed_files, done.failed) == (60, 0)
    assert done.seconds >= 2.0, done.seconds
    assert bucket.keys("c") == {}


def test_rm_cli_leaves_what_exclude_names(bucket, tmp_path):
    seed(bucket)
    proc = run_pfs("rm", bucket.url("t"), "--exclude", "*.bin", "--exclude", "/d/e/", "--json", env=bucket.env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["removed_files"] == 3
    assert bucket.keys("t") == {"d/e/c.txt": b"c", "d/f/g/h.bin": b"h" * 3000}


def test_cp_store_to_local_ranged_and_store_to_store(bucket, tmp_path, dask_client):
    """From the store: small objects whole, a big one as ranged GETs into one temp file; then store to store in the
    same store (a file over obstore's 8 MiB part: a multipart upload on each store, GCS's included)."""
    objs = objects()
    objs["big/multi.bin"] = os.urandom(9 * MiB + 7)
    put_all(bucket.store, "src", objs)
    res = copy(bucket.url("src") + "/", tmp_path / "dst", client=dask_client, storage_options=bucket.options, **SMALL)
    assert res.exit_code == 0, res.failure_samples
    assert local_files(tmp_path / "dst") == objs
    again = copy(bucket.url("src") + "/", bucket.url("again"), client=dask_client, storage_options=bucket.options,
                 dst_storage_options=bucket.options)  # fmt: skip
    assert again.exit_code == 0, again.failure_samples
    assert store_objects(bucket.store, "again") == objs


def test_killed_copy_from_a_store_resumes_exactly(bucket, tmp_path):
    objs = {f"d{i % 8}/f{i:04d}": b"%d" % i * 300 for i in range(400)}
    objs["big.bin"] = os.urandom(4 * MiB)
    put_all(bucket.store, "src", objs)
    dst = tmp_path / "dst"
    args = ["cp", bucket.url("src") + "/", str(dst), "--chunk-files", "2", "--split-size", "128K", "--workers", "1",
            "--json"]  # fmt: skip
    killed_mid_copy(args, dst, bucket.env)
    assert local_files(dst) != objs  # really interrupted
    summary = json.loads(run_pfs(*args, "--resume", env=bucket.env, check=True).stdout)
    assert summary["exit_code"] == 0 and summary["resumed"] > 0
    got = local_files(dst)
    assert not [k for k in got if os.fsdecode(TEMP_MARK) in k or ".pfs-journal-" in k]
    assert got == objs
