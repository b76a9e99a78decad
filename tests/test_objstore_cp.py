"""cp from S3 (moto) and Azure Blob (Azurite) to a local tree on obstore (operators.copy.sources.ObstoreSource):
whole objects streamed, big ones as ranged GETs into the one temp file of the destination, resume after a kill."""

from __future__ import annotations

import hashlib
import json
import os

import obstore
import pytest

from dask_pfs import copy
from operators.copy.sources import ObstoreSource, source_of
from operators.copy.spec import CopySpec
from operators.copy.tasks import TEMP_MARK
from operators.core.pool import get_pool
from operators.stores import store_of
from tests.conftest import run_pfs
from tests.test_resume import killed_mid_copy

KiB, MiB = 1024, 1 << 20
SMALL = {"split_size": 64 * KiB, "chunk_files": 4, "chunk_bytes": 256 * KiB}


def objects() -> dict[str, bytes]:
    """Small objects in nested prefixes and one big enough for several ranges."""
    got = {f"p{i % 3}/q{i % 2}/o{i:03d}.bin": hashlib.sha256(b"%d" % i).digest() * (i + 1) for i in range(40)}
    got["top.txt"] = b"top"
    got["empty"] = b""
    got["big/blob.bin"] = os.urandom(MiB + 12345)
    return got


def put_all(store, prefix: str, objs: dict[str, bytes]) -> None:
    list(get_pool(16).map(lambda kv: obstore.put(store, f"{prefix}/{kv[0]}", kv[1]), objs.items()))


def local_files(root) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, root)] = f.read()
    return out


def test_an_object_store_source_is_read_on_obstore(s3_server):
    spec = CopySpec("s3", "b/x", "file", "/tmp/y", token="t", src_options=s3_server)
    assert isinstance(source_of(spec), ObstoreSource)


def test_cp_s3_to_local_whole_and_ranged(tmp_path, s3_server, s3fs_fs, dask_client):
    s3fs_fs.mkdir("objcp")
    objs = objects()
    put_all(store_of("s3", "objcp", s3_server), "src", objs)
    res = copy("s3://objcp/src/", tmp_path / "dst", client=dask_client, storage_options=s3_server, **SMALL)
    assert res.exit_code == 0, res.failure_samples
    assert local_files(tmp_path / "dst") == objs
    assert not [n for _, ds, fs in os.walk(os.fsencode(tmp_path / "dst")) for n in ds + fs if TEMP_MARK in n]


def test_cp_azure_to_local_whole_and_ranged(tmp_path, azurite, dask_client):
    objs = objects()
    put_all(store_of("az", azurite.container, azurite.options), "src", objs)
    url = f"az://{azurite.container}/src/"
    res = copy(url, tmp_path / "dst", client=dask_client, storage_options=azurite.options, **SMALL)
    assert res.exit_code == 0, res.failure_samples
    assert local_files(tmp_path / "dst") == objs


def test_killed_copy_from_azure_resumes_exactly(tmp_path, azurite):
    objs = {f"d{i % 8}/f{i:04d}": b"%d" % i * 300 for i in range(400)}
    objs["big.bin"] = os.urandom(4 * MiB)
    put_all(store_of("az", azurite.container, azurite.options), "src", objs)
    dst = tmp_path / "dst"
    env = {"AZURE_STORAGE_CONNECTION_STRING": azurite.options["connection_string"]}
    args = ["cp", f"az://{azurite.container}/src/", str(dst), "--chunk-files", "2", "--split-size", "128K",
            "--workers", "1", "--json"]  # fmt: skip
    killed_mid_copy(args, dst, env)
    assert local_files(dst) != objs  # really interrupted
    resumed = run_pfs(*args, "--resume", env=env, check=True)
    summary = json.loads(resumed.stdout)
    assert summary["exit_code"] == 0 and summary["resumed"] > 0
    got = local_files(dst)
    assert not [k for k in got if os.fsdecode(TEMP_MARK) in k or ".pfs-journal-" in k]
    assert got == objs


@pytest.mark.parametrize("missing", ["az://{c}/nothing/", "az://{c}-nope/x/"])
def test_a_missing_source_is_one_error_line(tmp_path, azurite, missing):
    env = {"AZURE_STORAGE_CONNECTION_STRING": azurite.options["connection_string"]}
    proc = run_pfs("cp", missing.format(c=azurite.container), tmp_path / "d", env=env)
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0 and "pfs: error" in proc.stderr, proc.stderr


def local_tree(root) -> dict[str, bytes]:
    objs = objects()
    objs["big/blob.bin"] = os.urandom(9 * MiB + 7)  # over obstore's part: a multipart upload
    for rel, data in objs.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)) or root, exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
    return objs


def store_objects(store, prefix: str) -> dict[str, bytes]:
    keys = [m["path"] for page in obstore.list(store, prefix) for m in page]
    return {k[len(prefix) + 1 :]: bytes(obstore.get(store, k).bytes()) for k in keys}


def test_an_object_store_destination_is_written_on_obstore(azurite):
    from operators.copy.obstore_destination import ObstoreDestination
    from operators.copy.tasks import destination_of

    spec = CopySpec("file", "/tmp/x", "az", f"{azurite.container}/y", token="t", dst_options=azurite.options)
    assert isinstance(destination_of(spec), ObstoreDestination)


def test_cp_local_to_azure_and_store_to_store(tmp_path, azurite, dask_client):
    objs = local_tree(tmp_path / "src")
    url = f"az://{azurite.container}/up"
    res = copy(f"{tmp_path / 'src'}/", url, client=dask_client, dst_storage_options=azurite.options, **SMALL)
    assert res.exit_code == 0, res.failure_samples
    store = store_of("az", azurite.container, azurite.options)
    assert store_objects(store, "up") == objs
    again = copy(f"{url}/", f"az://{azurite.container}/again", client=dask_client,
                 storage_options=azurite.options, dst_storage_options=azurite.options)  # fmt: skip
    assert again.exit_code == 0, again.failure_samples
    assert store_objects(store, "again") == objs


def test_cp_local_to_s3_on_obstore(tmp_path, s3_server, s3fs_fs, dask_client):
    objs = local_tree(tmp_path / "src")
    s3fs_fs.mkdir("objup")
    res = copy(f"{tmp_path / 'src'}/", "s3://objup/t", client=dask_client, dst_storage_options=s3_server, **SMALL)
    assert res.exit_code == 0, res.failure_samples
    assert store_objects(store_of("s3", "objup", s3_server), "t") == objs


def open_uploads(s3fs_fs, bucket: str) -> list[str]:
    """The multipart uploads the store still holds open in ``bucket`` (S3 ListMultipartUploads)."""
    return [u["Key"] for u in s3fs_fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads", [])]


def test_cp_s3_to_s3_in_one_bucket_is_copied_by_the_store_and_across_buckets_by_bytes(
    tmp_path, s3_server, s3fs_fs, dask_client, monkeypatch
):
    from operators.copy.obstore_destination import ObstoreDestination
    from operators.copy.spec import Entry
    from operators.copy.tasks import destination_of

    for b in ("objss", "objss2"):
        s3fs_fs.mkdir(b)
    objs = objects()
    objs["mid.bin"] = os.urandom(9 * MiB + 1)  # over a part, under the split: one object, not ranges
    store = store_of("s3", "objss", s3_server)
    put_all(store, "src", objs)
    same = copy("s3://objss/src/", "s3://objss/dst", client=dask_client, storage_options=s3_server,
                dst_storage_options=s3_server, split_size=64 * MiB)  # fmt: skip
    assert same.exit_code == 0, same.failure_samples
    assert store_objects(store, "dst") == objs
    other = copy("s3://objss/src/", "s3://objss2/dst", client=dask_client, storage_options=s3_server,
                 dst_storage_options=s3_server, split_size=64 * MiB)  # fmt: skip
    assert other.exit_code == 0, other.failure_samples
    assert store_objects(store_of("s3", "objss2", s3_server), "dst") == objs
    assert open_uploads(s3fs_fs, "objss") == open_uploads(s3fs_fs, "objss2") == []
    ranged = copy("s3://objss/src/", "s3://objss/big", client=dask_client, storage_options=s3_server,
                  dst_storage_options=s3_server, split_size=MiB)  # fmt: skip
    assert ranged.exit_code == 0 and ranged.ranges == 0  # over the split size, still one CopyObject each
    assert store_objects(store, "big") == objs
    # in one bucket no byte comes through pfs: the store copies (CopyObject); the object appears whole
    spec = CopySpec("s3", "objss/src", "s3", "objss/one", token="t", src_options=s3_server, dst_options=s3_server)
    dst = destination_of(spec)
    assert isinstance(dst, ObstoreDestination)

    def no_get(*a, **kw):
        raise AssertionError("a GET in a same-bucket copy")

    monkeypatch.setattr(obstore, "get", no_get)
    dst.write_file(source_of(spec), Entry(b"mid.bin", "file", len(objs["mid.bin"])))
    monkeypatch.undo()
    assert bytes(obstore.get(store, "one/mid.bin").bytes()) == objs["mid.bin"]


@pytest.mark.parametrize("split", ["1G", "16M"], ids=["whole-object-upload", "range-task-upload"])
def test_ctrl_c_mid_upload_leaves_no_open_multipart_upload(tmp_path, s3_server, s3fs_fs, split):
    """Ctrl-C (SIGINT to the process group) while big files go up as multipart uploads: pfs alone says so
    ("pfs: interrupted", exit 130), each object is there whole or not at all, and the store holds no open
    upload (obstore's whole-object uploads run to their end or abort; the range tasks' uploads are aborted
    by the driver)."""
    import signal
    import subprocess
    import time

    from tests.conftest import PFS, REPO

    bucket = f"objint{split.lower()}"
    s3fs_fs.mkdir(bucket)
    src = tmp_path / "src"
    src.mkdir()
    sizes = {f"f{i}.bin": 40 * MiB + i for i in range(3)}
    for name, size in sizes.items():
        (src / name).write_bytes(os.urandom(size))
    endpoint = s3_server["client_kwargs"]["endpoint_url"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "AWS_ENDPOINT_URL": endpoint,
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}  # fmt: skip
    cmd = [*PFS, "cp", f"{src}/", f"s3://{bucket}/d", "--split-size", split, "--workers", "1"]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not open_uploads(s3fs_fs, bucket) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None and open_uploads(s3fs_fs, bucket), "no upload open to interrupt"
    os.killpg(proc.pid, signal.SIGINT)
    stopped = time.monotonic()
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130
    # the driver stops the job: no embedded worker takes the Ctrl-C (a forkserver's worker did: its nanny's
    # KeyboardInterrupt traceback, its task broken and waited for 30 s; clusters/embedded_worker.py)
    assert err.decode().strip().splitlines()[-1:] == ["pfs: interrupted"], err.decode()[-3000:]
    assert b"Traceback" not in err and b"still running" not in err, err.decode()[-3000:]
    assert time.monotonic() - stopped < 25
    assert open_uploads(s3fs_fs, bucket) == []
    s3fs_fs.invalidate_cache()
    there = {p.rsplit("/", 1)[1]: s3fs_fs.info(p)["size"] for p in s3fs_fs.find(f"{bucket}/d")}
    assert all(there[name] == sizes[name] for name in there)  # whole or absent


def test_existing_objects_are_known_from_one_listing_per_prefix_not_a_head_each(tmp_path, s3_server, s3fs_fs, caplog):
    import logging

    from operators.copy.spec import Entry
    from operators.copy.tasks import copy_files

    s3fs_fs.mkdir("objexist")
    store = store_of("s3", "objexist", s3_server)
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    names = [f"d/f{i:02d}" for i in range(30)]
    for i, n in enumerate(names):
        (src / n).write_bytes(b"x" * i)
    obstore.put(store, "up/d/f01", b"x")  # the same size: skipped (--update)
    obstore.put(store, "up/d/f02", b"other size")  # differs: kept, an error
    entries = [Entry(n.encode(), "file", i) for i, n in enumerate(names)]
    spec = CopySpec("file", str(src), "s3", "objexist/up", token="t", dst_options=s3_server, on_exist="skip")
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        out = copy_files(spec, entries)
    heads = [r for r in caplog.records if '"HEAD /objexist/' in r.getMessage()]
    lists = [r for r in caplog.records if '"GET /objexist?' in r.getMessage()]
    assert heads == [] and len(lists) == 1  # one listing of up/d for the chunk's 30 files
    assert out.files == 29 and out.skipped == 1 and out.failures == []  # --update rewrites the differing one
    assert bytes(obstore.get(store, "up/d/f02").bytes()) == b"xx" and bytes(obstore.get(store, "up/d/f29").bytes())
    strict = CopySpec("file", str(src), "s3", "objexist/up", token="t2", dst_options=s3_server)
    obstore.put(store, "up/d/f03", b"differs")
    again = copy_files(strict, entries[3:4] + entries[1:2])
    assert len(again.failures) == 1 and "exists and differs" in again.failures[0][1] and again.skipped == 1
