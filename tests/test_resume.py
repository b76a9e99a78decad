"""Resume: `pfs cp`, `pfs scan` and `pfs rm` drivers SIGKILLed mid-job, then `--resume` finishes only what is left."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from dask_pfs import PfsError, remove, scan
from dask_pfs.remove.journal import cache_dir, tree_journal
from dask_pfs.runtime.journals import open_journal
from dask_pfs.scan.api import ScanTuning
from dask_pfs.scan.journal import decode_item, encode_item
from dask_pfs.urls import resolve
from operators.copy.tasks import TEMP_MARK
from operators.journal import Journal
from tests.conftest import PFS, REPO, make_balanced, make_tree, run_pfs, tree_digest

MiB = 1 << 20


def lines(pattern: str) -> int:
    """Lines (journaled chunks) of the first file ``pattern`` matches, 0 while there is none."""
    files = glob.glob(pattern)
    if not files:
        return 0
    with open(files[0], "rb") as f:
        return f.read().count(b"\n")


def journal_lines(dst) -> int:
    """Chunks journaled so far in ``dst``: a local destination (its ``.pfs-journal-*``) or the cache's
    journal directory (``$XDG_CACHE_HOME/pfs/journals``, where a store destination's journal is)."""
    return lines(os.path.join(dst, ".pfs-journal-*", "done.jsonl")) or lines(os.path.join(dst, "*", "done.jsonl"))


def kill_when(
    args: list[str], count: Callable[[], int], at_least: int, env: dict | None = None, timeout: float = 240
) -> tuple[subprocess.Popen, int]:
    """Run ``pfs ARGS`` in a session of its own and SIGKILL the session (the driver and its LocalCluster
    together, like a lost client) once ``count()`` reaches ``at_least``; (the process, the count seen)."""
    proc = subprocess.Popen(
        PFS + args,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    seen = 0
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            seen = count()
            if seen >= at_least:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"the job finished before it could be killed: {proc.stderr.read()[-2000:]!r}"
        assert seen >= at_least, "no chunks journaled in time"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc, seen


def killed_mid_copy(
    args: list[str], dst: Path, env: dict | None = None, lines: int = 20
) -> tuple[subprocess.Popen, int]:
    """``pfs ARGS`` SIGKILLed with its LocalCluster once ``lines`` chunks are journaled in ``dst``."""
    return kill_when(args, lambda: journal_lines(dst), lines, env)


def test_journal_survives_torn_lines_and_restarts(tmp_path):
    j = open_journal(str(tmp_path / "j"))
    j.start({"token": "abc"})
    j.record("c0", files=2)
    j.record("b1.r0")
    j.close()
    with open(tmp_path / "j" / "done.jsonl", "ab") as f:
        f.write(b'{"id": "c9", "fi')  # a SIGKILL in the middle of a write
    again = open_journal(str(tmp_path / "j"))
    assert again.job() == {"token": "abc"} and set(again.done()) == {"c0", "b1.r0"}
    again.start({"token": "new"})
    assert again.done() == {} and again.job()["token"] == "new"
    again.remove()
    assert not (tmp_path / "j").exists()


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "phased"])
def test_cp_driver_killed_then_resume_completes(tmp_path, stream):
    """Streamed, the kill can come while the scan still walks: the resumed run finishes the scan and
    makes the same chunks from the same parts, so the journaled ones are still skipped."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_balanced(src, dirs=12, files_per_dir=30, size=2000)
    (src / "big.bin").write_bytes(os.urandom(6 * MiB))
    args = ["cp", f"{src}/", str(dst), "--chunk-files", "2", "--split-size", "128K", "--workers", "1", "--json"]
    args.append("--stream" if stream else "--no-stream")
    proc, seen = killed_mid_copy(args, dst)
    assert proc.returncode == -signal.SIGKILL
    assert tree_digest(dst) != tree_digest(src)  # really interrupted
    journal = glob.glob(os.path.join(dst, ".pfs-journal-*"))
    assert len(journal) == 1
    scanned = os.path.exists(os.path.join(journal[0], "manifest", "_manifest.json"))
    assert scanned or stream  # phased: nothing is copied before the scan is complete
    done = open_journal(journal[0]).done()
    assert len(done) >= seen

    resumed = run_pfs(*args, "--resume", check=True)
    summary = json.loads(resumed.stdout)
    assert summary["exit_code"] == 0
    # the journaled chunks and ranges were not done again (the ranges of a finished big file are not even looked at)
    assert summary["resumed"] >= len([k for k in done if ".r" not in k or k.partition(".r")[0] not in done])
    assert ("scan" not in summary["phases"]) == scanned  # a complete manifest is reused, else the scan goes on
    if stream:  # each small file exactly once: in a journaled chunk, copied now, or found copied (unjournaled)
        journaled = sum(v["files"] for k, v in done.items() if k.startswith("p"))
        assert journaled + summary["streamed"] + summary["counts"]["skipped"] == 12 * 30
    else:
        total_items = 12 * 30 // 2 + 6 * MiB // (128 * 1024)
        assert summary["resumed"] + summary["counts"]["files"] // 2 <= total_items + 1
    assert not glob.glob(os.path.join(dst, ".pfs-journal-*"))  # deleted after a clean finish
    assert tree_digest(dst) == tree_digest(src)
    assert not [n for _, ds, fs in os.walk(os.fsencode(dst)) for n in ds + fs if TEMP_MARK in n]


# ---------------------------------------------------------------- helpers for scan and rm


def start_and_kill(args: list[str], pattern: str, at_least: int, env: dict | None = None) -> int:
    """Start the pfs CLI and SIGKILL it, with its LocalCluster, once the journal ``pattern`` has ``at_least`` lines."""
    proc, seen = kill_when(args, lambda: lines(pattern), at_least, env, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    return seen


def manifest_rows(m: Path) -> list[tuple]:
    """Every row of a manifest (atime aside: listing a directory may move it), sorted by path; duplicates kept."""
    table = ds.dataset(sorted(glob.glob(f"{m}/part-*.parquet")), format="parquet").to_table()
    cols = [c for c in table.column_names if c != "atime"]
    return sorted((tuple(r[c] for c in cols) for r in table.select(cols).to_pylist()), key=lambda r: r[0])


def digest_kinds(tree: Path) -> tuple[int, int]:
    """(non-directories, directories) below ``tree``."""
    kinds = [v[0] for v in tree_digest(tree).values()]
    return sum(k != "directory" for k in kinds), sum(k == "directory" for k in kinds)


class StopAfter:
    """A progress reporter that interrupts the driver like Ctrl-C: after ``n`` updates, or when it stops."""

    def __init__(self, n: int | None = None, at_stop: bool = False) -> None:
        self.n, self.at_stop, self.seen = n, at_stop, 0

    def start(self, title: str) -> None:
        pass

    def update(self, counters: dict) -> None:
        self.seen += 1
        if self.n is not None and self.seen > self.n:
            raise KeyboardInterrupt

    def stop(self) -> None:
        if self.at_stop:
            raise KeyboardInterrupt


def wait_idle(client) -> None:
    """Tasks of an interrupted driver run on: let them end before the next run (a killed client's do too)."""
    deadline = time.monotonic() + 30

    def busy() -> bool:  # the scheduler forgets cancelled tasks while their threads still run
        threads = client.run(lambda dask_worker: len(dask_worker.active_threads))
        return any(client.processing().values()) or any(threads.values())

    while busy() and time.monotonic() < deadline:
        time.sleep(0.05)


# ---------------------------------------------------------------- journal format


def test_journal_append_after_torn_line_keeps_new_records(tmp_path):
    j = open_journal(str(tmp_path / "j"))
    j.start({"token": "t"})
    j.record("c0")
    j.close()
    with open(tmp_path / "j" / "done.jsonl", "ab") as f:
        f.write(b'{"id": "c1", "fi')  # the killed run's last write
    again = open_journal(str(tmp_path / "j"))
    again.record("c2")  # the resumed run's first record must not be glued to the torn line
    again.rewrite_job({"token": "t", "attempt": 1})
    again.close()  # lines are batched: written within FLUSH_SECONDS, or here
    assert set(open_journal(str(tmp_path / "j")).done()) == {"c0", "c2"} and again.job()["attempt"] == 1


def test_scan_frontier_items_roundtrip_through_json():
    row = ("a/\\xff", b"a/\xff", "directory", 4096, 1_700_000_000_123_456_789, None, 5, 0o40755, 0, 0, 2**63 + 5)
    items = [(b"a/\xff", row), (b"", None), ("s3key/\udcff", (*row[:2], None))]
    assert [decode_item(json.loads(json.dumps(encode_item(i)))) for i in items] == items


def _scan_journal_chain(path, tasks: int, width: int) -> tuple[Journal, tuple]:
    """A scan journal of ``tasks`` records, each given the ``width`` directories the previous one handed back."""
    from dask_pfs.scan import journal as sj

    jr = open_journal(str(path))
    sj.start(jr, "file:///src", "/m", None)
    root = ("", None)
    given = [""]
    for t in range(tasks):
        back = [(f"d{t}/{i}", (f"d{t}/{i}", "directory", 4096, 1_700_000_000 + i)) for i in range(width)]
        tally = {"entries": width, "directories": width}
        jr.record(
            f"{t:07d}",
            given=given,
            parts=[f"part-{t:07d}.parquet"],
            tally=tally,
            frontier=[encode_item(b) for b in back],
        )
        given = [rel for rel, _ in back]
    jr.close()
    return jr, root


def test_scan_resume_keeps_only_the_unfinished_frontier(tmp_path):
    """--resume of a long scan: what is left to walk comes back, and memory grows with it, not with the journal."""
    import tracemalloc

    from dask_pfs.scan import journal as sj

    jr, root = _scan_journal_chain(tmp_path / "j", tasks=1000, width=100)  # 100,000 directories handed back
    # a line out of order (given before the record that handed it back) is still not walked again
    jr.record("r-early", given=["x/1"], parts=[], tally={}, frontier=[])
    jr.record("r-late", given=[], parts=[], tally={}, frontier=[encode_item(("x/1", None)), encode_item(("x/2", None))])
    jr.close()
    tracemalloc.start()
    res = sj.load(jr, "file:///src", None, root)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert res is not None and res.attempt == 1 and res.tasks == 1002 and len(res.parts) == 1000
    assert res.tally.entries == 100_000
    assert sorted(rel for rel, _ in res.frontier) == sorted([f"d999/{i}" for i in range(100)] + ["x/2"])
    assert dict(res.frontier)["d999/7"] == ("d999/7", "directory", 4096, 1_700_000_007)
    # the 100,000 directories of the journal took ~35 MB when all were kept; the frontier left is 101
    assert peak < 8 * MiB, peak
    # a resumed run's records follow the first run's: both attempts' frontiers are accounted for
    jr.record(
        "r1-0000000",
        given=[rel for rel, _ in res.frontier],
        parts=["part-r1-0000000-0000.parquet"],
        tally={},
        frontier=[],
    )
    jr.close()
    again = sj.load(jr, "file:///src", None, root)
    assert again is not None and again.attempt == 2 and again.frontier == []


# ---------------------------------------------------------------- scan


def test_scan_resume_walks_directories_a_task_handed_back(tmp_path):
    """A task whose budget ran out returns the given directories it did not start as frontier:
    a resumed scan still owes them (it used to count them as walked and leave them out)."""
    from dask_pfs.scan import journal as sj
    from operators.scan.task import ChunkResult
    from operators.scan.walk import Tally

    jr = open_journal(str(tmp_path / "journal"))
    sj.start(jr, "file:///t", str(tmp_path / "m"), None)
    root = (b"", None)
    sj.record(jr, "0000000", [b""], ChunkResult("0000000", [], Tally(), [(b"a", None), (b"b", None)], 0.1))
    sj.record(
        jr,
        "0000001",
        [b"a", b"b"],
        ChunkResult("0000001", ["part-0000001-0000.parquet"], Tally(), [(b"b", None), (b"a/x", None)], 0.1),
    )
    resumed = sj.load(jr, "file:///t", None, root)
    assert resumed is not None
    assert sorted(key for key, _ in resumed.frontier) == [b"a/x", b"b"]


def test_scan_driver_killed_then_resume_completes(tmp_path, dask_client):
    src, out = tmp_path / "src", tmp_path / "m"
    # many small directories: under the ops cap a slice ends ~1 s after it starts (a task's or the
    # driver's: this local scan is walked by the driver, dask_pfs.scan.driver_walk), so ~5 get journaled
    make_balanced(src, dirs=400, files_per_dir=10, size=10)
    args = ["scan", str(src), "-o", str(out), "--workers", "1", "--json"]
    seen = start_and_kill([*args, "--max-ops-per-second", "1000"], f"{out}/.pfs-journal-*/done.jsonl", 2)
    journal = glob.glob(f"{out}/.pfs-journal-*")
    assert len(journal) == 1 and not (out / "_manifest.json").exists()
    done = open_journal(journal[0]).done()
    assert len(done) >= seen
    kept = {}
    for rec in done.values():
        for name in rec["parts"]:
            s = os.stat(out / name)
            kept[name] = (s.st_ino, s.st_mtime_ns)
    assert kept

    proc = run_pfs("scan", src, "-o", out, "--resume", "--json", check=True)
    summary = json.loads(proc.stdout)
    assert summary["exit_code"] == 0 and summary["resumed"] == len(done) and summary["tasks"] > 0
    assert not glob.glob(f"{out}/.pfs-journal-*")  # deleted once the manifest is complete
    for name, (ino, mtime) in kept.items():  # the finished tasks' parts were reused as they were
        s = os.stat(out / name)
        assert (s.st_ino, s.st_mtime_ns) == (ino, mtime)
    fresh = scan(src, tmp_path / "fresh", client=dask_client)
    assert summary["counts"] == fresh.counts
    assert manifest_rows(out) == manifest_rows(tmp_path / "fresh")  # no row twice, none missing
    info = json.loads((out / "_manifest.json").read_text())
    assert info["tasks"] == len(done) + summary["tasks"] and info["options"]["resumed_tasks"] == len(done)


def test_scan_resume_walks_given_directories_a_task_handed_back(tmp_path, dask_client):
    """A task whose budget ran out hands back directories it was given and did not reach; if the task
    they went to next was in flight at the kill, --resume must walk them (they were once dropped)."""
    from dask_pfs.scan import journal as sj

    jr, root = _scan_journal_chain(tmp_path / "j", tasks=1, width=3)  # task 0 handed back d0/0, d0/1, d0/2
    d01, d02 = (
        decode_item(encode_item((f"d0/{i}", (f"d0/{i}", "directory", 4096, 1_700_000_000 + i)))) for i in (1, 2)
    )
    # task 1 was given all three, walked d0/0 only (its subdirectory comes back too), and handed back the rest
    jr.record(
        "0000001",
        given=["d0/0", "d0/1", "d0/2"],
        parts=[],
        tally={},
        frontier=[encode_item(i) for i in (d01, d02, ("d0/0/x", None))],
    )
    jr.record("0000002", given=["d0/1"], parts=[], tally={}, frontier=[])  # d0/2 went to a task that never returned
    jr.close()
    res = sj.load(jr, "file:///src", None, root)
    assert res is not None and sorted(res.frontier, key=str) == sorted([d02, ("d0/0/x", None)], key=str)

    # the same through the engine: many directories per task, tiny budgets, interrupted, resumed
    src, out = tmp_path / "src", tmp_path / "m"
    make_balanced(src, dirs=60, files_per_dir=10)
    tiny = ScanTuning(max_entries=5, max_seconds=0.05, first_seconds=0.05, max_dirs_per_task=64)
    with pytest.raises(KeyboardInterrupt):
        scan(src, out, client=dask_client, tuning=tiny, threads=1, progress=StopAfter(4))
    wait_idle(dask_client)
    done = open_journal(glob.glob(f"{out}/.pfs-journal-*")[0]).done()
    handed_back_given = sum(
        len({str(g) for g in r["given"]} & {str(f[0]) for f in r["frontier"]}) for r in done.values()
    )
    assert handed_back_given > 0  # the case this test is about happened
    res = scan(src, out, client=dask_client, resume=True)
    fresh = scan(src, tmp_path / "fresh", client=dask_client)
    assert res.counts == fresh.counts and manifest_rows(out) == manifest_rows(tmp_path / "fresh")


def test_scan_resume_rules(tmp_path, dask_client):
    src, out = tmp_path / "src", tmp_path / "m"
    make_balanced(src, dirs=30, files_per_dir=20)
    tiny = ScanTuning(max_entries=5, max_seconds=0.2, first_seconds=0.05, max_dirs_per_task=1)  # ~31 tasks
    with pytest.raises(KeyboardInterrupt):
        scan(src, out, client=dask_client, tuning=tiny, progress=StopAfter(3))
    wait_idle(dask_client)
    # without --resume an interrupted scan is refused as before (now with a hint), and nothing changes
    with pytest.raises(PfsError, match=r"already holds a manifest; pass overwrite=True .*resume=True"):
        scan(src, out, client=dask_client)
    with pytest.raises(PfsError, match="exclude each other"):
        scan(src, out, client=dask_client, resume=True, overwrite=True)
    with pytest.raises(PfsError, match="checksum="):
        scan(src, out, client=dask_client, resume=True, checksum="xxh3")
    # resumed, and interrupted again once every task is done but before the marker
    with pytest.raises(KeyboardInterrupt):
        scan(src, out, client=dask_client, tuning=tiny, resume=True, progress=StopAfter(at_stop=True))
    wait_idle(dask_client)
    journal = glob.glob(f"{out}/.pfs-journal-*")
    done = open_journal(journal[0]).done()
    assert any(k.startswith("r1-") for k in done) and any(not k.startswith("r") for k in done)
    res = scan(src, out, client=dask_client, resume=True)  # nothing left to walk: parts kept, marker written
    assert res.tasks == 0 and res.resumed == len(done) and not os.path.exists(journal[0])
    fresh = scan(src, tmp_path / "fresh", client=dask_client)
    assert res.counts == fresh.counts and manifest_rows(out) == manifest_rows(tmp_path / "fresh")
    again = scan(src, out, client=dask_client, resume=True)  # complete: its summary, nothing scanned
    assert again.tasks == 0 and again.counts == fresh.counts
    with pytest.raises(PfsError, match="complete manifest of"):
        scan(tmp_path / "fresh", out, client=dask_client, resume=True)
    # --overwrite over an interrupted scan starts over and drops its journal
    with pytest.raises(KeyboardInterrupt):
        scan(src, tmp_path / "m2", client=dask_client, tuning=tiny, progress=StopAfter(2))
    wait_idle(dask_client)
    assert glob.glob(f"{tmp_path}/m2/.pfs-journal-*")
    scan(src, tmp_path / "m2", client=dask_client, overwrite=True)
    assert not glob.glob(f"{tmp_path}/m2/.pfs-journal-*")
    assert manifest_rows(tmp_path / "m2") == manifest_rows(tmp_path / "fresh")
    # a journal naming parts that are gone is not trusted: a fresh scan
    with pytest.raises(KeyboardInterrupt):
        scan(src, tmp_path / "m2", client=dask_client, tuning=tiny, overwrite=True, progress=StopAfter(2))
    wait_idle(dask_client)
    done = open_journal(glob.glob(f"{tmp_path}/m2/.pfs-journal-*")[0]).done()
    os.remove(tmp_path / "m2" / next(p for rec in done.values() for p in rec["parts"]))
    assert scan(src, tmp_path / "m2", client=dask_client, resume=True).resumed == 0
    assert manifest_rows(tmp_path / "m2") == manifest_rows(tmp_path / "fresh")
    # --resume with no journal over an incomplete manifest: a fresh scan
    os.remove(tmp_path / "m2" / "_manifest.json")
    assert scan(src, tmp_path / "m2", client=dask_client, resume=True).resumed == 0
    assert manifest_rows(tmp_path / "m2") == manifest_rows(tmp_path / "fresh")


# ---------------------------------------------------------------- rm

WHERE = "starts_with(path, 'd00') OR starts_with(path, 'd01') OR (type = 'file' AND name < 'f0100')"


def selected(m: Path, where: str) -> tuple[set[bytes], int]:
    """Paths a condition selects in a manifest, and how many are not directories."""
    import duckdb

    rows = duckdb.sql(f"SELECT path, type FROM read_parquet('{m}/part-*.parquet') WHERE {where}").fetchall()
    return {p.encode() for p, _ in rows}, sum(t != "directory" for _, t in rows)


def test_rm_manifest_driver_killed_then_resume_removes_exactly_the_selection(tmp_path, dask_client):
    src, m = tmp_path / "src", tmp_path / "m"
    make_balanced(src, dirs=40, files_per_dir=200, size=10)
    scan(src, m, client=dask_client)
    sel, n_files = selected(m, WHERE)
    assert n_files == 20 * 200 + 20 * 100
    expected = {k: v for k, v in tree_digest(src).items() if k not in sel}
    args = ["rm", "--manifest", str(m), "--where", WHERE, "-y", "--workers", "1", "--json"]
    slow = ["--chunk-files", "100", "--max-ops-per-second", "2000"]
    start_and_kill(args + slow, f"{m}/.pfs-journal-*/done.jsonl", 5)
    journal = glob.glob(f"{m}/.pfs-journal-*")
    assert len(journal) == 1 and os.path.exists(os.path.join(journal[0], "selection.parquet"))
    done = open_journal(journal[0]).done()
    assert tree_digest(src) != expected  # really interrupted

    # resumed with another --chunk-files: the journal's wins, so the chunk ids still match
    proc = run_pfs(*args, "--chunk-files", "500", "--resume", check=True)
    summary = json.loads(proc.stdout)
    assert summary["exit_code"] == 0 and summary["failed"] == 0 and summary["resumed"] == len(done)
    files_done = sum(cid.startswith("f") for cid in done)
    # journaled chunks were not touched again; the rest were removed (or found gone: in flight at the kill)
    assert summary["removed_files"] + summary["skipped_missing"] == n_files - 100 * files_done
    assert summary["removed_dirs"] == 40 and summary["skipped_nonempty"] == 0
    assert tree_digest(src) == expected  # exactly the selection is gone, nothing else
    assert not glob.glob(f"{m}/.pfs-journal-*")


def test_rm_tree_driver_killed_then_resume(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the journal's key too: read here, written there
    tree, keep = tmp_path / "tree", make_tree(tmp_path / "keep", {"x": "precious"})
    make_balanced(tree, dirs=40, files_per_dir=200, size=10)
    os.symlink(keep, tree / "d000" / "to_keep")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = ["rm", str(tree), "-y", "--workers", "1", "--json"]
    start_and_kill([*args, "--max-ops-per-second", "2000"], f"{tmp_path}/cache/pfs/journals/*/done.jsonl", 1, env)
    journal = glob.glob(f"{tmp_path}/cache/pfs/journals/*")
    assert len(journal) == 1 and open_journal(journal[0]).job()["target"] == str(tree)
    done = open_journal(journal[0]).done()
    files_left, dirs_left = digest_kinds(tree)
    assert done and 0 < files_left < 40 * 200 + 1

    summary = json.loads(run_pfs(*args, "--resume", env=env, check=True).stdout)
    assert summary["exit_code"] == 0 and summary["failed"] == 0 and summary["resumed"] == len(done)
    # the resumed walk found only what was left: removed entries were neither redone nor failed
    assert summary["removed_files"] == files_left and summary["removed_dirs"] == dirs_left + 1
    assert not os.path.lexists(tree) and (keep / "x").read_text() == "precious"
    assert not os.path.exists(journal[0])


def test_rm_resume_rules(tmp_path, dask_client, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src, m = tmp_path / "src", tmp_path / "m"
    make_balanced(src, dirs=6, files_per_dir=50)
    scan(src, m, client=dask_client)
    where = "type = 'file' AND name < 'f0040'"
    sel, n_files = selected(m, where)
    expected = {k: v for k, v in tree_digest(src).items() if k not in sel}
    # dry runs keep no journal; a refused run leaves none
    remove(manifest=m, where=where, client=dask_client, dry_run=True)
    remove(src, client=dask_client, dry_run=True)
    with pytest.raises(PfsError, match="not confirmed"):
        remove(manifest=m, where=where, client=dask_client, confirm=lambda _: False)
    assert not glob.glob(f"{m}/.pfs-journal-*") and not (tmp_path / "cache" / "pfs" / "journals").exists()
    # interrupted (like Ctrl-C) after a few chunks, then resumed
    with pytest.raises(KeyboardInterrupt):
        remove(manifest=m, where=where, client=dask_client, chunk_files=20, progress=StopAfter(3))
    wait_idle(dask_client)
    journal = glob.glob(f"{m}/.pfs-journal-*")
    done = open_journal(journal[0]).done()
    assert len(done) >= 3 and open_journal(journal[0]).job()["chunk_files"] == 20
    res = remove(manifest=m, where=where, client=dask_client, resume=True)
    assert res.exit_code == 0 and res.resumed == len(done)
    assert res.removed_files + res.skipped_missing == n_files - 20 * len(done)
    assert tree_digest(src) == expected and not os.path.exists(journal[0])
    # an explicit journal that belongs to another job is not resumed
    other = tmp_path / "other-journal"
    open_journal(str(other)).start({"job": "rm", "mode": "manifest", "manifest": str(m)})
    with pytest.raises(PfsError, match="another job"):
        remove(src, client=dask_client, journal=other, resume=True)
    assert tree_digest(src) == expected
    # killed after the tree's last rmdir, before the journal went: --resume reports it done
    gone = resolve(str(tmp_path / "gone"))
    jr = tree_journal(gone, None)
    assert jr.path.startswith(cache_dir(""))  # a tree's journal is never inside the tree
    jr.start({"job": "rm", "mode": "tree", "target": gone.url})
    jr.record("t-x-0000001", removed_files=3)
    jr.close()
    with pytest.raises(PfsError, match="no such file"):
        remove(tmp_path / "gone", client=dask_client)
    res = remove(tmp_path / "gone", client=dask_client, resume=True)
    assert res.exit_code == 0 and res.resumed == 1 and not jr.exists


def test_rm_failures_keep_the_journal_and_resume_retries_them(tmp_path, dask_client):
    src, m = make_tree(tmp_path / "src", {"ro/a.dat": "1", "ro/b.dat": "2", "rw/c.dat": "3"}), tmp_path / "m"
    scan(src, m, client=dask_client)
    os.chmod(src / "ro", 0o555)
    try:  # without the DAC capabilities root cannot unlink in a read-only directory
        proc = run_pfs("rm", "--manifest", m, "-y", "--workers", "1", "--json", drop_dac=True)
    finally:
        os.chmod(src / "ro", 0o755)
    summary = json.loads(proc.stdout)
    assert proc.returncode == 1 and summary["failed"] == 2 and summary["skipped_nonempty"] == 1
    assert summary["journal"] and os.path.dirname(summary["journal"]) == str(m)  # kept, next to the manifest
    assert open_journal(summary["journal"]).done() == {}  # the failed file chunk, and so the non-empty ro, are not done

    res = remove(manifest=m, client=dask_client, resume=True)  # retries them: the same result as a clean run
    assert res.exit_code == 0 and res.resumed == 0 and res.journal is None
    assert (res.removed_files, res.removed_dirs, res.skipped_missing) == (2, 1, 2)  # c.dat and rw went before
    assert os.listdir(src) == [] and not os.path.exists(summary["journal"])
