"""pfs cp: real trees, the real Dask cluster (worker processes), moto S3, a worker SIGKILLed mid-copy."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import threading
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from distributed.diagnostics.plugin import WorkerPlugin

from dask_pfs import PfsError, copy, scan
from dask_pfs.manifests.manifest import prepare_output, write_marker
from operators.copy.tasks import TEMP_MARK, temp_name
from operators.parts import part_name, write_part
from operators.rows import row_from_stat, rows_to_table
from tests.conftest import make_balanced, make_tree, run_pfs, tree_digest

KiB = 1024
MiB = 1024 * KiB
SMALL = {"split_size": 64 * KiB, "chunk_files": 4, "chunk_bytes": 256 * KiB}
NON_UTF8 = b"caf\xe9-latin1.txt"


def build_source(root: Path) -> Path:
    """Small, empty, large (several ranges), sparse, hard-linked, symlinked and oddly named files."""
    make_tree(
        root,
        {
            "a/b/c.txt": "hello",
            "a/empty.bin": b"",
            "a/big.bin": os.urandom(300 * KiB + 7),  # 5 ranges of 64 KiB
            'with space/it\'s "quoted".txt': "q",
            "new\nline.txt": "n",
            "ünïcødé/日本.txt": "u" * 100,
            "emptydir": None,
            "links/rel": "->../a/b/c.txt",
            "links/dangling": "->/nonexistent/target",
        },
    )
    with open(os.path.join(os.fsencode(root), NON_UTF8), "wb") as f:
        f.write(b"latin-1 name")
    os.mkdir(os.path.join(os.fsencode(root), b"dir-\xff"))
    with open(os.path.join(os.fsencode(root), b"dir-\xff/x"), "wb") as f:
        f.write(b"x" * 10)
    os.link(root / "a/b/c.txt", root / "hard1")
    os.link(root / "a/b/c.txt", root / "a/hard2")
    for name, size in (("sparse-ranged", 40 * MiB), ("sparse-whole", 2 * MiB)):
        with open(root / name, "wb") as f:  # data, a big hole, data
            f.write(b"head" * 1000)
            f.seek(size - 4000)
            f.write(b"tail" * 1000)
    os.chmod(root / "a/b/c.txt", 0o640)
    os.chmod(root / "a/b", 0o750)
    os.utime(root / "a/big.bin", ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    os.utime(root / "a", ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    return root


def assert_same_tree(src: Path, dst: Path) -> None:
    assert tree_digest(dst) == tree_digest(src)
    for dirpath, dirnames, filenames in os.walk(os.fsencode(src)):
        for name in dirnames + filenames:
            s = os.lstat(os.path.join(dirpath, name))
            d = os.lstat(os.path.join(os.fsencode(dst), os.path.relpath(os.path.join(dirpath, name), os.fsencode(src))))
            assert stat.S_IFMT(d.st_mode) == stat.S_IFMT(s.st_mode), name
            if not stat.S_ISLNK(s.st_mode):
                assert stat.S_IMODE(d.st_mode) == stat.S_IMODE(s.st_mode), name
            assert d.st_mtime_ns == s.st_mtime_ns, name


def no_temp_files(root: Path) -> bool:
    return not [n for _, ds, fs in os.walk(os.fsencode(root)) for n in ds + fs if TEMP_MARK in n]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "phased"])
def test_local_copy_is_exact(tmp_path, dask_client, stream):
    """Streamed, the small files and symlinks are copied as the scan lists them; hard links, big and
    sparse ones (ranges), and directories wait for the whole manifest.  The copy is the same."""
    src = build_source(tmp_path / "src")
    result = copy(src, tmp_path / "dst", client=dask_client, stream=stream, **SMALL)
    dst = tmp_path / "dst"
    assert result.exit_code == 0, result.failure_samples
    # empty.bin, the quoted, newline, unicode and latin-1 names, dir-\xff/x and the two symlinks
    assert result.streamed == (8 if stream else 0)
    assert_same_tree(src, dst)
    assert no_temp_files(dst)
    c = result.counts
    assert c["hardlinks"] == 2 and c["symlinks"] == 2 and c["failed"] == 0
    # hard links stay one inode, symlinks stay symlinks (a dangling one too)
    ino = os.stat(dst / "a/b/c.txt").st_ino
    assert os.stat(dst / "hard1").st_ino == ino == os.stat(dst / "a/hard2").st_ino
    assert os.readlink(dst / "links/rel") == "../a/b/c.txt"
    assert os.readlink(dst / "links/dangling") == "/nonexistent/target"
    # sparse files keep their holes, whether copied in ranges or whole
    for name in ("sparse-ranged", "sparse-whole"):
        d = os.stat(dst / name)
        assert d.st_size == os.stat(src / name).st_size
        assert d.st_blocks * 512 < 1 * MiB, (name, d.st_blocks)
    assert os.path.exists(os.path.join(os.fsencode(dst), NON_UTF8))


def test_streamed_copy_starts_before_the_scan_ends(tmp_path, dask_client, monkeypatch):
    """The first files land while the walk is still listing: their change times come before the
    manifest's finish time (the scan took several tasks)."""
    import functools
    import sys

    from dask_pfs.runtime.submitter import WalkTuning

    # scan tasks of 500 entries: on an idle host one default task's budget walks this whole tree
    small = functools.partial(WalkTuning, max_entries=500, max_dirs_per_task=4)
    monkeypatch.setattr(sys.modules["dask_pfs.scan.engine"], "ScanTuning", small)  # the engine cp scans with
    src = tmp_path / "src"
    make_balanced(src, dirs=400, files_per_dir=25)
    result = copy(src, tmp_path / "dst", client=dask_client, manifest_out=tmp_path / "m")
    assert result.exit_code == 0 and result.streamed == 400 * 25
    marker = json.loads((tmp_path / "m" / "_manifest.json").read_text())
    assert marker["tasks"] > 1, marker
    finished = datetime.fromisoformat(marker["finished"]).timestamp() * 1e9
    first = min(os.lstat(p).st_ctime_ns for p in (tmp_path / "dst").rglob("*.dat"))
    assert first < finished
    assert tree_digest(tmp_path / "dst") == tree_digest(src)


def test_trailing_slash_and_existing_directory_semantics(tmp_path, dask_client):
    src = make_tree(tmp_path / "src", {"x/y.txt": "y", "z.txt": "z"})
    # dst missing: dst becomes the copy
    copy(src, tmp_path / "new", client=dask_client)
    assert tree_digest(tmp_path / "new") == tree_digest(src)
    # dst an existing directory: the copy goes to dst/src
    (tmp_path / "into").mkdir()
    copy(src, tmp_path / "into", client=dask_client)
    assert sorted(os.listdir(tmp_path / "into")) == ["src"]
    assert tree_digest(tmp_path / "into/src") == tree_digest(src)
    # src/ with a trailing slash: the contents go into dst
    (tmp_path / "contents").mkdir()
    copy(f"{src}/", tmp_path / "contents", client=dask_client)
    assert tree_digest(tmp_path / "contents") == tree_digest(src)
    # one file: to a new name, or into a directory
    copy(src / "z.txt", tmp_path / "renamed.txt", client=dask_client)
    assert (tmp_path / "renamed.txt").read_text() == "z"
    copy(src / "z.txt", tmp_path / "into", client=dask_client)
    assert (tmp_path / "into/z.txt").read_text() == "z"


def test_existing_files_policies_and_failure_log(tmp_path, dask_client):
    src = make_tree(tmp_path / "src", {"a.txt": "a" * 10, "d/b.txt": "b" * 10})
    dst = tmp_path / "dst"
    copy(f"{src}/", dst, client=dask_client)
    # a rerun finds identical files and skips them
    again = copy(f"{src}/", dst, client=dask_client)
    assert again.exit_code == 0 and again.counts["skipped"] == 2 and again.counts["files"] == 0
    # a file that differs is an error by default, listed in the Parquet failure log
    (dst / "d/b.txt").write_text("changed")
    log = tmp_path / "failures.parquet"
    failed = copy(f"{src}/", dst, client=dask_client, log=log)
    assert failed.exit_code == 1 and failed.failures == 1
    assert (dst / "d/b.txt").read_text() == "changed"
    assert pq.read_table(log).to_pylist()[0]["path"] == "d/b.txt"
    # --ignore-existing leaves the differing file alone; --update replaces what differs and skips the
    # rest; --overwrite rewrites all
    left = copy(f"{src}/", dst, client=dask_client, ignore_existing=True)
    assert left.exit_code == 0 and left.counts["files"] == 0 and left.counts["skipped"] == 2
    assert (dst / "d/b.txt").read_text() == "changed"
    fixed = copy(f"{src}/", dst, client=dask_client, update=True)
    assert fixed.exit_code == 0 and fixed.counts["files"] == 1 and fixed.counts["skipped"] == 1
    assert tree_digest(dst) == tree_digest(src)
    assert copy(f"{src}/", dst, client=dask_client, overwrite=True).counts["files"] == 2
    with pytest.raises(PfsError, match="exclude each other"):
        copy(src, dst, client=dask_client, overwrite=True, update=True)
    with pytest.raises(PfsError, match="exclude each other"):
        copy(src, dst, client=dask_client, update=True, ignore_existing=True)
    (dst / "a.txt").write_text("changed")  # the old keyword still means --update, with a warning
    with pytest.warns(DeprecationWarning, match="use update"):
        old_name = copy(f"{src}/", dst, client=dask_client, skip_existing=True)
    assert old_name.counts["files"] == 1 and tree_digest(dst) == tree_digest(src)


def test_temp_files_of_another_job_are_left_alone(tmp_path, dask_client):
    """A copy removes only temp files carrying its own job's token (issue 42): another job's may still be
    needed by that job, and a user's file may be named like one (tests/test_delete_identity.py)."""
    src = make_tree(tmp_path / "src", {"d/f.txt": "f"})
    other = temp_name(b"f.txt", "deadbeef").decode()
    dst = make_tree(tmp_path / "dst", {"d/" + other: "partial"})
    result = copy(f"{src}/", dst, client=dask_client)
    assert result.exit_code == 0
    assert sorted(os.listdir(dst / "d")) == sorted([other, "f.txt"])


def _hand_made_manifest(out: Path, root: Path, names: list[bytes]) -> None:
    prepare_output(str(out), False)
    s = os.stat(root)
    rows = [row_from_stat(n, os.stat(root / "ok.txt") if n == b"ok.txt" else s) for n in names]
    write_part(rows_to_table(rows), str(out), part_name("0000000", 0))
    write_marker(str(out), {"root": str(root), "counts": {}})


def test_refusals_leave_the_destination_untouched(tmp_path, dask_client):
    src = make_tree(tmp_path / "src", {"ok.txt": "ok"})
    bad = tmp_path / "bad-manifest"
    _hand_made_manifest(bad, src, [b"ok.txt", b"../escape.txt"])
    dst = tmp_path / "dst"
    with pytest.raises(PfsError, match="unsafe path"):
        copy(None, dst, manifest=bad, client=dask_client)
    assert not dst.exists()
    with pytest.raises(PfsError, match="inside the source"):
        copy(src, src / "sub", client=dask_client)
    assert sorted(os.listdir(src)) == ["ok.txt"]
    with pytest.raises(PfsError, match="no such file"):
        copy(tmp_path / "missing", dst, client=dask_client)
    assert not dst.exists()


def test_manifest_where_copies_selection_with_parent_directories(tmp_path, dask_client):
    src = make_tree(tmp_path / "src", {"keep/deep/big.bin": b"B" * 5000, "keep/small.txt": "s", "other/x.txt": "x"})
    m = tmp_path / "m"
    scan(src, m, dask_client)
    result = copy(None, tmp_path / "dst", manifest=m, where="size > 1000 AND type = 'file'", client=dask_client)
    assert result.exit_code == 0 and result.counts["files"] == 1
    assert tree_digest(tmp_path / "dst") == {
        b"keep": ("directory",),
        b"keep/deep": ("directory",),
        b"keep/deep/big.bin": tree_digest(src)[b"keep/deep/big.bin"],
    }
    assert os.stat(tmp_path / "dst/keep/deep").st_mtime_ns == os.stat(src / "keep/deep").st_mtime_ns


def test_local_to_s3_and_back_is_byte_identical(tmp_path, dask_client, s3_server, s3fs_fs):
    src = make_tree(
        tmp_path / "src",
        {
            "a/b/c.txt": "hello",
            "a/empty.bin": b"",
            "a/big.bin": os.urandom(200 * KiB),
            "ünïcødé dir/it's.txt": "u",
            "top.txt": "t" * 1000,
        },
    )
    s3fs_fs.makedirs("cp-bucket", exist_ok=True)
    up = copy(f"{src}/", "s3://cp-bucket/tree", client=dask_client, dst_storage_options=s3_server, **SMALL)
    assert up.exit_code == 0, up.failure_samples
    assert s3fs_fs.cat_file("cp-bucket/tree/a/b/c.txt") == b"hello"
    down = copy("s3://cp-bucket/tree/", tmp_path / "back", client=dask_client, storage_options=s3_server, **SMALL)
    assert down.exit_code == 0, down.failure_samples
    want = {k: v for k, v in tree_digest(src).items()}
    assert tree_digest(tmp_path / "back") == want
    assert no_temp_files(tmp_path / "back")


class KillOnRange(WorkerPlugin):
    """SIGKILL the worker process as soon as it starts executing a range task, once per marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish == "executing" and "pfs-cp-range" in str(key) and str(key).endswith("-2"):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.write(fd, f"{key} {os.getpid()}".encode())
            os.close(fd)
            threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGKILL)).start()


def test_worker_killed_during_ranged_copy(tmp_path):
    import cloudpickle
    from distributed import Client, LocalCluster

    import tests.test_cp as me

    cloudpickle.register_pickle_by_value(me)
    src = tmp_path / "src"
    src.mkdir()
    (src / "huge.bin").write_bytes(os.urandom(8 * MiB))
    make_balanced(src, dirs=4, files_per_dir=20)
    marker = tmp_path / "killed"
    dst = tmp_path / "dst"
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        pids = set(client.run(os.getpid).values())
        client.register_plugin(KillOnRange(str(marker)), name="kill-on-range")
        first = copy(f"{src}/", dst, client=client, split_size=512 * KiB)
        assert marker.exists(), "no worker was killed"
        assert int(marker.read_text().split()[1]) in pids
        assert first.ranges > 1  # the big file was copied in ranges: the kill hit one of them
        if first.exit_code == 0:  # the range reran on the other worker
            assert first.failures == 0 and first.counts["files"] == 4 * 20 + 1
            assert tree_digest(dst) == tree_digest(src)
        else:  # Dask gave up on the range: the big file, and only it, failed, and is not at its name
            assert first.exit_code == 1 and {p for p, _ in first.failure_samples} == {"huge.bin"}, first.failure_samples
            assert not (dst / "huge.bin").exists()
            again = copy(f"{src}/", dst, client=client, split_size=512 * KiB)
            assert again.exit_code == 0, again.failure_samples
    assert tree_digest(dst) == tree_digest(src)
    assert no_temp_files(dst)


def test_cli_copy_json_and_refusal(tmp_path):
    src = make_tree(tmp_path / "src", {"d/f.txt": "f" * 100, "g.txt": "g"})
    proc = run_pfs("cp", src, tmp_path / "dst", "--workers", "1", "--json", check=True)
    summary = json.loads(proc.stdout)
    assert summary["exit_code"] == 0 and summary["counts"]["files"] == 2
    assert tree_digest(tmp_path / "dst") == tree_digest(src)
    refused = run_pfs("cp", src, src / "inside", "--workers", "1")
    assert refused.returncode == 2 and "inside the source" in refused.stderr
    assert not (src / "inside").exists()


def test_cli_help_documents_semantics():
    from click.testing import CliRunner

    from dask_pfs.cli import cli

    out = CliRunner().invoke(cli, ["cp", "--help"]).output
    for text in ("trailing slash", "--update", "--ignore-existing", "--split-size", "Exit codes"):
        assert text in out


def test_inplace_copy_is_exact_without_temp_names(tmp_path, dask_client):
    src = make_tree(tmp_path / "src", {"d/a.txt": "a" * 100, "b.bin": os.urandom(200 * KiB)})
    result = copy(f"{src}/", tmp_path / "dst", client=dask_client, inplace=True, **SMALL)
    assert result.exit_code == 0 and result.counts["files"] == 2
    assert_same_tree(src, tmp_path / "dst")
    assert no_temp_files(tmp_path / "dst")


# ---------------------------------------------------------------- big files to S3: one multipart upload


MPU = {"split_size": 10 * MiB, "part_size": 5 * MiB, "chunk_files": 4}  # 2 parts per range task


def test_plan_parts_are_equal_numbered_and_within_s3_limits():
    from operators.copy.multipart import MAX_PARTS, MIN_PART, plan_parts

    cases = [(25 * MiB + 3, 10 * MiB, 5 * MiB), (257 * MiB, 256 * MiB, 8 * MiB), (26 * MiB, 6 * MiB, 8 * MiB)]
    for size, split, part in cases:
        ranges = plan_parts(size, split, part)
        flat = [p for r in ranges for p in r]
        assert [p.number for p in flat] == list(range(1, len(flat) + 1))
        assert [p.offset for p in flat] == [sum(q.length for q in flat[:i]) for i in range(len(flat))]
        assert sum(p.length for p in flat) == size
        assert len({p.length for p in flat[:-1]}) == 1 and flat[0].length >= MIN_PART
    assert [len(r) for r in plan_parts(25 * MiB + 3, 10 * MiB, 5 * MiB)] == [2, 2, 2]
    assert [len(r) for r in plan_parts(26 * MiB, 6 * MiB, 8 * MiB)] == [1] * 5  # under two parts: a range is one part
    huge = plan_parts(6 << 40, 256 * MiB)  # 6 TiB at 8 MiB parts would need 786,432 parts
    assert sum(len(r) for r in huge) <= MAX_PARTS


def _open_uploads(fs, bucket: str) -> list:
    return fs.list_multipart_uploads(bucket)


def test_big_file_to_s3_is_a_parallel_multipart_upload(tmp_path, dask_client, s3_server, s3fs_fs):
    big = os.urandom(25 * MiB + 3)  # 6 parts of 5 MiB (the last 3 bytes), 3 range tasks
    src = make_tree(tmp_path / "src", {"d/big.bin": big, "d/small.txt": "s", "top.txt": "t" * 100})
    s3fs_fs.makedirs("mpu-bucket", exist_ok=True)
    up = copy(f"{src}/", "s3://mpu-bucket/tree", client=dask_client, dst_storage_options=s3_server, **MPU)
    assert up.exit_code == 0, up.failure_samples
    assert up.ranges == 3 and up.counts["files"] == 3 and up.counts["bytes"] == len(big) + 101
    s3fs_fs.invalidate_cache()
    assert s3fs_fs.info("mpu-bucket/tree/d/big.bin")["ETag"].strip('"').endswith("-6")  # completed from 6 parts
    assert _open_uploads(s3fs_fs, "mpu-bucket") == []
    # S3 to S3 in the same store, another bucket: UploadPartCopy, the bytes never leave the store (within one
    # bucket it is one CopyObject: tests/test_objstore_cp.py)
    s3fs_fs.makedirs("mpu-bucket2", exist_ok=True)
    same = copy(
        "s3://mpu-bucket/tree/",
        "s3://mpu-bucket2/copy",
        client=dask_client,
        storage_options=s3_server,
        dst_storage_options=s3_server,
        **MPU,
    )
    assert same.exit_code == 0, same.failure_samples
    assert same.ranges == 3
    s3fs_fs.invalidate_cache()
    assert s3fs_fs.info("mpu-bucket2/copy/d/big.bin")["ETag"] == s3fs_fs.info("mpu-bucket/tree/d/big.bin")["ETag"]
    down = copy("s3://mpu-bucket2/copy/", tmp_path / "back", client=dask_client, storage_options=s3_server, **MPU)
    assert down.exit_code == 0, down.failure_samples
    assert tree_digest(tmp_path / "back") == tree_digest(src)  # sha256 of every file
    assert _open_uploads(s3fs_fs, "mpu-bucket") == _open_uploads(s3fs_fs, "mpu-bucket2") == []


def test_failed_multipart_upload_is_aborted_and_resume_reuses_an_open_one(
    tmp_path, dask_client, s3_server, s3fs_fs, monkeypatch
):
    from dask_pfs.runtime.journals import open_journal

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the journal of an S3 destination
    big = os.urandom(25 * MiB + 3)
    src = make_tree(tmp_path / "src", {"big.bin": big, "small.txt": "s"})
    m = tmp_path / "m"
    scan(src, m, dask_client)
    (src / "big.bin").write_bytes(big[: 7 * MiB])  # shrank after the scan: ranges read short and fail
    s3fs_fs.makedirs("mpu-fail", exist_ok=True)
    args = (None, "s3://mpu-fail/dst")
    kw = {"manifest": m, "client": dask_client, "dst_storage_options": s3_server, **MPU}
    failed = copy(*args, **kw)
    assert failed.exit_code == 1 and failed.failures == 1 and failed.ranges == 3
    assert "source changed" in failed.failure_samples[0][1]
    assert _open_uploads(s3fs_fs, "mpu-fail") == []  # the upload that held part 1 was aborted
    s3fs_fs.invalidate_cache()
    assert not s3fs_fs.exists("mpu-fail/dst/big.bin") and s3fs_fs.exists("mpu-fail/dst/small.txt")
    journal = open_journal(failed.journal)
    (mpu_id,) = [k for k in journal.done() if k.endswith(".mpu")]
    # a resumed run finds that upload gone and starts the file over (failing again: still short)
    again = copy(*args, resume=True, **kw)
    assert again.exit_code == 1 and again.resumed >= 1  # the small files' chunk was not copied again
    assert _open_uploads(s3fs_fs, "mpu-fail") == []
    # a driver killed mid-upload leaves its upload open: the resumed run goes on with it, reusing its parts
    mpu = s3fs_fs.call_s3("create_multipart_upload", Bucket="mpu-fail", Key="dst/big.bin")
    s3fs_fs.call_s3(
        "upload_part", Bucket="mpu-fail", Key="dst/big.bin", UploadId=mpu["UploadId"], PartNumber=1, Body=big[: 5 * MiB]
    )
    kept = open_journal(again.journal)
    kept.record(mpu_id, upload_id=mpu["UploadId"])
    kept.close()
    (src / "big.bin").write_bytes(big)
    done = copy(*args, resume=True, **kw)
    assert done.exit_code == 0, done.failure_samples
    assert done.journal is None  # finished: the journal is gone
    assert _open_uploads(s3fs_fs, "mpu-fail") == []  # the open upload was completed, not left behind
    s3fs_fs.invalidate_cache()
    assert hashlib.sha256(s3fs_fs.cat_file("mpu-fail/dst/big.bin")).digest() == hashlib.sha256(big).digest()


def test_big_files_split_only_where_parallel_streams_pay(tmp_path, dask_client):
    """Local disk to local disk copies a big file whole (one stream); network storage and object
    stores get byte ranges; an explicit --split-size always wins."""
    from dask_pfs.copy import NO_SPLIT, SPLIT_SIZE, default_split_size
    from operators.copy.tasks import CopySpec

    def spec(src_protocol: str, src: str, dst_protocol: str, dst: str) -> CopySpec:
        return CopySpec(src_protocol, src, dst_protocol, dst, token="t")

    assert default_split_size(spec("file", str(tmp_path), "file", str(tmp_path / "d"))) == NO_SPLIT
    assert default_split_size(spec("file", str(tmp_path), "s3", "bucket/d")) == SPLIT_SIZE
    assert default_split_size(spec("sftp", "/srv/x", "file", str(tmp_path))) == SPLIT_SIZE
    big = make_tree(tmp_path / "src", {"big.bin": os.urandom(3 * MiB + 5)})
    whole = copy(f"{big}/", tmp_path / "whole", client=dask_client, chunk_bytes=1 * MiB)
    assert whole.exit_code == 0 and whole.ranges == 0
    ranged = copy(f"{big}/", tmp_path / "ranged", client=dask_client, split_size=1 * MiB)
    assert ranged.exit_code == 0 and ranged.ranges == 4
    for d in ("whole", "ranged"):
        assert (tmp_path / d / "big.bin").read_bytes() == (big / "big.bin").read_bytes()


def test_source_directory_swapped_for_symlink_after_the_scan_is_not_followed(tmp_path):
    """Sources open relative to their parent, which is never reached through a symlink below the root."""
    from operators.copy.tasks import CopySpec, Entry, copy_files

    src, outside, dst = tmp_path / "src", tmp_path / "outside", tmp_path / "dst"
    make_tree(src, {"d/f": b"inside", "g": b"top"})
    make_tree(outside, {"f": b"secret"})
    (dst / "d").mkdir(parents=True)
    (src / "d" / "f").unlink()
    (src / "d").rmdir()
    (src / "d").symlink_to(outside)  # after the scan listed d/f as a file in a directory
    spec = CopySpec("file", str(src), "file", str(dst), token="t", check_existing=False)
    out = copy_files(spec, [Entry(b"d/f", "file", 6), Entry(b"g", "file", 3)])
    assert out.files == 1 and (dst / "g").read_bytes() == b"top"
    assert not (dst / "d" / "f").exists() and out.counts()["failed"] == 1


def test_a_big_files_ranges_mixing_journaled_and_found_in_place_count_it_skipped(tmp_path):
    """A resumed copy: the killed run journaled some ranges of a big file, then renamed it into place before
    it was killed; the resumed run's other ranges find it up to date ("skip").  Before, the finish task raised
    StopIteration looking for a failure among ("copied", "skip"): a failed file, exit 1, for a complete copy."""
    from operators.copy.tasks import CopySpec, Entry, finish_file

    make_tree(tmp_path / "src", {"big": b"x" * 10})
    spec = CopySpec("file", str(tmp_path / "src"), "file", str(tmp_path / "dst"), token="t")
    entry = Entry(b"big", "file", 10)
    done = finish_file(spec, entry, "copied", "skip", "copied")
    assert done.skipped == 1 and done.counts()["failed"] == 0
    failed = finish_file(spec, entry, "copied", "skip", "source changed")
    assert failed.counts()["failed"] == 1 and failed.skipped == 0
