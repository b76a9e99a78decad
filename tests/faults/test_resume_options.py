"""Kill at a random point, then resume with *changed* options, then with the same ones (issue 34).

The process group of ``cp``, ``sync``, ``rm --manifest`` and ``scan`` is SIGKILLed a random while
into the job (seeded; ``PFS_FAULT_SEEDS`` for more).  A resume whose options would cut other
chunks or select other rows must be refused (exit 2, naming the option) and touch nothing, or,
where the killed run left nothing to resume, end exactly as an uninterrupted run with those
options.  The resume with the same options then ends exactly as an uninterrupted run.
"""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import time
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from dask_pfs import scan

from ..conftest import make_balanced, run_pfs, tree_digest
from .harness import kill_group, leftovers, manifest_paths, start_pfs, tree_paths
from .test_kill import SEEDS, rm_case, source

RATE = ["--max-ops-per-second", "300"]  # the killed run: ~2 s of work on these trees, room to land mid-job


def killed(args: list, started: str, seed: int, tmp_path: Path, env: dict) -> str:
    """Run ``pfs ARGS`` and SIGKILL its process group a random while after ``started`` appears."""
    rng = random.Random(1000 + seed)
    proc = start_pfs(*args, *RATE, env=env, log=tmp_path / f"killed-{seed}.log")
    deadline = time.monotonic() + 120
    while proc.poll() is None and not glob.glob(started) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rng.uniform(0, 1.5))
    when = "mid-job" if proc.poll() is None else f"after the end (rc {proc.returncode})"
    kill_group(proc)
    return when


def snapshot(*roots: Path) -> list[dict]:
    """Every entry below ``roots`` with its size and mtime: what a refused resume must leave alone."""
    out = []
    for root in roots:
        out.append(tree_digest(root) if root.exists() else {})
    return out


def resume_changed_then_same(args: list, changed: list, option: str, watch: list[Path], env: dict, when: str):
    """``--resume`` with ``changed`` options: refused naming ``option`` with nothing touched, or (nothing
    to resume) a complete run; then ``--resume`` with ``args``: must succeed."""
    before = snapshot(*watch)
    other = run_pfs(*changed, "--resume", env=env)
    if other.returncode == 2:
        assert option in other.stderr, f"{when}: {other.stderr}"
        assert "Traceback" not in other.stderr and len(other.stderr.strip().splitlines()) == 1, other.stderr
        assert snapshot(*watch) == before, f"{when}: a refused resume changed something"
        same = run_pfs(*args, "--resume", env=env)
        assert same.returncode == 0, f"{when}: {same.stdout}{same.stderr}"
        return "refused"
    assert other.returncode == 0, f"{when}: {other.stdout}{other.stderr}"
    return "ran"


@pytest.fixture
def env(tmp_path):
    return {"XDG_CACHE_HOME": str(tmp_path / "cache")}


@pytest.mark.parametrize("seed", SEEDS)
def test_cp_resume_with_other_chunks_is_refused_then_same_completes(tmp_path, env, seed):
    src, dst = source(tmp_path), tmp_path / "dst"
    args = ["cp", f"{src}/", dst, "--no-progress", "--chunk-files", "7", "--split-size", "512K"]
    when = killed(args, f"{dst}/.pfs-journal-*", seed, tmp_path, env)
    changed = ["cp", f"{src}/", dst, "--no-progress", "--split-size", "512K"]  # the default --chunk-files
    resume_changed_then_same(args, changed, "--chunk-files", [dst], env, when)
    assert tree_digest(dst) == tree_digest(src), when
    assert not leftovers(dst), when


@pytest.mark.parametrize("seed", SEEDS)
def test_sync_resume_with_other_chunks_is_refused_or_complete(tmp_path, env, seed):
    src, dst = source(tmp_path), tmp_path / "dst"
    shutil.copytree(src / "d000", dst / "d000", symlinks=True)
    make_balanced(dst / "extra", dirs=2, files_per_dir=10)
    args = ["sync", f"{src}/", dst, "--delete", "--no-progress", "--chunk-files", "7"]
    when = killed(args, f"{tmp_path}/cache/pfs/sync-*", seed, tmp_path, env)
    changed = ["sync", f"{src}/", dst, "--delete", "--no-progress", "--chunk-files", "300"]
    resume_changed_then_same(args, changed, "--chunk-files", [dst], env, when)
    assert tree_digest(dst) == tree_digest(src), when
    assert not leftovers(dst), when


@pytest.mark.parametrize("seed", SEEDS)
def test_rm_manifest_resume_with_other_options(tmp_path, env, seed, dask_client):
    """``rm`` cuts its chunks with the journal's ``--chunk-files`` (any value resumes correctly), and a
    ``--max-entries`` below what will still run is refused."""
    tree, m, before, doomed, args = rm_case(tmp_path, dask_client, chunk_files=9)
    when = killed(args, f"{m}/.pfs-journal-*", seed, tmp_path, env)
    capped = [*args, "--max-entries", "3"]
    resume_changed_then_same(args, capped, "--max-entries", [tree, m], env, when)
    assert not glob.glob(f"{m}/.pfs-journal-*"), when
    assert tree_paths(tree) == before - doomed, when
    # and a resume with other --chunk-files of a killed run removes exactly the same rows
    shutil.rmtree(tree)
    tree = source(tmp_path)
    scan(tree, m, client=dask_client, overwrite=True)
    when = killed(args, f"{m}/.pfs-journal-*", seed, tmp_path, env)
    other = run_pfs(*args[:-2], "--chunk-files", "50", "--resume", env=env)
    assert other.returncode == 0, f"{when}: {other.stderr}"
    assert tree_paths(tree) == before - doomed, when


@pytest.mark.parametrize("seed", SEEDS)
def test_scan_resume_with_another_checksum_is_refused_then_same_completes(tmp_path, env, seed):
    tree = source(tmp_path)
    m = tmp_path / "m"
    args = ["scan", tree, "-o", m, "--no-progress"]
    when = killed(args, f"{m}/.pfs-journal-*", seed, tmp_path, env)
    changed = [*args, "--checksum", "xxh3"]
    outcome = resume_changed_then_same(args, changed, "--checksum", [m], env, when)
    rows = manifest_paths(m)
    twice = [p for p, n in Counter(rows).items() if n > 1]
    assert not twice, f"{when}: rows twice: {twice[:5]}"
    assert set(rows) == tree_paths(tree), when
    assert (m / "_manifest.json").exists() and not glob.glob(f"{m}/.pfs-journal-*"), (when, outcome)
    # over the complete manifest, another --checksum is refused too (it was silently ignored)
    again = run_pfs(*changed, "--resume", env=env)
    assert again.returncode == (0 if outcome == "ran" else 2), again.stderr
    if outcome != "ran":
        assert "--checksum" in again.stderr and "entries/s" not in again.stdout


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("killed_with", [True, False], ids=["xattrs", "no-xattrs"])
def test_scan_resume_with_other_xattrs_is_refused_then_same_completes(tmp_path, env, seed, killed_with):
    """``--xattrs`` is bound by the scan's journal (and by a complete manifest's options): parts with
    and without attributes never mix in one manifest."""
    tree = source(tmp_path)
    files = [p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()]
    for p in files:
        os.setxattr(p, "user.h31d", p.name.encode())
    m = tmp_path / "m"
    plain = ["scan", tree, "-o", m, "--no-progress"]
    args, other = ([*plain, "--xattrs"], plain) if killed_with else (plain, [*plain, "--xattrs"])
    rng = random.Random(2000 + seed)
    # paced so the kill lands mid-scan: ~330 entries at 80/s outlast the wait below twice over
    proc = start_pfs(*args, "--max-ops-per-second", "80", env=env, log=tmp_path / f"killed-{seed}.log")
    deadline = time.monotonic() + 120
    while proc.poll() is None and not glob.glob(f"{m}/.pfs-journal-*") and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rng.uniform(0, 1.5))
    running = proc.poll() is None
    kill_group(proc)
    assert running and glob.glob(f"{m}/.pfs-journal-*/job.json"), "the kill missed the scan"
    assert not (m / "_manifest.json").exists()
    outcome = resume_changed_then_same(args, other, "--xattrs", [m], env, f"seed {seed}")
    assert outcome == "refused", "a resume with another --xattrs was accepted"
    rows = ds.dataset(str(m), format="parquet").to_table(columns=["path", "type", "xattrs"]).to_pylist()
    assert sorted(os.fsencode(r["path"]) for r in rows) == sorted(tree_paths(tree))
    with_attrs = [r["type"] == "file" and "user.h31d" in {x["name"] for x in r["xattrs"] or []} for r in rows]
    assert sum(with_attrs) == (len(files) if killed_with else 0), "parts with and without attributes mixed"
    assert json.loads((m / "_manifest.json").read_text())["options"]["xattrs"] is killed_with
    # over the complete manifest, a resume with the other setting is refused too, naming it
    again = run_pfs(*other, "--resume", env=env)
    assert again.returncode == 2 and "--xattrs" in again.stderr, again.stderr
