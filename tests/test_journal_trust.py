"""Issue 34: state pfs reads back is untrusted input.  Every reproduction of the issue, kept: a forged
``job.json`` token or manifest, a forged ``selection.parquet``, a forged scan frontier, a symlink as a
lock file, a watcher manifest row with ``..``; each is refused with exit 2 and one line, and nothing
outside the job (a victim directory) is touched.  Also: a resume with other chunk options is refused
(the 8,000-file data loss), ``sync --resume`` reports what it resumed, and the scan's rate."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_pfs import tree_changes
from dask_pfs import PfsError, copy, scan
from dask_pfs.manifests.manifest import Selection, open_manifest
from dask_pfs.runtime.journals import ident, journal_dir, open_journal
from dask_pfs.runtime.locking import lock_key, lock_path
from dask_pfs.urls import resolve
from tests.conftest import make_balanced, make_tree, run_pfs, tree_digest


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """The journal key and cache journals of this test (the subprocesses inherit it)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PFS_LOCK_DIR", str(tmp_path / "locks"))


def victim(tmp_path: Path) -> tuple[Path, dict]:
    """A directory nothing may touch, and its state (names, sizes, mtimes)."""
    v = make_tree(tmp_path / "victim", {"decoy": "keep me", "sub/x": "x", "sub/y": "y"})
    return v, state(v)


def state(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            s = os.lstat(p)
            out[os.path.relpath(p, root)] = (s.st_size, s.st_mtime_ns, s.st_mode)
    return out


def refused(result, *words: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def cp_journal(src: str, dst: Path) -> Path:
    """Where ``pfs cp SRC DST`` keeps its journal (what an attacker can compute too)."""
    d = resolve(str(dst))
    return Path(journal_dir(d, ident(src, "", "", d.url)))


# ---------------------------------------------------------------- cp --resume


@pytest.mark.parametrize(
    "forged",
    [
        {"token": "/../../../victim/decoy", "dst": None, "streamed": False},
        {"manifest": "/etc-manifest", "dst": None, "streamed": False},
        {"job": "cp", "dst": None, "options": {}, "nonce": "0", "mac": "0" * 64},
    ],
    ids=["token", "manifest", "bad-mac"],
)
def test_forged_cp_job_is_refused_and_nothing_is_touched(tmp_path, forged):
    """A token ``/../../../victim/decoy`` in job.json made ``cp --resume`` remove victim/decoy; a forged
    ``manifest`` replaced the rows it copied."""
    v, before = victim(tmp_path)
    src = make_tree(tmp_path / "src", {"a/f": "1", "b": "2"})
    os.symlink("f", src / "a" / "l")
    dst = tmp_path / "D"
    (dst / "a" / ".l.pfs-tmp-").mkdir(parents=True)
    jdir = cp_journal(f"{src}/", dst)
    jdir.mkdir(mode=0o700)
    (jdir / "job.json").write_text(json.dumps({**forged, "dst": str(dst)}))
    dst_before = state(dst)
    refused(run_pfs("cp", f"{src}/", dst, "--resume", "--no-progress"), "job.json", "not written by this user's pfs")
    assert state(v) == before and state(dst) == dst_before


def test_cp_resume_with_other_chunk_options_is_refused_then_completes(tmp_path, dask_client):
    """The data loss of issue 34: a resumed run with the default --chunk-files skipped chunk ids the
    interrupted run had journaled, which then named other files (500 to 4,200 of 8,000 missing)."""
    from tests.test_resume import StopAfter, wait_idle

    src, dst = tmp_path / "src", tmp_path / "dst"
    make_balanced(src, dirs=8, files_per_dir=50, size=10)
    with pytest.raises(KeyboardInterrupt):
        copy(f"{src}/", dst, client=dask_client, chunk_files=7, stream=False, progress=StopAfter(6))
    wait_idle(dask_client)
    (jdir,) = dst.glob(".pfs-journal-*")
    done = open_journal(jdir).done()
    assert done, "nothing journaled before the interrupt"
    after_kill = state(dst)
    for option, kw in (
        ("chunk_files=7", {"chunk_files": 500}),
        ("split_size=None", {"chunk_files": 7, "split_size": 1}),
    ):
        with pytest.raises(PfsError, match=f"ran with {option}"):  # named as Python calls it
            copy(f"{src}/", dst, client=dask_client, stream=False, resume=True, **kw)
        assert state(dst) == after_kill  # refused: nothing touched, the journal kept
    res = copy(f"{src}/", dst, client=dask_client, chunk_files=7, stream=False, resume=True)
    assert res.exit_code == 0 and res.resumed >= len(done)
    assert tree_digest(dst) == tree_digest(src) and not list(dst.glob(".pfs-journal-*"))


def test_cp_chunk_journaled_with_other_entries_is_copied_again(tmp_path, dask_client):
    """A chunk is known by what it holds: a journal line for ``c0`` made for other entries skips nothing."""
    from tests.test_resume import StopAfter, wait_idle

    src, dst = tmp_path / "src", tmp_path / "dst"
    make_balanced(src, dirs=2, files_per_dir=10, size=10)
    with pytest.raises(KeyboardInterrupt):
        copy(f"{src}/", dst, client=dask_client, chunk_files=5, stream=False, progress=StopAfter(1))
    wait_idle(dask_client)
    (jdir,) = dst.glob(".pfs-journal-*")
    shutil.rmtree(dst / "d000")
    jr = open_journal(jdir)
    jr.job()
    for n in range(4):
        jr.record(f"c{n}", files=5, bytes=50, sig="not-these-entries")  # signed: only the content differs
    jr.close()
    res = copy(f"{src}/", dst, client=dask_client, chunk_files=5, stream=False, resume=True)
    assert res.exit_code == 0 and res.resumed == 0
    assert tree_digest(dst) == tree_digest(src)


# ---------------------------------------------------------------- rm --manifest --resume


def rm_setup(tmp_path: Path, dask_client) -> tuple[Path, Path, Path]:
    tree = make_tree(tmp_path / "tree", {f"d{i}/f{j}": "x" for i in range(2) for j in range(1, 6)})
    m = tmp_path / "M"
    scan(tree, m, client=dask_client)
    jdir = Path(
        journal_dir(resolve(str(m)), ident("rm", resolve(str(m)).url, Selection(open_manifest(m), WHERE).where))
    )
    return tree, m, jdir


WHERE = "name = 'f1'"


def every_row(m: Path, out: Path) -> str:
    """A selection.parquet holding every row of the manifest, as a planted one would."""
    import pyarrow.dataset as ds

    rows = ds.dataset(str(m), format="parquet").to_table(
        columns=["path", "path_raw", "name", "parent", "type", "size", "mtime", "ino", "ctime", "depth", "error"]
        + ["etag"]
    )
    pq.write_table(rows, out)
    from operators.journal import file_digest

    return file_digest(str(out))


def test_forged_rm_selection_is_refused_and_nothing_is_removed(tmp_path, dask_client):
    """A planted job.json + selection.parquet holding every row made ``rm --where "name = 'f1'"
    --max-entries 1 --resume`` remove 9 files and 2 directories, exit 0, and delete the journal."""
    tree, m, jdir = rm_setup(tmp_path, dask_client)
    before = state(tree)
    jdir.mkdir(mode=0o700)
    every_row(m, jdir / "selection.parquet")
    job = {"job": "rm", "mode": "manifest", "manifest": str(m), "where": WHERE, "root": str(tree), "chunk_files": 500}
    (jdir / "job.json").write_text(json.dumps(job))
    args = ["rm", "--manifest", m, "--where", WHERE, "--max-entries", "2", "--resume", "-y", "--json"]
    refused(run_pfs(*args), "not written by this user's pfs")
    assert state(tree) == before and jdir.exists()


def test_rm_selection_signed_but_not_a_subset_is_refused(tmp_path, dask_client):
    """Even with a valid signature (the user's own key): the frozen rows must be the file the job froze,
    a subset of what the manifest and --where select, and --max-entries applies to them."""
    tree, m, jdir = rm_setup(tmp_path, dask_client)
    before = state(tree)
    jr = open_journal(jdir)
    where = Selection(open_manifest(m), WHERE).where  # as pfs writes it
    job = {"job": "rm", "mode": "manifest", "manifest": str(m), "where": where, "root": str(tree), "chunk_files": 500}
    jr.start(job)
    digest = every_row(m, jdir / "selection.parquet")
    jr.rewrite_job({**job, "selection": "0" * 64})  # not this file
    args = ["rm", "--manifest", m, "--where", WHERE, "--resume", "-y"]
    refused(run_pfs(*args), "not the selection this job froze")
    jr.rewrite_job({**job, "selection": digest})  # this file, but more rows than --where selects
    refused(run_pfs(*args), "are not rows the manifest and --where select")
    assert state(tree) == before
    # the real frozen selection of this job (2 rows), capped below what will run
    res = run_pfs(*args[:-2], "--max-entries", "1", "-y")
    assert res.returncode == 2 and state(tree) == before  # a fresh run is capped as before


# ---------------------------------------------------------------- scan --resume


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
def test_forged_scan_frontier_is_refused(tmp_path, dask_client, signed):
    """A done.jsonl record with ``frontier: [["../../../../etc", null]]`` added 1,397 rows of /etc."""
    from dask_pfs.scan import journal as sj

    tree = make_tree(tmp_path / "tree", {"a/f": "1"})
    m = tmp_path / "M"
    m.mkdir()
    t = resolve(str(tree))
    jr = open_journal(journal_dir(resolve(str(m)), ident("scan", t.url, resolve(str(m)).url)))
    sj.start(jr, t.url, str(m), None)
    line = {
        "id": "0000000",
        "given": [{"b": ""}],
        "parts": [],
        "tally": {},
        "frontier": [[{"b": "Li4vLi4vZXRj"}, None]],
    }
    if signed:
        jr.record(line["id"], **{k: v for k, v in line.items() if k != "id"})
        jr.close()
    else:
        with open(Path(jr.path) / "done.jsonl", "w") as f:
            f.write(json.dumps(line) + "\n")
    refused(run_pfs("scan", tree, "-o", m, "--resume", "--no-progress"), "refusing to resume")
    assert sorted(os.listdir(m)) == [Path(jr.path).name]  # no part, no marker


def test_scan_resume_over_a_complete_manifest(tmp_path, dask_client):
    """Another --checksum was silently ignored (docs: exit 2), and the rate read 449,000,000,000 entries/s."""
    tree = tmp_path / "tree"
    make_balanced(tree, dirs=3, files_per_dir=5)
    m = tmp_path / "M"
    assert run_pfs("scan", tree, "-o", m, "--no-progress").returncode == 0
    refused(run_pfs("scan", tree, "-o", m, "--resume", "--checksum", "xxh3", "--no-progress"), "--checksum")
    again = run_pfs("scan", tree, "-o", m, "--resume", "--no-progress")
    assert again.returncode == 0, again.stderr
    if "entries/s" in again.stdout:
        rate = float(again.stdout.split(" entries/s")[0].rsplit("(", 1)[1].replace(",", ""))
        assert rate < 1e8, again.stdout


# ---------------------------------------------------------------- sync


def test_sync_resume_reports_what_it_resumed(tmp_path):
    """``sync --resume --json`` said ``"resumed": 0`` with 20 chunks skipped."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_balanced(src, dirs=4, files_per_dir=10, size=10)
    (src / "d000" / "sub" / "f0000.dat").chmod(0)  # one unreadable file: the copy keeps its journal
    args = ["sync", f"{src}/", dst, "--json", "--no-progress", "--chunk-files", "4", "--workers", "1"]
    first = run_pfs(*args, drop_dac=True)
    assert first.returncode == 1, first.stderr
    (src / "d000" / "sub" / "f0000.dat").chmod(0o644)
    summary = json.loads(run_pfs(*args, "--resume").stdout)
    assert summary["exit_code"] == 0 and summary["resumed"] >= 5, summary
    assert tree_digest(dst) == tree_digest(src)


# ---------------------------------------------------------------- locks


def test_lock_file_symlink_and_open_lock_dir_are_refused(tmp_path):
    """A link planted as ``<key>.lock`` made root overwrite its target; another user could hold a lock forever."""
    v, before = victim(tmp_path)
    src = make_tree(tmp_path / "src", {"f": "1"})
    dst = tmp_path / "dst"
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    lock = Path(lock_path(lock_key(resolve(str(dst)))))
    os.symlink(v / "decoy", lock)
    refused(run_pfs("cp", src, dst, "--no-progress"), "lock file", "symlink")
    assert state(v) == before and not dst.exists()
    lock.unlink()
    locks.chmod(0o777)
    refused(run_pfs("cp", src, dst, "--no-progress"), "writable by group or others")
    locks.chmod(0o700)
    os.chown(locks, 65534, 65534)
    refused(run_pfs("cp", src, dst, "--no-progress"), "not to this user")
    assert not dst.exists()
    os.chown(locks, os.getuid(), os.getgid())
    assert run_pfs("cp", src, dst, "--no-progress").returncode == 0


# ---------------------------------------------------------------- the tree watcher


def test_watcher_refuses_a_dotdot_row_and_follows_no_link(tmp_path, dask_client):
    """A directory row ``../../../../usr/share/doc`` grew the watch set from 2 to 944 directories outside
    the root; a directory swapped for a link to elsewhere must not be walked either."""
    tree = make_tree(tmp_path / "tree", {"a/p/f": "1", "b/g": "2"})
    outside = make_tree(tmp_path / "outside", {"p/x": "x", **{f"p/o{i}/y": "y" for i in range(5)}})
    m = tmp_path / "M"
    scan(tree, m, client=dask_client)
    base = tree_changes.load_baseline(str(m))
    assert base is not None and set(base.dirs) == {b"a", b"a/p", b"b"}
    # a link where a watched directory was: it and everything below it are gone for the watcher, never
    # stat'ed or walked through the link (a/p would read outside/p, and adopt outside/p/o*)
    shutil.rmtree(tree / "a")
    os.symlink(outside, tree / "a")
    os.utime(tree, (1, 4_000_000_000))
    changes = tree_changes.find_changes(base)
    assert changes.changed >= 2 and set(base.dirs) == {b"b"}, base.dirs
    # a forged row with ``..``: refused before anything is stat'ed
    part = next(m.glob("part-*.parquet"))
    table = pq.read_table(part)
    paths = [p if p != "b" else "../../outside" for p in table.column("path").to_pylist()]
    pq.write_table(table.set_column(table.schema.get_field_index("path"), "path", pa.array(paths)), part)
    with pytest.raises(PfsError, match="unsafe path"):
        tree_changes.load_baseline(str(m))


def test_journal_key_lives_in_a_private_directory(tmp_path):
    """The key that signs journals: made once, 0700 directory, refused when others could read or swap it."""
    from dask_pfs.runtime.journals import journal_key

    key = journal_key()
    keys = tmp_path / "cache" / "pfs" / "keys"
    assert journal_key() == key and len(key) == 32 and (keys.stat().st_mode & 0o777) == 0o700
    keys.chmod(0o755)
    with pytest.raises(PfsError, match="must be mode 700"):
        journal_key()
    keys.chmod(0o700)
    (keys / "journal.key").rename(keys / "elsewhere")
    os.symlink(keys / "elsewhere", keys / "journal.key")
    with pytest.raises(PfsError, match="symlink"):
        journal_key()


def test_journal_key_is_never_seen_half_written(tmp_path, monkeypatch):
    """Two pfs starting at once on a new cache (sync's two sides, a DAG's parallel tasks): the key's
    name appears only once its 32 bytes are written, so the other never reads an empty key (exit 2)."""
    from dask_pfs.runtime import journals

    path = tmp_path / "cache" / "pfs" / "keys" / "journal.key"
    seen: list[bool] = []
    write = os.write

    def watched(fd: int, data: bytes) -> int:
        seen.append(os.path.lexists(path))  # what a concurrent pfs would find while the key is being written
        return write(fd, data)

    monkeypatch.setattr(journals.os, "write", watched)
    key = journals.journal_key()
    assert seen == [False] and path.read_bytes() == key and len(key) == 32
    assert sorted(p.name for p in path.parent.iterdir()) == ["journal.key"]  # no temp file left behind
