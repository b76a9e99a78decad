"""The provider's parts that need no DAG run: the tree watcher's run() against a real temp tree,
the manifest trigger, PfsManifest partitions, OpenLineage names and facets, the connection
form and PfsDaskHook.test_connection against real schedulers (plain and TLS)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest

from dask_pfs import scan


@pytest.fixture(scope="module")
def client(dask_processes):
    from distributed import Client

    with Client(dask_processes, set_as_default=False) as c:
        yield c


def make_tree(root) -> None:
    for d in ("a", "a/b", "c"):
        (root / d).mkdir(parents=True, exist_ok=True)
        for i in range(3):
            (root / d / f"f{i}.dat").write_bytes(b"x" * (i + 1))
    (root / os.fsdecode(b"caf\xe9")).mkdir()  # a directory whose name is not UTF-8


class Watch:
    """Runs a trigger's async run() in the background and collects its events."""

    def __init__(self, trigger) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task = asyncio.create_task(self._pump(trigger))

    async def _pump(self, trigger) -> None:
        async for event in trigger.run():
            await self.queue.put(event.payload)

    async def next(self, timeout: float = 20.0) -> dict:
        getter = asyncio.ensure_future(self.queue.get())
        done, _ = await asyncio.wait([getter, self.task], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            return getter.result()
        getter.cancel()
        if self.task in done:
            self.task.result()  # raises the trigger's error
            raise AssertionError("the trigger ended without an event")
        raise TimeoutError

    async def quiet(self, seconds: float) -> None:
        """No event within ``seconds``."""
        with pytest.raises(TimeoutError):
            await self.next(seconds)

    def stop(self) -> None:
        self.task.cancel()


def test_tree_changed_trigger(client, tmp_path):
    """Fires for files landing in an old, a new and a non-UTF-8 directory and for a removed
    directory, once each; not for a rewritten file; a rescan becomes the new baseline."""
    from airflow_pfs.triggers import PfsTreeChangedTrigger

    tree, manifest = tmp_path / "tree", tmp_path / "manifest"
    make_tree(tree)
    scan(tree, manifest, client=client)
    trigger = PfsTreeChangedTrigger(str(manifest), poll_interval=0.05)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_pfs.triggers.PfsTreeChangedTrigger"
    assert json.loads(json.dumps(kwargs)) == {"manifest": str(manifest), "poll_interval": 0.05}

    async def scenario():
        watch = Watch(PfsTreeChangedTrigger(**kwargs))
        try:
            await watch.quiet(1.0)  # nothing changed since the scan
            (tree / "a" / "b" / "f0.dat").write_bytes(b"rewritten in place")  # same names: not seen
            await watch.quiet(0.5)
            (tree / "a" / "b" / "new.dat").write_bytes(b"landed")
            event = await watch.next()
            assert (event["reason"], event["changed"], event["samples"]) == ("changed", 1, ["a/b"])
            assert event["root"] == str(tree) and event["checked"] == 5  # root + 4 directories
            await watch.quiet(0.5)  # reported once
            (tree / "new" / "deep").mkdir(parents=True)
            event = await watch.next()
            assert event["samples"] == ["."]  # the root got a new entry
            (tree / "new" / "deep" / "x.dat").write_bytes(b"x")  # inside a directory the scan never saw
            assert (await watch.next())["samples"] == ["new/deep"]
            (tree / os.fsdecode(b"caf\xe9") / "y.dat").write_bytes(b"y")
            assert (await watch.next())["samples"] == [os.fsdecode(b"caf\xe9")]
            shutil.rmtree(tree / "c")
            event = await watch.next()
            assert sorted(event["samples"]) == [".", "c"]
            scan(tree, manifest, client=client, overwrite=True)  # the DAG's rescan: the new baseline
            await watch.quiet(1.0)
            (tree / "new" / "z.dat").write_bytes(b"z")
            assert (await watch.next())["samples"] == ["new"]
        finally:
            watch.stop()

    asyncio.run(scenario())


def test_tree_changed_trigger_without_manifest(client, tmp_path):
    """No manifest yet: one event (a first scan is due), then quiet until a manifest is written;
    a manifest of an object store is refused."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.triggers import PfsTreeChangedTrigger

    tree, manifest = tmp_path / "tree", tmp_path / "manifest"
    make_tree(tree)

    async def scenario():
        watch = Watch(PfsTreeChangedTrigger(str(manifest), poll_interval=0.05))
        try:
            assert (await watch.next()) == {"manifest": str(manifest), "reason": "no-manifest", "changed": 0}
            await watch.quiet(0.5)
            scan(tree, manifest, client=client)
            await watch.quiet(0.5)
            (tree / "c" / "new.dat").write_bytes(b"n")
            assert (await watch.next())["samples"] == ["c"]
        finally:
            watch.stop()
        with pytest.raises(AirflowException, match="local manifests"):
            await Watch(PfsTreeChangedTrigger("s3://bucket/manifest", poll_interval=0.05)).next()

    asyncio.run(scenario())


def test_manifest_trigger(client, tmp_path):
    """Waits while the manifest is missing or selects too few rows; reports a bad where-clause."""
    from airflow_pfs.triggers import PfsManifestTrigger

    tree, manifest = tmp_path / "tree", tmp_path / "manifest"
    make_tree(tree)

    async def scenario():
        watch = Watch(PfsManifestTrigger(str(manifest), "name LIKE 'f%'", 10, poll_interval=0.05))
        try:
            await watch.quiet(0.5)
            await asyncio.to_thread(scan, tree, manifest, client=client)  # 9 files match: not enough
            await watch.quiet(1.0)
            (tree / "c" / "f9.dat").write_bytes(b"9")
            await asyncio.to_thread(scan, tree, manifest, client=client, overwrite=True)
            event = await watch.next()
        finally:
            watch.stop()
        assert event["status"] == "ready"
        assert event["result"] == {"manifest": str(manifest), "root": str(tree), "entries": 14, "selected": 10}
        bad = await Watch(PfsManifestTrigger(str(manifest), "no_such_column > 1", poll_interval=0.05)).next()
        assert bad["status"] == "error" and "no_such_column" in bad["error"]

    asyncio.run(scenario())


def test_partitions(client, tmp_path, monkeypatch):
    """Parts cover the selection exactly once, are about equal, stay JSON; caps and bad input."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.manifests import PfsManifest

    tree, manifest = tmp_path / "tree", tmp_path / "manifest"
    for i in range(100):
        (tree / f"d{i % 7}").mkdir(parents=True, exist_ok=True)
        (tree / f"d{i % 7}" / f"it's-{i:03d}.dat").write_bytes(b"p" * i)  # a quote in every name
    scan(tree, manifest, client=client)
    m = PfsManifest({"manifest": str(manifest)})  # an upstream scan result works too
    files = "type = 'file'"
    assert m.count() == 107 and m.count(files) == 100
    for n, sizes in [(1, [100]), (3, [34, 33, 33]), (8, [13, 12, 13, 12, 13, 12, 13, 12])]:
        parts = m.partitions(where=files, n=n)
        assert [m.count(p["where"]) for p in parts] == sizes
        assert json.loads(json.dumps(parts)) == parts and {p["manifest"] for p in parts} == {str(manifest)}
    assert [m.count(p["where"]) for p in m.partitions(where=files, max_entries=30)] == [25, 25, 25, 25]
    assert len(m.partitions(n=500)) == 107  # never more parts than rows
    assert m.partitions(where="size > 1e9", n=4) == [{"manifest": str(manifest), "where": "(size > 1e9)"}]
    with pytest.raises(AirflowException, match=r"n=2000 is over core\.max_map_length=1024"):
        m.partitions(n=2000)
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "50")
    with pytest.raises(AirflowException, match=r"100 mapped tasks, over core\.max_map_length=50: raise"):
        m.partitions(where=files, max_entries=1)
    with pytest.raises(AirflowException, match="either n"):
        m.partitions(n=2, max_entries=3)
    with pytest.raises(AirflowException, match="no_such_column"):
        m.partitions(where="no_such_column = 1", n=2)
    with pytest.raises(AirflowException, match="no such manifest"):
        PfsManifest(str(tmp_path / "nowhere")).count()
