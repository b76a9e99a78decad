"""pfs-sim:// (benchmarks/simfs.py): the synthetic tree, its server model, and a 1,000,000-entry scan.

The big scan goes through the whole engine on the shared cluster of worker processes (the remote
lister, the driver's frontier, tasks, parts, the journal and the marker) and checks every row:
the exact counts the tree's spec implies, no path twice, byte totals equal to the tree's own.
"""

from __future__ import annotations

import json
import threading
import time

import duckdb
import fsspec
import pytest

from benchmarks.simfs import SHAPES, CostModel, SimServer, Tree, TreeSpec, count, register, sim_url
from dask_pfs import scan
from dask_pfs.errors import PfsError

from .conftest import REPO


@pytest.fixture(scope="module")
def sim_client(dask_client):
    """The shared cluster, with pfs-sim registered in the test process and in every worker."""
    register()
    repo = str(REPO)

    def setup() -> None:  # a closure: sent by value, so workers need not import this test module
        import sys

        if repo not in sys.path:
            sys.path.insert(0, repo)
        from benchmarks.simfs import register as register_here

        register_here()

    dask_client.run(setup)
    return dask_client


def walk(fs, root: str) -> list[dict]:
    out, stack = [], [root]
    while stack:
        infos = fs.ls(stack.pop(), detail=True)
        out.extend(infos)
        stack.extend(i["name"] for i in infos if i["type"] == "directory")
    return out


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_has_exactly_the_entries_asked_for(shape):
    register()
    fs = fsspec.filesystem("pfs-sim")
    for entries in (0, 1, 7, 5_000):
        label = sim_url(entries=entries, shape=shape, seed=3, depth=20).removeprefix("pfs-sim://").rstrip("/")
        infos = walk(fs, label)
        names = [i["name"] for i in infos]
        assert len(infos) == entries, (shape, entries)
        assert len(set(names)) == len(names)
        expected = count(TreeSpec(entries=entries, shape=shape, seed=3, depth=20))
        assert sum(i["type"] == "directory" for i in infos) == expected["directories"]


def test_the_tree_depends_on_its_seed_only():
    register()
    a, b = Tree(TreeSpec(entries=20_000, shape="mix", seed=5)), Tree(TreeSpec(entries=20_000, shape="mix", seed=5))
    assert a.listing("") == b.listing("")
    assert a.listing("d0000") == b.listing("d0000")
    assert Tree(TreeSpec(entries=20_000, shape="mix", seed=6)).listing("") != a.listing("")


def test_shapes_look_like_their_names():
    deep = count(TreeSpec(entries=10_000, shape="deep", depth=50))
    assert deep["directories"] == 49
    flat = Tree(TreeSpec(entries=10_000, shape="flat"))
    assert flat.node("").files == 10_000 and not flat.node("").children
    bal = Tree(TreeSpec(entries=10_000, shape="balanced", fanout=10, files=100))
    assert bal.node("").files == 100 and len(bal.node("").children) == 10
    mix = count(TreeSpec(entries=200_000, shape="mix", seed=1))
    assert 0.03 < mix["directories"] / mix["entries"] < 0.2  # like real project trees: mostly files


def test_info_agrees_with_the_listing_and_missing_paths_raise():
    register()
    fs = fsspec.filesystem("pfs-sim")
    label = "entries=3000,shape=mix,seed=2"
    listed = {i["name"]: i for i in walk(fs, label)}
    for name in list(listed)[:: len(listed) // 25]:
        assert fs.info(name) == listed[name]
    assert fs.info(label)["type"] == "directory"
    with pytest.raises(FileNotFoundError):
        fs.info(f"{label}/d9999")
    with pytest.raises(FileNotFoundError):
        fs.ls(f"{label}/nonesuch")
    with pytest.raises(ValueError, match="unknown key"):
        fs.ls("entries=10,colour=blue")


def test_a_bounded_server_holds_its_rate_across_threads(tmp_path):
    """2 slots of 5 ms: at most 400 requests/s, so 60 requests from 12 threads take >= 150 ms, however
    they are scheduled (a lower bound: a loaded host can only make it slower)."""
    server = SimServer.create(CostModel(latency_ms=0.0, slots=2, service_us=5000))
    try:
        register()
        fs = fsspec.filesystem("pfs-sim", slots=2, service_us=5000, server=server.name)
        label = "entries=100,shape=flat"

        def work() -> None:
            for _ in range(5):
                fs.ls(label)

        threads = [threading.Thread(target=work) for _ in range(12)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        c = server.counters()
        assert c["requests"] == c["ls"] == 60 and c["entries"] == 6000
        assert elapsed >= 60 / 400 - 0.005
        assert c["queue_ns"] > 0 and c["inflight"] == 0
        server.set_latency(3.0)
        t0 = time.monotonic()
        fs.ls(label)
        assert time.monotonic() - t0 >= 0.003  # the new round trip, live
    finally:
        server.remove()


def test_scan_of_a_missing_sim_path_is_refused(sim_client, tmp_path):
    with pytest.raises(PfsError, match="no such file"):
        scan("pfs-sim://entries=100,shape=flat/d0001", tmp_path / "m", client=sim_client)


def test_a_million_entry_scan_through_the_engine(sim_client, tmp_path):
    """1,000,000 entries (balanced, 10 subdirectories and 100 files per directory), zero latency."""
    spec = TreeSpec(entries=1_000_000, shape="balanced", fanout=10, files=100, seed=7)
    out = tmp_path / "m"
    res = scan(sim_url(entries=spec.entries, shape="balanced", fanout=10, files=100, seed=7), out, client=sim_client)
    expected = count(spec)
    assert res.exit_code == 0
    assert {k: res.counts[k] for k in expected} == expected
    assert res.tasks > 1  # the frontier was split over tasks
    assert not list(out.glob(".pfs-journal-*"))  # journaled, then removed after the marker
    marker = json.loads((out / "_manifest.json").read_text())
    assert marker["counts"]["entries"] == 1_000_000 and marker["tasks"] == res.tasks
    assert marker["parts"] == len(list(out.glob("*.parquet"))) >= res.tasks
    tree = Tree(spec)
    want_bytes = sum(size for rel in _dirs(tree) for _, size, _ in tree.listing(rel)[1])
    glob = f"{out}/*.parquet"
    con = duckdb.connect()
    ((rows, distinct, nbytes, dirs, top),) = con.execute(
        f"SELECT count(*), count(DISTINCT path), sum(size) FILTER (type = 'file'), "
        f"count(*) FILTER (type = 'directory'), count(*) FILTER (depth = 1) FROM read_parquet('{glob}')"
    ).fetchall()
    assert rows == distinct == 1_000_000
    assert nbytes == want_bytes == res.counts["bytes"]
    assert dirs == expected["directories"]
    assert top == 110
    (info,) = con.execute(
        f"SELECT size FROM read_parquet('{glob}') WHERE path = 'd0003/d0001/f0042' || '{_ext(tree, 'd0003/d0001', 42)}'"
    ).fetchall()
    assert info[0] == tree.listing("d0003/d0001")[1][42][1]


def _dirs(tree: Tree):
    stack = [""]
    while stack:
        rel = stack.pop()
        yield rel
        stack.extend(f"{rel}/{d}" if rel else d for d, _ in tree.listing(rel)[0])


def _ext(tree: Tree, rel: str, i: int) -> str:
    return tree.listing(rel)[1][i][0].removeprefix(f"f{i:04d}")
