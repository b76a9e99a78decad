"""pfs sync: real trees, the real Dask cluster, moto S3, DAC-dropped permission errors."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow.parquet as pq
import pytest

from dask_pfs.compare.sync import sync
from dask_pfs.copy import copy
from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import open_manifest
from dask_pfs.manifests.sql import connect
from dask_pfs.scan.api import scan
from tests.conftest import make_tree, run_pfs, tree_digest


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    """Sync keeps manifests and plans in the user's cache directory unless told: keep it in tmp."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def mirrored(tmp_path, dask_client, spec: dict):
    """SRC from ``spec`` and DST an exact copy of it (same mtimes), made with pfs cp."""
    src = make_tree(tmp_path / "src", spec)
    dst = tmp_path / "dst"
    assert copy(f"{src}/", dst, client=dask_client).exit_code == 0
    return src, dst


def test_local_sync_new_changed_type_changed_and_delete(tmp_path, dask_client):
    src, dst = mirrored(
        tmp_path,
        dask_client,
        {
            "same.txt": "s" * 10,
            "grow.txt": "g",
            "touch.txt": "t" * 5,
            "becomes-dir": "file",
            "becomes-file/inner/deep.txt": "d",
            "gone.txt": "x",
            "gone-dir/y.txt": "y",
            "link": "->same.txt",
        },
    )
    # changes at the source
    (src / "grow.txt").write_text("grown")
    (src / "touch.txt").write_text("T" * 5)  # same size, new mtime
    os.utime(src / "touch.txt", (1_700_000_000, 1_700_000_000))
    (src / "becomes-dir").unlink()
    make_tree(src, {"becomes-dir/child.txt": "c", "new/sub/n.txt": "n" * 100})
    shutil.rmtree(src / "becomes-file")
    (src / "becomes-file").write_text("now a file")
    (src / "gone.txt").unlink()
    shutil.rmtree(src / "gone-dir")
    (src / "link").unlink()
    os.symlink("grow.txt", src / "link")

    dry = sync(src, dst, client=dask_client, delete=True, dry_run=True)
    c = dry.counts
    assert (c["new"], c["changed"], c["type-changed"], c["extra"]) == (4, 3, 2, 5)
    # the extras below becomes-file (a directory replaced by a file) go first, whatever --delete says
    assert c["remove_first"] == 2 + 2
    plan = {r["path"]: r["action"] for r in pq.read_table(os.path.join(dry.plan, "plan.parquet")).to_pylist()}
    assert plan["touch.txt"] == "changed" and plan["same.txt"] == "unchanged" and plan["gone-dir/y.txt"] == "extra"
    assert plan["becomes-dir"] == "type-changed" and plan["becomes-dir/child.txt"] == "new"
    assert (dst / "gone.txt").exists() and (dst / "becomes-dir").is_file()  # a dry run touches nothing

    kept = sync(src, dst, client=dask_client)  # no --delete: extras stay
    assert kept.exit_code == 0, kept.failure_samples
    assert (dst / "gone.txt").exists() and (dst / "gone-dir/y.txt").exists()
    assert (dst / "becomes-file").read_text() == "now a file" and (dst / "becomes-dir/child.txt").read_text() == "c"
    assert (dst / "touch.txt").read_text() == "T" * 5 and os.readlink(dst / "link") == "grow.txt"

    done = sync(src, dst, client=dask_client, delete=True)
    assert done.exit_code == 0 and done.counts["deleted"] == 3
    assert tree_digest(dst) == tree_digest(src)
    for rel in ("touch.txt", "new/sub", "becomes-dir", "."):  # times of files and directories too
        assert os.stat(dst / rel).st_mtime_ns == os.stat(src / rel).st_mtime_ns, rel
    again = sync(src, dst, client=dask_client, delete=True)
    assert again.counts["new"] == again.counts["changed"] == again.counts["extra"] == 0 and again.copy is None


def test_manifests_given_and_dst_manifest_updated_from_plan(tmp_path, dask_client):
    src, dst = mirrored(tmp_path, dask_client, {f"d{i}/f{j}.txt": f"{i}{j}" for i in range(3) for j in range(4)})
    (src / "d1/f2.txt").write_text("changed!")
    (dst / "d2/f0.txt").unlink()
    (dst / "extra.txt").write_text("e")
    sm, dm = tmp_path / "sm", tmp_path / "dm"
    first = sync(src, dst, src_manifest=sm, dst_manifest=dm, client=dask_client, update_dst_manifest=True)
    # changed: d1/f2.txt, and d2 (its mtime moved when f0 went: directory times are synced too)
    assert first.exit_code == 0 and (first.counts["new"], first.counts["changed"]) == (1, 2)
    assert first.plan == f"{dm}.plan"

    def rows(m):
        sql = f"SELECT path, type, size, mtime FROM {open_manifest(m).relation_sql()} WHERE type <> 'directory'"
        return sorted(connect(open_manifest(m)).execute(sql).fetchall())

    scan(dst, tmp_path / "rescan", dask_client)
    assert rows(dm) == rows(tmp_path / "rescan")  # the updated manifest is what a rescan sees
    # the next sync reads both manifests as they are: nothing is walked, nothing to do
    second = sync(src, dst, src_manifest=sm, dst_manifest=dm, client=dask_client)
    assert second.counts["new"] == second.counts["changed"] == 0 and second.counts["extra"] == 1


def test_max_delete_refuses_and_changes_nothing(tmp_path, dask_client):
    src, dst = mirrored(tmp_path, dask_client, {"keep.txt": "k", "a.txt": "a", "b.txt": "b", "c.txt": "c"})
    for name in ("a.txt", "b.txt", "c.txt"):
        (src / name).unlink()
    (src / "new.txt").write_text("n")
    before = tree_digest(dst)
    with pytest.raises(PfsError, match="more than max_delete=2"):
        sync(src, dst, client=dask_client, delete=True, max_delete=2)
    with pytest.raises(PfsError, match="more than max_delete='50%'"):
        sync(src, dst, client=dask_client, delete=True, max_delete="50%")
    assert tree_digest(dst) == before
    proc = run_pfs("sync", src, dst, "--delete", "--max-delete", "1", "-y", "--workers", "1")
    assert proc.returncode == 2 and "max-delete" in proc.stderr
    assert tree_digest(dst) == before
    ok = sync(src, dst, client=dask_client, delete=True, max_delete="75%")
    assert ok.exit_code == 0 and tree_digest(dst) == tree_digest(src)


def test_delete_switched_off_after_source_permission_error(tmp_path, dask_client):
    src, dst = mirrored(tmp_path, dask_client, {"locked/precious.dat": "p", "ok/a.txt": "a", "gone.txt": "g"})
    (src / "gone.txt").unlink()
    (src / "ok/b.txt").write_text("b")
    os.chmod(src / "locked", 0o000)
    try:
        proc = run_pfs(
            "sync", src, dst, "--delete", "-y", "--json", "--workers", "1", drop_dac=True,
            env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
        )  # fmt: skip
    finally:
        os.chmod(src / "locked", 0o755)
    assert proc.returncode == 1, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["delete"] is False and "source scan reported 1 errors" in summary["delete_suppressed"]
    assert "--delete switched off" in proc.stderr
    assert (dst / "locked/precious.dat").read_text() == "p"  # unreadable at the source: not "deleted" there
    assert (dst / "gone.txt").exists()  # nothing deleted at all
    assert (dst / "ok/b.txt").read_text() == "b"  # what could be read was copied


def test_sync_local_to_s3(tmp_path, dask_client, s3_server, s3fs_fs):
    src = make_tree(tmp_path / "src", {"a.txt": "a", "d/b.txt": "b" * 50, "d/e/c.txt": "c", "old.txt": "o"})
    s3fs_fs.makedirs("sync-bucket", exist_ok=True)
    url = "s3://sync-bucket/mirror"
    first = sync(src, url, client=dask_client, dst_storage_options=s3_server)
    assert first.exit_code == 0 and first.counts["new"] == 6
    (src / "d/b.txt").write_text("B" * 60)  # changed (size: object stores keep no source mtime)
    (src / "old.txt").unlink()
    (src / "n.txt").write_text("new")
    second = sync(src, url, client=dask_client, dst_storage_options=s3_server, delete=True)
    assert second.exit_code == 0, second.failure_samples
    assert (second.counts["new"], second.counts["changed"], second.counts["deleted"]) == (1, 1, 1)
    s3fs_fs.invalidate_cache()
    keys = sorted(k.removeprefix("sync-bucket/mirror/") for k in s3fs_fs.find("sync-bucket/mirror"))
    assert keys == ["a.txt", "d/b.txt", "d/e/c.txt", "n.txt"]
    assert s3fs_fs.cat_file("sync-bucket/mirror/d/b.txt") == b"B" * 60


def test_resume_reuses_the_written_plan(tmp_path, dask_client):
    src, dst = mirrored(tmp_path, dask_client, {"a.txt": "a", "b.txt": "b"})
    (src / "a.txt").write_text("A changed")
    planned = sync(src, dst, client=dask_client, dry_run=True)  # as if killed right after planning
    (src / "late.txt").write_text("after the plan")
    resumed = sync(src, dst, client=dask_client, resume=True)
    assert resumed.plan == planned.plan and resumed.counts["changed"] == 1 and resumed.counts["new"] == 0
    assert (dst / "a.txt").read_text() == "A changed" and not (dst / "late.txt").exists()
    fresh = sync(src, dst, client=dask_client)  # without --resume: scanned and planned again
    assert fresh.counts["new"] == 1 and (dst / "late.txt").exists()


def test_checksum_mode_finds_same_size_same_mtime_change(tmp_path, dask_client):
    src, dst = mirrored(tmp_path, dask_client, {"a/x.bin": b"x" * 1000, "y.txt": "y"})
    s = os.stat(dst / "a/x.bin")
    (dst / "a/x.bin").write_bytes(b"X" + b"x" * 999)
    os.utime(dst / "a/x.bin", ns=(s.st_atime_ns, s.st_mtime_ns))
    assert sync(src, dst, client=dask_client, dry_run=True).counts["changed"] == 0  # size and mtime agree
    fixed = sync(src, dst, client=dask_client, checksum="xxh3")
    assert fixed.counts["changed"] == 1 and (dst / "a/x.bin").read_bytes() == b"x" * 1000
