"""Scan engine: real temp trees, a real Dask cluster with worker processes, real S3 (moto)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow.dataset as ds
import pytest
from distributed.diagnostics.plugin import WorkerPlugin

from dask_pfs import IncompleteManifestError, PfsError, open_manifest, scan
from dask_pfs.runtime.submitter import WalkTuning, next_slice
from dask_pfs.scan.api import ScanTuning
from operators.core.pool import get_pool
from operators.names import to_bytes
from operators.scan.local import LocalLister
from operators.scan.walk import Budget, walk
from operators.schema import MARKER_NAME, SCHEMA, micros
from tests.conftest import make_balanced, make_tree, run_pfs

SMALL_TASKS = ScanTuning(max_entries=100, max_seconds=0.2, first_seconds=0.05, max_dirs_per_task=4)


def rows(manifest: Path) -> dict[str, dict]:
    table = ds.dataset(str(manifest), format="parquet").to_table()
    return {r["path"]: r for r in table.to_pylist()}


def find_count(root: Path) -> int:
    out = subprocess.run(["find", str(root), "-mindepth", "1"], capture_output=True, check=True).stdout
    return out.count(b"\n")


def test_scan_tree_counts_types_and_symlinks_not_followed(tmp_path, dask_client):
    outside = make_tree(tmp_path / "outside", {"secret/a.txt": "x" * 10})
    src = make_tree(
        tmp_path / "src",
        {
            "a/b/c.txt": "hello",
            "a/empty.bin": b"",
            "top.jpg": b"\xff" * 1000,
            "emptydir": None,
            "a/loop": "->..",
            "a/self": "->self",
            "link_out": f"->{outside}",
            "dangling": "->/nonexistent/target",
        },
    )
    os.mkfifo(src / "fifo")
    res = scan(src, tmp_path / "m", client=dask_client, tuning=SMALL_TASKS)
    got = rows(tmp_path / "m")
    assert res.exit_code == 0 and res.errors == 0
    assert set(got) == {
        "a", "a/b", "a/b/c.txt", "a/empty.bin", "a/loop", "a/self", "top.jpg", "emptydir",
        "link_out", "dangling", "fifo",
    }  # fmt: skip
    assert res.counts["entries"] == find_count(src) == 11
    assert got["a/loop"]["type"] == "symlink" and got["a/loop"]["link_target"] == ".."
    assert got["link_out"]["type"] == "symlink" and got["link_out"]["link_target"] == str(outside)
    assert not any(p.startswith(("link_out/", "a/loop/")) for p in got)  # never followed
    assert got["fifo"]["type"] == "other"
    assert got["a/b/c.txt"]["size"] == 5 and got["a/b/c.txt"]["depth"] == 3
    assert got["a/b/c.txt"]["parent"] == "a/b" and got["a/b/c.txt"]["name"] == "c.txt"
    assert got["top.jpg"]["parent"] == "" and got["top.jpg"]["depth"] == 1
    st = os.lstat(src / "a/b/c.txt")
    assert got["a/b/c.txt"]["ino"] == st.st_ino and got["a/b/c.txt"]["mode"] == st.st_mode
    # whole microseconds, truncated (operators.schema.micros): a float st_mtime rounds and missed by 1 us + 1 ulp
    mtime = got["a/b/c.txt"]["mtime"]
    assert (mtime - datetime.fromtimestamp(0, UTC)) // timedelta(microseconds=1) == micros(st.st_mtime_ns)
    assert all(r["error"] is None and r["path_raw"] is None for r in got.values())
    assert all(r["etag"] is None for r in got.values())  # an object store's entity tag: none on POSIX
    info = json.loads((tmp_path / "m" / MARKER_NAME).read_text())
    assert info["schema_version"] == 3 and info["root"] == str(src)
    assert info["counts"] == res.counts and info["counts"]["symlinks"] == 4 and info["counts"]["other"] == 1


def test_non_utf8_names_round_trip_exactly(tmp_path, dask_client):
    odd = [b"caf\xe9.txt", b"dir\xff\xfe", b"dir\xff\xfe/in\x80side", b"new\nline", "ünïcode ✓".encode()]
    src = tmp_path / "src"
    src.mkdir()
    base = os.fsencode(src)
    os.mkdir(os.path.join(base, odd[1]))
    for name in (odd[0], odd[2], odd[3], odd[4]):
        Path(os.fsdecode(os.path.join(base, name))).write_bytes(name)
    scan(src, tmp_path / "m", client=dask_client)
    table = ds.dataset(str(tmp_path / "m"), format="parquet").to_table().to_pylist()
    reached = {to_bytes(r["path"], r["path_raw"]) for r in table}
    assert reached == set(odd)
    for r in table:
        raw = to_bytes(r["path"], r["path_raw"])
        assert os.path.lexists(os.path.join(base, raw))
        if r["path_raw"] is None:
            assert r["path"].encode() == raw  # valid UTF-8 names are stored as plain text
        else:
            assert "\\x" in r["path"]  # shown escaped, exact bytes kept in path_raw
    # DuckDB sees valid UTF-8 everywhere
    con = duckdb.connect()
    n = con.execute(f"SELECT count(*) FROM read_parquet('{tmp_path}/m/*.parquet') WHERE path LIKE 'caf%'").fetchone()
    assert n == (1,)


def test_unbalanced_trees_flat_and_deep(tmp_path, dask_client):
    flat = tmp_path / "flat"
    flat.mkdir()
    for i in range(3000):
        (flat / f"f{i:05d}").write_bytes(b"")
    deep = tmp_path / "deep"
    d = deep
    for i in range(200):
        d = d / f"l{i:03d}"
    d.mkdir(parents=True)
    (d / "bottom.txt").write_text("bottom")
    for root, n in ((flat, 3000), (deep, 201)):
        res = scan(root, tmp_path / f"m-{root.name}", client=dask_client, tuning=SMALL_TASKS)
        got = rows(tmp_path / f"m-{root.name}")
        assert res.counts["entries"] == len(got) == find_count(root) == n
    assert max(r["depth"] for r in rows(tmp_path / "m-deep").values()) == 201


def test_rows_sorted_within_parts_and_readers(tmp_path, dask_client):
    make_balanced(tmp_path / "src", dirs=30, files_per_dir=40)
    scan(tmp_path / "src", tmp_path / "m", client=dask_client, tuning=SMALL_TASKS)
    m = tmp_path / "m"
    parts = sorted(m.glob("part-*.parquet"))
    assert len(parts) > 1
    import pyarrow.parquet as pq

    for part in parts:
        t = pq.read_table(part)
        assert t.schema.equals(SCHEMA, check_metadata=False)
        paths = t.column("path").to_pylist()
        assert paths == sorted(paths)
        # a dictionary only where values repeat (operators.parts.DICTIONARY_COLUMNS): unique ones pay for none
        group = pq.ParquetFile(part).metadata.row_group(0)
        chunks = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
        assert chunks["parent"].has_dictionary_page and chunks["uid"].has_dictionary_page
        assert not any(chunks[c].has_dictionary_page for c in ("path", "name", "size", "mtime", "ino"))
    total = 30 * 42
    # many small tasks really ran, each handing back a frontier the driver re-split
    assert open_manifest(m).info["tasks"] > 5
    assert ds.dataset(str(m), format="parquet").count_rows() == total
    con = duckdb.connect()
    assert con.execute(f"SELECT count(*) FROM read_parquet('{m}/*.parquet')").fetchone() == (total,)
    import dask.dataframe as dd
    import pandas as pd

    assert len(pd.read_parquet(m)) == total
    df = dd.read_parquet(str(m))
    file_bytes = df[df["type"] == "file"]["size"].sum().compute(scheduler="sync")
    assert int(file_bytes) == sum(100 + i for i in range(40)) * 30


def test_missing_root_exit_2_nothing_written(tmp_path):
    out = tmp_path / "m"
    proc = run_pfs("scan", tmp_path / "nope", "-o", out, "--workers", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"pfs: error: {tmp_path / 'nope'}: no such file or directory"]
    assert not out.exists()


def test_root_is_a_file_gives_one_row(tmp_path, dask_client):
    f = tmp_path / "data.bin"
    f.write_bytes(b"x" * 42)
    res = scan(f, tmp_path / "m", client=dask_client)
    got = rows(tmp_path / "m")
    assert list(got) == ["data.bin"] and got["data.bin"]["size"] == 42
    assert res.counts["entries"] == 1 and open_manifest(tmp_path / "m").root == str(tmp_path)


def test_unreadable_subdirectory_is_an_error_row_and_scan_goes_on(tmp_path):
    src = make_tree(tmp_path / "src", {"ok/a.txt": "a", "locked/hidden.txt": "h", "z.txt": "z"})
    os.chmod(src / "locked", 0o000)
    try:
        proc = run_pfs("scan", src, "-o", tmp_path / "m", "--workers", "1", "--json", drop_dac=True)
    finally:
        os.chmod(src / "locked", 0o755)
    assert proc.returncode == 1, proc.stderr
    assert "1 entries could not be read" in proc.stderr and "locked" in proc.stderr
    got = rows(tmp_path / "m")
    assert set(got) == {"ok", "ok/a.txt", "locked", "z.txt"}
    assert got["locked"]["type"] == "directory" and "Permission denied" in got["locked"]["error"]
    assert got["locked"]["size"] is not None  # its own stat worked; only listing failed
    summary = json.loads(proc.stdout)
    assert summary["counts"]["errors"] == 1 and summary["exit_code"] == 1


def test_files_vanishing_during_scan(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    gone = src / "gone"
    gone.mkdir()
    for i in range(50):
        (gone / f"f{i}").write_text("x")
    lister = LocalLister(str(src))
    lister.descend = 0  # list one directory, hand its subdirectories back
    listing = lister.list_dir((b"", None), get_pool(4))
    # everything below disappears between listing the parent and listing/stat-ing the children
    for i in range(50):
        (gone / f"f{i}").unlink()
    gone.rmdir()
    sub = listing.subdirs[0]
    child = lister.list_dir(sub, get_pool(4))
    assert child.vanished and not child.rows and child.error is None
    assert len(lister.sink) == 0  # no phantom rows (a step whose every entry vanished: tests/test_core.py)


def test_directory_swapped_for_symlink_after_listing_is_not_followed(tmp_path):
    src, outside = tmp_path / "src", tmp_path / "outside"
    (src / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("x")
    lister = LocalLister(str(src))
    lister.descend = 0  # list one directory, hand its subdirectories back
    (sub,) = lister.list_dir((b"", None), get_pool(4)).subdirs
    (src / "d").rmdir()
    (src / "d").symlink_to(outside)  # swapped between listing the parent and listing d
    listing = lister.list_dir(sub, get_pool(4))
    assert listing.vanished and listing.rows == [] and listing.subdirs == [] and listing.error is None


def _walk_local(root: Path, budget: Budget, items: list | None = None, descend: int | None = None):
    lister = LocalLister(str(root))
    lister.descend = min(lister.descend, budget.max_entries // 16)  # as scan_chunk sizes it
    if descend is not None:  # 0: a directory a listing, as on a network mount
        lister.descend = descend
    try:
        return walk(lister, items or [(b"", None)], get_pool(8), 8, budget, lambda buf: buf.take_table())
    finally:
        lister.close()


def _fanned(root: Path, fanout: int = 5, depth: int = 3) -> Path:
    """``fanout`` directories a level, ``depth`` levels (5, 25, 125), a file in each."""
    level = [root]
    for _ in range(depth):
        level = [d / f"d{i}" for d in level for i in range(fanout)]
        for d in level:
            d.mkdir(parents=True)
            (d / "f").write_text("x")
    return root


def test_a_walk_with_idle_workers_to_feed_hands_its_directories_back_early(tmp_path):
    """``share_dirs`` (a cluster's idle workers): with its whole time budget left, the walk starts no more
    directories once it holds that many and hands them back; the same budget without it walks the tree."""
    tree = _fanned(tmp_path / "t")
    tally, frontier = _walk_local(tree, Budget(10**6, 60), descend=0)
    assert tally.directories == 155 and frontier == []
    tally, frontier = _walk_local(tree, Budget(10**6, 60, share_dirs=10), descend=0)
    assert len(frontier) >= 10 and tally.directories < 155, (tally.directories, len(frontier))
    rest, left = _walk_local(tree, Budget(10**6, 60), items=frontier, descend=0)
    assert left == [] and tally.directories + rest.directories == 155  # nothing lost, nothing twice
    assert tally.files + rest.files == 155
    # what it was handed it always starts, however many: 25 directories with share_dirs=2
    handed = [(b"d%d/d%d" % (i, j), None) for i in range(5) for j in range(5)]
    tally, frontier = _walk_local(tree, Budget(10**6, 60, share_dirs=2), items=handed, descend=0)
    assert tally.files == 25 and len(frontier) == 125


def test_next_slice_shares_early_only_while_workers_wait_for_a_task():
    tuning = WalkTuning()
    root = deque([(b"", None)])
    _, budget = next_slice(root.copy(), 0, 24, 12, tuning, workers=3)
    assert budget.max_seconds == tuning.first_seconds and budget.share_dirs == 3  # a directory for each host
    _, budget = next_slice(root.copy(), 0, 24, 12, tuning)  # one worker process: nothing to spread to
    assert budget.max_seconds == tuning.first_seconds and budget.share_dirs == 0
    _, budget = next_slice(root.copy(), 2, 24, 12, tuning, workers=3)  # two tasks out and this one: a host each
    assert budget.share_dirs == 0
    four = deque((b"d%d" % i, None) for i in range(4))
    _, budget = next_slice(four, 0, 24, 12, tuning, workers=3)  # three left for three hosts: a short budget only
    assert budget.max_seconds == tuning.first_seconds and budget.share_dirs == 0
    wide = deque((b"d%d" % i, None) for i in range(40))
    _, budget = next_slice(wide, 0, 24, 12, tuning, workers=3)  # enough directories for every slot
    assert budget.max_seconds == tuning.max_seconds and budget.share_dirs == 0


def test_a_small_tree_is_spread_over_every_worker_process(tmp_path, dask_client):
    """A tree one task would walk whole within its first budget (on main: one task, one worker of two) is
    handed out over both worker processes of the cluster.  On a local disk a listing job walks on below
    its directory for 4,096 entries (``operators.scan.local.DESCEND``): five directories of 2,000 files."""
    from distributed import get_task_stream

    tree = tmp_path / "t"
    for i in range(5):
        make_tree(tree / f"d{i}", {f"f{j}": b"" for j in range(2000)})
    with get_task_stream(client=dask_client) as stream:
        res = scan(tree, tmp_path / "m", client=dask_client)
    assert res.counts["files"] == 10_000, res.counts
    workers = {r["worker"] for r in stream.data if str(r["key"]).startswith("pfs-scan-")}
    assert workers == set(dask_client.nthreads()), (workers, res.tasks)


def test_spent_budget_walks_on_down_a_chain_but_hands_back_a_shareable_frontier(tmp_path):
    chain = tmp_path / "chain"
    d = chain
    for i in range(30):
        d = d / f"d{i}"
        d.mkdir(parents=True)
        (d / "f").write_text("x")
    tally, frontier = _walk_local(chain, Budget(max_entries=1, max_seconds=0))
    assert frontier == [] and tally.directories == 30 and tally.files == 30  # nothing to share: kept going
    tally, frontier = _walk_local(chain, Budget(max_entries=1, max_seconds=0, lone_seconds=0))
    assert len(frontier) == 1 and tally.directories < 30  # the hard cap still ends the task
    wide = tmp_path / "wide"
    for i in range(5):
        (wide / f"d{i}" / "sub").mkdir(parents=True)
    tally, frontier = _walk_local(wide, Budget(max_entries=1, max_seconds=0))
    assert tally.entries == 0 and sorted(rel for rel, _ in frontier) == [b"d%d" % i for i in range(5)]


def _open_under(root) -> list[str]:
    """Descriptors of this process open on ``root`` or below (other threads' sockets come and go)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target == str(root) or target.startswith(f"{root}/"):
            found.append(target)
    return found


def test_walk_closes_every_directory_it_opened(tmp_path):
    make_balanced(tmp_path / "src", dirs=300, files_per_dir=3)
    tally, _ = _walk_local(tmp_path / "src", Budget(10**6, 60))
    assert tally.directories >= 300
    assert _open_under(tmp_path / "src") == []


def test_churning_tree_scans_without_errors(tmp_path, dask_client):
    src = tmp_path / "src"
    make_balanced(src, dirs=10, files_per_dir=30)
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            d = src / f"churn{i % 5}"
            d.mkdir(exist_ok=True)
            for j in range(20):
                (d / f"t{j}").write_text("t")
            for j in range(20):
                (d / f"t{j}").unlink()
            d.rmdir()
            i += 1

    t = threading.Thread(target=churn)
    t.start()
    try:
        for k in range(3):
            res = scan(src, tmp_path / f"m{k}", client=dask_client, tuning=SMALL_TASKS)
            assert res.errors == 0
            got = rows(tmp_path / f"m{k}")
            assert all(r["error"] is None for r in got.values())
            assert sum(1 for p in got if p.startswith("d0")) == 10 * 32
    finally:
        stop.set()
        t.join()


def test_existing_manifest_refused_unless_overwrite(tmp_path, dask_client):
    src = make_tree(tmp_path / "src", {"a": "1"})
    scan(src, tmp_path / "m", client=dask_client)
    (src / "b").write_text("2")
    with pytest.raises(PfsError, match="already holds a manifest; pass overwrite=True"):
        scan(src, tmp_path / "m", client=dask_client)
    assert set(rows(tmp_path / "m")) == {"a"}
    scan(src, tmp_path / "m", client=dask_client, overwrite=True)
    assert set(rows(tmp_path / "m")) == {"a", "b"}
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    with pytest.raises(PfsError, match="not empty and holds no manifest"):
        scan(src, tmp_path / "other", client=dask_client, overwrite=True)
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"


def test_unknown_protocol_and_missing_extra(tmp_path):
    proc = run_pfs("scan", "nosuchproto://bucket/x", "-o", tmp_path / "m")
    assert proc.returncode == 2 and "unknown protocol 'nosuchproto'" in proc.stderr
    # gs://, s3:// and az:// need no extra (obstore: operators.stores); OCI's fsspec backend is not installed
    proc = run_pfs("scan", "oci://bucket/x", "-o", tmp_path / "m")
    assert proc.returncode == 2 and "needs a package that is not installed" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_incomplete_manifest_is_refused_by_readers(tmp_path, dask_client):
    src = make_tree(tmp_path / "src", {"a": "1", "b/c": "2"})
    scan(src, tmp_path / "m", client=dask_client)
    (tmp_path / "m" / MARKER_NAME).unlink()
    with pytest.raises(IncompleteManifestError, match="failed or was interrupted"):
        open_manifest(tmp_path / "m")
    with pytest.warns(UserWarning, match="incomplete manifest"):
        assert not open_manifest(tmp_path / "m", allow_incomplete=True).complete
    proc = run_pfs("query", tmp_path / "m")
    assert proc.returncode == 2 and "--allow-incomplete" in proc.stderr


class KillWorkerOnce(WorkerPlugin):
    """Worker plugin: SIGKILL the worker process shortly after a scan task starts executing, once."""

    def __init__(self, marker: str, delay: float) -> None:
        self.marker = marker
        self.delay = delay

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish == "executing" and "pfs-scan" in str(key) and not str(key).endswith("-0000000"):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.write(fd, str(key).encode())
            os.close(fd)
            threading.Timer(self.delay, os.kill, (os.getpid(), signal.SIGKILL)).start()


def test_worker_killed_mid_scan_still_complete_without_duplicates(tmp_path):
    import cloudpickle
    from distributed import Client, LocalCluster

    import tests.test_scan as me

    cloudpickle.register_pickle_by_value(me)
    src = tmp_path / "src"
    expected = make_balanced(src, dirs=60, files_per_dir=60)
    marker = tmp_path / "killed"
    plugin = KillWorkerOnce(str(marker), 0.02)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        pids_before = set(client.run(os.getpid).values())
        client.register_plugin(plugin)
        tuning = ScanTuning(max_entries=300, max_seconds=5, first_seconds=5, max_dirs_per_task=6)
        res = scan(src, tmp_path / "m", client=client, tuning=tuning)
        deadline = time.time() + 30
        while len(client.nthreads()) < 2 and time.time() < deadline:
            time.sleep(0.2)
        pids_after = set(client.run(os.getpid).values())
    assert marker.exists(), "the plugin never fired"
    assert pids_before != pids_after, "no worker process was killed"
    table = ds.dataset(str(tmp_path / "m"), format="parquet").to_table()
    paths = table.column("path").to_pylist()
    assert len(paths) == len(set(paths)) == expected == res.counts["entries"]
    assert not list((tmp_path / "m").glob(".part-*"))


def test_s3_scan_against_moto(tmp_path, s3_server, s3fs_fs, dask_client):
    fs = s3fs_fs
    fs.makedirs("pfs-bucket", exist_ok=True)
    for key in ["data/a/1.txt", "data/a/2.txt", "data/b/c/3.bin", "data/top.txt", "data/z/4.txt"]:
        fs.pipe(f"pfs-bucket/{key}", key.encode())
    res = scan("s3://pfs-bucket/data", tmp_path / "m", client=dask_client, storage_options=s3_server)
    got = rows(tmp_path / "m")
    files = {p for p, r in got.items() if r["type"] == "file"}
    assert files == {"a/1.txt", "a/2.txt", "b/c/3.bin", "top.txt", "z/4.txt"}
    assert {p for p, r in got.items() if r["type"] == "directory"} == {"a", "b", "b/c", "z"}
    assert got["b/c/3.bin"]["size"] == len(b"data/b/c/3.bin") and got["b/c/3.bin"]["mtime"] is not None
    assert res.counts["files"] == 5 and res.errors == 0
    assert open_manifest(tmp_path / "m").root == "s3://pfs-bucket/data"
    # the manifest itself can live on S3 too
    scan("s3://pfs-bucket/data", "s3://pfs-bucket/manifests/m1", client=dask_client,
         storage_options=s3_server, out_storage_options=s3_server)  # fmt: skip
    assert fs.exists("pfs-bucket/manifests/m1/_manifest.json")


def test_cli_query_du_info(tmp_path):
    src = make_tree(
        tmp_path / "src",
        {"imgs/a.jpg": b"x" * 2000, "imgs/b.JPG": b"x" * 3000, "docs/r.txt": b"x" * 10, "docs/deep/n.txt": b"y"},
    )
    run_pfs("scan", src, "-o", tmp_path / "m", "--workers", "1", check=True)
    proc = run_pfs("query", tmp_path / "m", "--where", "size > 1000 AND type = 'file'", "--select", "path, size",
                   "--format", "csv", check=True)  # fmt: skip
    assert proc.stdout.splitlines() == ["path,size", "imgs/a.jpg,2000", "imgs/b.JPG,3000"]
    proc = run_pfs("query", tmp_path / "m", "--where", "name LIKE '%.txt'", "--format", "json", check=True)
    assert {r["path"] for r in json.loads(proc.stdout)} == {"docs/r.txt", "docs/deep/n.txt"}
    run_pfs("query", tmp_path / "m", "--format", "parquet", "-o", tmp_path / "sel.parquet", "--where",
            "type = 'file'", check=True)  # fmt: skip
    assert duckdb.connect().execute(f"SELECT count(*) FROM '{tmp_path}/sel.parquet'").fetchone() == (4,)
    du = json.loads(run_pfs("du", tmp_path / "m", "--json", check=True).stdout)
    groups = {g["key"]: g for g in du["groups"]}
    assert groups["imgs"]["bytes"] == 5000 and groups["docs"]["bytes"] == 11 and groups["docs"]["files"] == 2
    assert du["total"]["files"] == 4 and du["total"]["bytes"] == 5011
    ext = {
        g["key"]: g["files"]
        for g in json.loads(run_pfs("du", tmp_path / "m", "--by", "ext", "--json").stdout)["groups"]
    }
    assert ext["jpg"] == 2 and ext["txt"] == 2
    # du straight from a URL scans first
    du_url = json.loads(run_pfs("du", src / "docs", "--json", "--workers", "1", check=True).stdout)
    assert du_url["total"]["bytes"] == 11
    info = run_pfs("info", tmp_path / "m", check=True).stdout
    assert "entries   7" in info and "root      " + str(src) in info
    bad = run_pfs("query", tmp_path / "m", "--where", "nosuchcol > 1")  # bad input, not a bound hit: one line
    assert bad.returncode == 2 and bad.stderr.startswith("pfs: error: query failed: Binder Error: Referenced column")
    assert len(bad.stderr.splitlines()) == 1 and "bounds" not in bad.stderr, bad.stderr


def test_dashboard_only_for_a_terminal_unless_asked(tmp_path):
    """A batch run (no TTY) skips the dashboard's start-up cost; PFS_DASHBOARD=1 or --dashboard serves it."""
    src = make_tree(tmp_path / "src", {"a": b"x"})
    quiet = run_pfs("scan", src, "-o", tmp_path / "m1", "--workers", "1", check=True)
    assert "dashboard:" not in quiet.stderr
    shown = run_pfs("scan", src, "-o", tmp_path / "m2", "--workers", "1", env={"PFS_DASHBOARD": "1"}, check=True)
    assert re.search(r"^dashboard: http://\S+:\d+/status$", shown.stderr, re.M), shown.stderr
    flag = run_pfs("scan", src, "-o", tmp_path / "m3", "--workers", "1", "--dashboard", check=True)
    assert "dashboard: http" in flag.stderr


def test_open_dirs_walks_down_component_by_component_and_shares_one_descriptor(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from operators.core.dirfd import OpenDirs

    deep = b"/".join([b"d"] * 600)  # deeper than Python's recursion limit allows recursing per level
    os.makedirs(os.path.join(os.fsencode(tmp_path), deep))
    (tmp_path / "a").mkdir()
    with open(os.path.join(os.fsencode(tmp_path), deep, b"f"), "wb") as f:
        f.write(b"bottom")
    before = len(os.listdir("/proc/self/fd"))
    dirs = OpenDirs(os.fsencode(tmp_path))
    fd = dirs.open_file(deep + b"/f", os.O_RDONLY)
    assert os.read(fd, 10) == b"bottom"
    os.close(fd)
    barrier = threading.Barrier(16)

    def ask(_):
        barrier.wait()
        handle = dirs.handle(b"a")
        handle.release()
        return handle.fd

    with ThreadPoolExecutor(16) as pool:
        assert len(set(pool.map(ask, range(16)))) == 1  # one opener; the others waited for it
    dirs.close()
    assert len(os.listdir("/proc/self/fd")) == before


def test_open_dirs_lifts_a_low_soft_limit_on_open_files(tmp_path):
    code = (
        "import resource; from operators.core.dirfd import OpenDirs; OpenDirs(b'/').close(); "
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    out = subprocess.run(
        ["prlimit", "--nofile=256:4096", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[1],
    ).stdout
    assert out.strip() == "4096"


def _without_atime(got: dict[str, dict]) -> dict[str, dict]:
    """Rows less ``atime``: listing a directory (the first scan) moves its atime."""
    return {path: {k: v for k, v in row.items() if k != "atime"} for path, row in got.items()}


def _task_ids(manifest: Path) -> set[str]:
    return {p.name.split("-")[1] for p in manifest.glob("part-*.parquet")}


def test_driver_walks_a_local_tree_in_journaled_slices(tmp_path, dask_client, monkeypatch):
    """No cluster given: the driver walks the local tree itself (``dask_pfs.scan.driver_walk``), slice by
    slice, each a task with its own parts, and finishes without a worker; rows equal a cluster's."""
    from dask_pfs.clusters.client import ClusterOptions
    from dask_pfs.scan import driver_walk as scan_here

    n = make_balanced(tmp_path / "t", dirs=30, files_per_dir=20)
    on_cluster = scan(tmp_path / "t", tmp_path / "on-cluster", dask_client, tuning=SMALL_TASKS)
    expected = _without_atime(rows(Path(on_cluster.manifest)))
    monkeypatch.setattr(scan_here, "SLICE", Budget(max_entries=100, max_seconds=30, lone_seconds=30))
    res = scan(tmp_path / "t", tmp_path / "m", cluster=ClusterOptions(workers=1, dashboard=False))
    info = json.loads((tmp_path / "m" / MARKER_NAME).read_text())
    assert res.counts["entries"] == n and res.tasks > 1  # several slices (each past its 100 entries)
    assert info["options"]["workers"] == 0 and info["tasks"] == res.tasks
    assert _task_ids(tmp_path / "m") == {f"{i:07d}" for i in range(res.tasks)}
    assert _without_atime(rows(tmp_path / "m")) == expected
    assert not list((tmp_path / "m").glob(".pfs-journal-*"))  # the journal went with completion


def test_driver_hands_its_frontier_to_the_cluster_after_its_time(tmp_path, monkeypatch, dask_client):
    """Past ``DRIVER_SECONDS`` the embedded cluster takes over from the frontier the driver left:
    task numbers go on, nothing is walked twice or missed.  Closing the embedded cluster leaves this
    process's other cluster (the test session's) alone: its workers were once killed with it."""
    from dask_pfs.clusters.client import ClusterOptions
    from dask_pfs.scan import driver_walk as scan_here

    others = dask_client.run(os.getpid)
    n = make_balanced(tmp_path / "t", dirs=30, files_per_dir=20)
    monkeypatch.setattr(scan_here, "SLICE", Budget(max_entries=100, max_seconds=30, lone_seconds=30))
    monkeypatch.setattr(scan_here, "DRIVER_SECONDS", 0.0)  # one slice here, the rest on the cluster
    res = scan(tmp_path / "t", tmp_path / "m", cluster=ClusterOptions(workers=1, dashboard=False))
    info = json.loads((tmp_path / "m" / MARKER_NAME).read_text())
    assert info["options"]["workers"] == 1 and res.tasks >= 2
    assert "0000000" in _task_ids(tmp_path / "m")  # the driver's slice is kept
    got = rows(tmp_path / "m")
    assert len(got) == n and res.counts["entries"] == n
    assert {p for p in got if p.endswith(".dat")} == {
        f"d{d:03d}/sub/f{i:04d}.dat" for d in range(30) for i in range(20)
    }
    time.sleep(1)  # a killed worker would be gone (or restarting) by now
    assert dask_client.run(os.getpid) == others
