"""``pfs rm``: live trees and manifests, every refusal, changed entries, dry runs, failures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dask_pfs import PfsError, remove, scan
from dask_pfs.manifests.manifest import write_marker
from operators.parts import part_name, write_part
from operators.rows import error_row, row_from_stat, rows_to_table
from tests.conftest import make_balanced, make_tree, run_pfs, tree_digest

SPEC = {
    "a/small.txt": "hello",
    "a/empty.dat": b"",
    "a/b/c/d/deep.bin": b"\0" * 5000,
    "a/b/junk.tmp": "junk",
    "keep.tmp": "t",
    "e/": None,
    b"\xff\xfename/f\xe9.bin": b"latin-1 bytes",
    "loop": "->loop",
    "dangling": "->nowhere/at/all",
}


def outside(tmp_path: Path) -> Path:
    """A directory beside the tree, reached from inside only through a symlink: it must survive."""
    return make_tree(tmp_path / "outside", {"precious/data.txt": "keep me", "more.txt": "x"})


def build(tmp_path: Path) -> tuple[Path, Path]:
    out = outside(tmp_path)
    tree = make_tree(tmp_path / "tree", {**SPEC, "to_outside": f"->{out}", "a/link_file": "->../keep.tmp"})
    return tree, out


def guard(message: str) -> bool:
    pytest.fail(f"a refused target reached confirmation: {message}")


def sizes(tree: Path) -> int:
    """What ``pfs rm`` reports as bytes: lstat sizes of every non-directory (a link's is its target's length)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(os.fsencode(tree)):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def test_remove_tree(tmp_path, dask_client):
    tree, out = build(tmp_path)
    entries = make_balanced(tree / "bal", dirs=12, files_per_dir=40)
    before_out, total = tree_digest(out), sizes(tree)
    result = remove(tree, client=dask_client)
    assert not os.path.lexists(tree)
    assert tree_digest(out) == before_out  # the link went, its target did not
    assert result.exit_code == 0 and result.failed == 0 and result.skipped_nonempty == 0
    assert result.removed_files == 6 + 4 + 480  # SPEC's files and symlinks, the balanced files
    # a, a/b, a/b/c, a/b/c/d, e, \xff\xfename; bal and its 24 directories; the root
    assert result.removed_dirs == 6 + 1 + (entries - 480) + 1
    assert result.bytes == total


def test_remove_single_link_and_missing(tmp_path, dask_client):
    tree, out = build(tmp_path)
    result = remove(tree / "to_outside", client=dask_client)
    assert result.removed_files == 1 and not os.path.lexists(tree / "to_outside")
    assert (out / "precious" / "data.txt").read_text() == "keep me"
    with pytest.raises(PfsError, match="no such file"):
        remove(tree / "nope", client=dask_client)


def test_missing_path_cli(tmp_path):
    proc = run_pfs("rm", tmp_path / "nope", "-y")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no such file or directory" in proc.stderr


def test_remove_filtered_manifest(tmp_path, dask_client):
    tree, out = build(tmp_path)
    scan(tree, tmp_path / "m", client=dask_client)
    before = tree_digest(tree)
    result = remove(manifest=tmp_path / "m", where="name LIKE '%.tmp'", client=dask_client)
    after = tree_digest(tree)
    gone = {p for p in before if p not in after}
    assert gone == {b"a/b/junk.tmp", b"keep.tmp"}
    assert result.removed_files == 2 and result.bytes == 5 and result.removed_dirs == 0
    assert (out / "precious" / "data.txt").exists()
    # directories selected with some of their entries left: left in place and counted, not failed
    result = remove(manifest=tmp_path / "m", where="type = 'directory' OR name = 'deep.bin'", client=dask_client)
    assert result.exit_code == 0 and result.failed == 0
    assert result.removed_dirs == 4  # a/b/c/d, a/b/c, a/b (junk.tmp went above) and e
    assert not (tree / "a" / "b").exists() and (tree / "a" / "small.txt").exists()
    assert result.skipped_nonempty == 2  # a (small.txt ...) and \xff\xfename (its file)
    log = pq.read_table(tmp_path / "m" / "_rm-failures.parquet").to_pylist()
    assert sorted(r["status"] for r in log) == ["nonempty", "nonempty"]
    assert {r["path_raw"] or r["path"].encode() for r in log} == {b"a", b"\xff\xfename"}


def craft(tmp_path: Path, root: Path, rels: list[bytes], errors: dict[bytes, str] | None = None) -> Path:
    """A hand-made manifest of ``rels`` under ``root`` (stat values borrowed from a real file)."""
    s = os.lstat(__file__)
    rows = [row_from_stat(rel, s) for rel in rels]
    rows += [error_row(rel, "file", err) for rel, err in (errors or {}).items()]
    out = tmp_path / "crafted"
    out.mkdir()
    write_part(rows_to_table(rows), str(out), part_name("0000000", 0))
    write_marker(str(out), {"root": str(root)})
    return out


@pytest.mark.parametrize("bad", ["dotdot", "absolute"])
def test_refuse_unsafe_manifest_rows(tmp_path, dask_client, bad):
    tree, out = build(tmp_path)
    victim = out / "more.txt"
    bad_rel = b"a/../../outside/more.txt" if bad == "dotdot" else os.fsencode(victim)
    m = craft(tmp_path, tree, [b"a/small.txt", b"keep.tmp", bad_rel])
    before, before_out = tree_digest(tree), tree_digest(out)
    with pytest.raises(PfsError, match="refusing"):
        remove(manifest=m, client=dask_client, ignore_changes=True, confirm=guard)
    assert tree_digest(tree) == before and tree_digest(out) == before_out


def test_refuse_symlinked_ancestor(tmp_path, dask_client):
    tree, _ = build(tmp_path)
    scan(tree, tmp_path / "m", client=dask_client)
    elsewhere = make_tree(tmp_path / "elsewhere", {"b/junk.tmp": "junk", "small.txt": "hello"})
    (tree / "a").rename(tmp_path / "old_a")
    (tree / "a").symlink_to(elsewhere)
    before, before_else = tree_digest(tree), tree_digest(elsewhere)
    with pytest.raises(PfsError, match="symlink"):
        remove(manifest=tmp_path / "m", client=dask_client, ignore_changes=True, confirm=guard)
    assert tree_digest(tree) == before and tree_digest(elsewhere) == before_else


@pytest.mark.parametrize("target", ["/", "/proc", "/dev/shm"])
def test_refuse_system_targets(dask_client, target):
    """The root and mount points are refused without --force (``guard`` fails the test before any removal)."""
    if not os.path.ismount(target):
        pytest.skip(f"{target} is not a mount point on this host")  # visible in the report, not a silent pass
    with pytest.raises(PfsError, match=r"refusing to remove .*: it is (the root directory|a mount point)"):
        remove(target, client=dask_client, confirm=guard)


def test_refuse_targets(tmp_path, dask_client, monkeypatch):
    tree, _ = build(tmp_path)
    before = tree_digest(tree)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # journals' keys, outside the tree
    monkeypatch.setenv("HOME", str(tree / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the scan's journal key: not in this "home"
    for target in (tree / "a", tree):  # the home directory, and a directory holding it
        with pytest.raises(PfsError, match="home directory"):
            remove(target, client=dask_client, confirm=guard)
    scan(tree, tmp_path / "m", client=dask_client)
    monkeypatch.setenv("HOME", str(tree))
    with pytest.raises(PfsError, match="home directory"):  # a whole manifest of the home directory
        remove(manifest=tmp_path / "m", client=dask_client, confirm=guard)
    assert tree_digest(tree) == before
    proc = run_pfs("rm", "/", "-y", "--dry-run")  # a dry run: should the refusal ever break, nothing goes
    assert proc.returncode == 2 and "refusing" in proc.stderr


def test_changed_entries_skipped(tmp_path, dask_client):
    tree, _ = build(tmp_path)
    m = tmp_path / "m"
    scan(tree, m, client=dask_client)
    (tree / "a" / "small.txt").write_text("hello, longer now")
    (tree / "keep.tmp").unlink()
    (tree / "keep.tmp").mkdir()  # a file replaced by a directory
    result = remove(manifest=m, client=dask_client)
    assert result.skipped_changed == 2 and result.failed == 0 and result.exit_code == 0
    assert (tree / "a" / "small.txt").read_text() == "hello, longer now" and (tree / "keep.tmp").is_dir()
    assert not (tree / "a" / "b").exists() and not (tree / "e").exists()
    log = {r["path"]: r for r in pq.read_table(m / "_rm-failures.parquet").to_pylist()}
    assert log["a/small.txt"]["status"] == "changed" and "size" in log["a/small.txt"]["error"]
    assert log["a"]["status"] == "nonempty"
    result = remove(manifest=m, client=dask_client, ignore_changes=True, where="name = 'small.txt'")
    assert result.removed_files == 1 and not (tree / "a" / "small.txt").exists()


def test_error_rows_skipped(tmp_path, dask_client):
    tree, _ = build(tmp_path)
    m = craft(tmp_path, tree, [b"a/empty.dat"], errors={b"a/small.txt": "PermissionError: denied"})
    result = remove(manifest=m, client=dask_client, ignore_changes=True)
    assert result.skipped_error == 1 and result.removed_files == 1
    assert (tree / "a" / "small.txt").exists() and not (tree / "a" / "empty.dat").exists()


def test_dry_run(tmp_path, dask_client):
    tree, _ = build(tmp_path)
    scan(tree, tmp_path / "m", client=dask_client)
    before = tree_digest(tree)
    r = remove(tree, client=dask_client, dry_run=True, show=5)
    assert r.removed_files == 10 and r.removed_dirs == 7 and len(r.would_remove) == 5 and r.log is None
    r = remove(manifest=tmp_path / "m", where="name LIKE '%.tmp'", client=dask_client, dry_run=True)
    assert r.removed_files == 2 and sorted(r.would_remove) == ["a/b/junk.tmp", "keep.tmp"]
    assert tree_digest(tree) == before
    assert not (tmp_path / "m" / "_rm-failures.parquet").exists()
    proc = run_pfs("rm", "--manifest", tmp_path / "m", "--where", "name LIKE '%.tmp'", "--dry-run", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert "would remove 2 entries and 0 directories (5 B)" in proc.stdout and "keep.tmp" in proc.stdout
    assert tree_digest(tree) == before


def test_permission_error_mid_tree(tmp_path):
    tree, out = build(tmp_path)
    make_tree(tree / "ro", {"x/1.dat": "1", "2.dat": "2"})
    os.chmod(tree / "ro", 0o555)
    log = tmp_path / "fail.parquet"
    try:
        env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}  # the journal a failed run keeps
        proc = run_pfs("rm", tree, "-y", "--workers", "1", "--json", "--log", log, drop_dac=True, env=env)
    finally:
        os.chmod(tree / "ro", 0o755)
    assert proc.returncode == 1, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["failed"] == 2 and summary["exit_code"] == 1
    rows = pq.read_table(log).to_pylist()
    # ro/x/1.dat goes (ro/x is writable); ro/2.dat and the empty ro/x cannot leave the read-only ro
    assert sorted(r["path"] for r in rows if r["status"] == "failed") == ["ro/2.dat", "ro/x"]
    assert sorted(r["path"] for r in rows if r["status"] == "nonempty") == ["", "ro"]
    assert sorted(os.listdir(tree)) == ["ro"]  # everything else went
    assert (out / "precious" / "data.txt").exists()


def test_remove_s3(tmp_path, dask_client, s3_server, s3fs_fs):
    fs = s3fs_fs
    fs.makedirs("rmb", exist_ok=True)
    for key in ("rmb/top/a/1.txt", "rmb/top/a/b/2.txt", "rmb/top/3.tmp", "rmb/keep/4.txt"):
        fs.pipe(key, b"data")
    result = remove("s3://rmb/top", client=dask_client, storage_options=s3_server)
    assert result.removed_files == 3 and result.failed == 0
    fs.invalidate_cache()
    assert fs.find("rmb") == ["rmb/keep/4.txt"]
    with pytest.raises(PfsError, match="bucket"):
        remove("s3://rmb", client=dask_client, storage_options=s3_server, confirm=guard)


def test_rm_a_tree_on_another_fsspec_store_dry_run_then_for_real():
    """A protocol other than S3/GCS/Azure goes through fsspec (operators.remove.fsspec.FsspecTreeRemover, on the
    shared ListingTreeRemover): a dry run deletes nothing, then the tree goes and its sibling stays."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for i in range(30):
        fs.pipe(f"/rmtree/t/d{i % 3}/f{i}", b"x")
    fs.pipe("/rmtree/keep.txt", b"k")
    try:
        assert remove("memory://rmtree/t", dry_run=True).exit_code == 0
        assert len(fs.find("/rmtree/t")) == 30
        assert remove("memory://rmtree/t").exit_code == 0
        assert fs.find("/rmtree") == ["/rmtree/keep.txt"]
    finally:
        fs.rm("/rmtree", recursive=True)
