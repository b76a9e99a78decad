"""Pruned walks: --exclude/--include (gitignore-style), --max-depth, --one-file-system on scan, cp, rm, sync.

"Pruned subtrees are never listed" is checked on the system calls of a real run (strace), and the
scan's own count of entries left out; the rest on real trees, a real cluster and moto S3.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from dask_pfs import PfsError, copy, open_manifest, remove, scan, sync
from operators.scan.prune import DROP, KEEP, STOP, Prune
from tests.conftest import PFS, REPO, have, make_tree, run_pfs

TREE = {
    "src/main.c": b"int main;",
    "src/util.c": b"util",
    "src/notes.tmp": b"tmp",
    "build/out.o": b"o" * 50,
    "build/deep/more.o": b"o",
    "data/2024/a.h5": b"a" * 10,
    "data/2024/b.txt": b"b",
    "data/2025/c.h5": b"c" * 20,
    "logs/keep.log": b"k",
    "logs/x.tmp": b"x",
}


def paths(manifest) -> set[str]:
    return set(open_manifest(manifest).to_pandas(columns=["path"])["path"])


def test_decisions_follow_gitignore_rules():
    p = Prune(exclude=("build/", "*.tmp", "!keep.tmp", "/data/2025"))
    assert p.decide("build", True) == DROP and p.decide("a/build", True) == DROP
    assert p.decide("build", False) == KEEP  # a file named build: the pattern is for directories
    assert p.decide("x/y.tmp", False) == DROP and p.decide("keep.tmp", False) == KEEP
    assert p.decide("data/2025", True) == DROP and p.decide("x/data/2025", True) == KEEP  # anchored
    inc = Prune(include=("data/2024/**", "*.c"))
    assert inc.decide("data", True) == KEEP and inc.decide("data/2024", True) == KEEP
    assert inc.decide("data/2025", True) == KEEP  # *.c may match anywhere: walked
    assert inc.decide("data/2024/b.txt", False) == KEEP and inc.decide("data/2025/c.h5", False) == DROP
    anchored = Prune(include=("data/2024/", "/src/*.c"))
    assert anchored.decide("logs", True) == DROP and anchored.decide("data/2025", True) == DROP
    assert anchored.decide("data/2024/sub", True) == KEEP and anchored.decide("data/2024/sub/x", False) == KEEP
    assert anchored.decide("src", True) == KEEP and anchored.decide("src/sub", True) == DROP
    depth = Prune(max_depth=2)
    assert depth.decide("a", True) == KEEP and depth.decide("a/b", True) == STOP and depth.decide("a/b", False) == KEEP
    dev = Prune(one_file_system=True, device=7)
    assert dev.decide("mnt", True, 8) == STOP and dev.decide("same", True, 7) == KEEP
    for bad in ({"include": ("!x",)}, {"max_depth": 0}):
        with pytest.raises(ValueError):
            Prune(**bad)


def test_scan_leaves_out_excluded_entries_and_counts_them(tmp_path, dask_client):
    make_tree(tmp_path / "t", TREE)
    res = scan(tmp_path / "t", tmp_path / "m", dask_client, prune=Prune(exclude=("build/", "*.tmp")))
    got = paths(tmp_path / "m")
    assert "build" not in got and not any(p.startswith("build/") or p.endswith(".tmp") for p in got)
    assert {"src/main.c", "data/2024/a.h5", "logs/keep.log"} <= got
    assert res.counts["pruned"] == 3  # build/ (with all below it, never listed) and two *.tmp files
    info = open_manifest(tmp_path / "m").info
    assert info["options"]["prune"]["exclude"] == ["build/", "*.tmp"]
    shown = run_pfs("info", tmp_path / "m", check=True).stdout
    assert "pruned    3 entries left out (exclude ['build/', '*.tmp'])" in shown


def test_include_and_max_depth(tmp_path, dask_client):
    make_tree(tmp_path / "t", TREE)
    scan(tmp_path / "t", tmp_path / "inc", dask_client, prune=Prune(include=("data/2024/**",)))
    assert paths(tmp_path / "inc") == {"data", "data/2024", "data/2024/a.h5", "data/2024/b.txt"}
    scan(tmp_path / "t", tmp_path / "h5", dask_client, prune=Prune(include=("*.h5",)))
    assert {p for p in paths(tmp_path / "h5") if "." in p} == {"data/2024/a.h5", "data/2025/c.h5"}
    scan(tmp_path / "t", tmp_path / "d1", dask_client, prune=Prune(max_depth=1))
    assert paths(tmp_path / "d1") == {"src", "build", "data", "logs"}  # rows of the top level, none below


def _strace(tmp_path: Path, *args: str) -> str:
    log = tmp_path / f"strace-{len(list(tmp_path.glob('strace-*')))}.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_DASHBOARD": "0", "PFS_SERVER": "off"}  # traced: its own process
    cmd = ["strace", "-f", "-qq", "-e", "trace=openat,getdents64", "-o", str(log), *PFS, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return log.read_text(errors="replace")


@pytest.mark.skipif(not have("strace"), reason="strace not installed (scripts/ensure-tools.sh)")
def test_pruned_subtrees_are_never_opened_or_listed(tmp_path):
    """Counted on the real system calls of `pfs scan`: no openat of anything in the excluded subtree."""
    root = tmp_path / "t"
    make_tree(root, {"keep/a": b"a"})
    for i in range(40):
        make_tree(root / "skipme" / f"inner{i:03d}", {"leaf": b"x"})
    common = ["--workers", "1", "--no-progress", "--json"]
    plain = _strace(tmp_path, "scan", str(root), "-o", str(tmp_path / "m1"), *common)
    pruned = _strace(tmp_path, "scan", str(root), "-o", str(tmp_path / "m2"), "--exclude", "skipme/", *common)
    opened = re.compile(r'openat\([^"]*"(skipme|inner\d{3})"')
    # the control run opens the subtree (41 directories; a task handed part of it re-opens skipme/ on its way down)
    assert len(opened.findall(plain)) >= 41
    assert opened.findall(pruned) == []
    # directories of the tree opened (relative to a parent's descriptor, or the root itself); the
    # interpreter's own imports list directories too, and differ between the runs (pathspec)
    tree_dir = re.compile(rf'openat\((\d+, "[^/"]*"|AT_FDCWD, "{re.escape(str(root))}[/"]).*O_DIRECTORY')
    dirs_listed = [len(tree_dir.findall(log)) for log in (plain, pruned)]
    assert dirs_listed[0] - dirs_listed[1] >= 41
    assert json.loads((tmp_path / "m2" / "_manifest.json").read_text())["counts"]["pruned"] == 1


def test_rm_tree_keeps_what_is_excluded_and_its_directories(tmp_path, dask_client):
    make_tree(tmp_path / "t", TREE)
    dry = remove(tmp_path / "t", prune=Prune(exclude=("*.h5", "logs/")), dry_run=True, client=dask_client)
    assert not any(p.endswith(".h5") or p.startswith("logs") for p in dry.would_remove)
    res = remove(tmp_path / "t", prune=Prune(exclude=("*.h5", "logs/")), client=dask_client)
    assert res.exit_code == 0 and res.skipped_nonempty == 0 and res.failed == 0
    left = {str(p.relative_to(tmp_path / "t")) for p in (tmp_path / "t").rglob("*")}
    assert left == {"data", "data/2024", "data/2024/a.h5", "data/2025", "data/2025/c.h5", "logs", "logs/keep.log",
                    "logs/x.tmp"}  # fmt: skip
    assert res.removed_files == 6 and res.removed_dirs == 3  # src, build, build/deep


def test_rm_max_depth_removes_only_the_top_files(tmp_path, dask_client):
    make_tree(tmp_path / "t", {"top.txt": b"1", "sub/inner.txt": b"2", "empty": None})
    res = remove(tmp_path / "t", prune=Prune(max_depth=1), client=dask_client)
    assert res.exit_code == 0 and res.skipped_nonempty == 0
    # directories at the limit are not entered, so rm leaves them (even an empty one: it is not listed)
    assert sorted(os.listdir(tmp_path / "t")) == ["empty", "sub"] and (tmp_path / "t" / "sub" / "inner.txt").exists()


def test_cp_and_cli_take_the_same_options(tmp_path, dask_client):
    make_tree(tmp_path / "t", TREE)
    res = copy(str(tmp_path / "t") + "/", tmp_path / "out", prune=Prune(include=("*.c", "data/2024/")),
               client=dask_client)  # fmt: skip
    assert res.exit_code == 0
    files = {str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert files == {"src/main.c", "src/util.c", "data/2024/a.h5", "data/2024/b.txt"}
    proc = run_pfs("cp", str(tmp_path / "t") + "/", tmp_path / "cli", "--exclude", "build/", "--exclude", "*.tmp",
                   "--max-depth", "2", "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    files = {str(p.relative_to(tmp_path / "cli")) for p in (tmp_path / "cli").rglob("*") if p.is_file()}
    assert files == {"src/main.c", "src/util.c", "logs/keep.log"}
    assert (tmp_path / "cli" / "data" / "2024").is_dir() and not any((tmp_path / "cli" / "data" / "2024").iterdir())
    bad = run_pfs("scan", tmp_path / "t", "-o", tmp_path / "x", "--include", "!no")
    assert bad.returncode == 2 and "cannot be negated" in bad.stderr
    with pytest.raises(PfsError, match="with manifest="):
        copy(None, tmp_path / "y", manifest=tmp_path / "m", prune=Prune(exclude=("x",)))


def test_sync_neither_copies_nor_deletes_excluded_entries(tmp_path, dask_client):
    make_tree(tmp_path / "s", TREE)
    make_tree(tmp_path / "d", {"cache/local.bin": b"mine", "stale.txt": b"old"})
    res = sync(tmp_path / "s", tmp_path / "d", delete=True, prune=Prune(exclude=("build/", "cache/")),
               client=dask_client)  # fmt: skip
    assert res.exit_code == 0
    assert (tmp_path / "d" / "cache" / "local.bin").read_bytes() == b"mine"  # excluded on DST: protected
    assert not (tmp_path / "d" / "stale.txt").exists() and not (tmp_path / "d" / "build").exists()
    assert (tmp_path / "d" / "src" / "main.c").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_one_file_system_keeps_the_mount_point_but_not_its_contents(tmp_path, dask_client):
    make_tree(tmp_path / "t", {"a.txt": b"a", "mnt": None})
    mnt = tmp_path / "t" / "mnt"
    if subprocess.run(["mount", "-t", "tmpfs", "none", str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (mnt / "inside.txt").write_bytes(b"other fs")
        scan(tmp_path / "t", tmp_path / "m", dask_client, prune=Prune(one_file_system=True))
        assert paths(tmp_path / "m") == {"a.txt", "mnt"}
        scan(tmp_path / "t", tmp_path / "all", dask_client)
        assert "mnt/inside.txt" in paths(tmp_path / "all")
        res = remove(tmp_path / "t", prune=Prune(one_file_system=True), client=dask_client, force=True)
        assert res.exit_code == 0 and (mnt / "inside.txt").exists() and not (tmp_path / "t" / "a.txt").exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_s3_scan_prunes_prefixes(tmp_path, dask_client, s3_server, s3fs_fs):
    s3fs_fs.makedirs("prune-bucket", exist_ok=True)
    for key in ("keep/a.txt", "keep/b.tmp", "skip/x/1.txt", "skip/y/2.txt"):
        s3fs_fs.pipe(f"prune-bucket/{key}", b"data")
    res = scan("s3://prune-bucket", tmp_path / "m", dask_client, storage_options=s3_server,
               prune=Prune(exclude=("skip/", "*.tmp")))  # fmt: skip
    assert paths(tmp_path / "m") == {"keep", "keep/a.txt"}
    assert res.counts["pruned"] == 2
