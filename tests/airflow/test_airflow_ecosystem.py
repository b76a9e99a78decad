"""The provider's parts that need no DAG run: the tree watcher's run() against a real temp tree,
the manifest trigger, PfsManifest partitions, OpenLineage names and facets, the connection
form and PfsDaskHook.test_connection against real schedulers (plain and TLS)."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import shutil
import time

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
    directory, once each; not for a rewritten file; a rescan (watched while it runs) becomes the
    new baseline."""
    from airflow_pfs.data_triggers import PfsTreeChangedTrigger

    tree, manifest = tmp_path / "tree", tmp_path / "manifest"
    make_tree(tree)
    scan(tree, manifest, client=client)
    trigger = PfsTreeChangedTrigger(str(manifest), poll_interval=0.05)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_pfs.data_triggers.PfsTreeChangedTrigger"
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
            # the DAG's rescan, polled while it runs (no marker meanwhile): the last baseline stays,
            # no "no-manifest" event; the rewritten manifest is the new baseline
            await asyncio.to_thread(scan, tree, manifest, client=client, overwrite=True)
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

    from airflow_pfs.data_triggers import PfsTreeChangedTrigger

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
        with pytest.raises(AirflowException, match="give the path of a local manifest"):
            await Watch(PfsTreeChangedTrigger("s3://bucket/manifest", poll_interval=0.05)).next()

    asyncio.run(scenario())


def test_manifest_trigger(client, tmp_path):
    """Waits while the manifest is missing or selects too few rows; reports a bad where-clause."""
    from airflow_pfs.data_triggers import PfsManifestTrigger

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


def test_manifest_trigger_fires_no_sooner_than_the_settle_window(client, tmp_path, monkeypatch):
    """A manifest complete when the trigger starts: the event waits out ``first_check`` (Airflow 3.3 fails a
    resumed task whose trigger fires before the scheduler drained the deferring try's exit,
    airflow_pfs.defer_race), and comes at once with 0. A bad PFS_DEFER_FIRST_CHECK is refused."""
    from airflow_pfs.data_triggers import PfsManifestTrigger

    tree, manifest = tmp_path / "tree", tmp_path / "manifest"
    make_tree(tree)
    scan(tree, manifest, client=client)

    async def first_event(trigger: PfsManifestTrigger) -> tuple[dict, float]:
        t0 = time.monotonic()
        event = await anext(trigger.run())
        return event.payload, time.monotonic() - t0

    held, waited = asyncio.run(
        first_event(PfsManifestTrigger(str(manifest), None, 1, poll_interval=0.05, first_check=2))
    )
    assert held["status"] == "ready" and waited >= 2.0, waited
    at_once, soon = asyncio.run(first_event(PfsManifestTrigger(str(manifest), None, 1, first_check=0)))
    assert at_once["status"] == "ready" and soon < 1.5, soon
    assert PfsManifestTrigger(str(manifest)).serialize()[1]["first_check"] == 0  # this suite's setting
    monkeypatch.setenv("PFS_DEFER_FIRST_CHECK", "soon")
    with pytest.raises(ValueError, match="PFS_DEFER_FIRST_CHECK='soon'"):
        PfsManifestTrigger(str(manifest))


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
        assert not [p for p in parts if "\n" in (p["where"] or "")], parts  # no stray newline in XCom
    commented = m.partitions(where="type = 'file' -- files only", n=2)  # the newline ends a trailing comment
    assert [m.count(p["where"]) for p in commented] == [50, 50]
    assert [m.count(p["where"]) for p in m.partitions(where=files, max_entries=30)] == [25, 25, 25, 25]
    assert len(m.partitions(n=500)) == 107  # never more parts than rows
    (empty,) = m.partitions(where="size > 1e9", n=4)  # an empty selection: one part, still mapped once
    assert empty["manifest"] == str(manifest) and m.count(empty["where"]) == 0
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


@pytest.mark.parametrize(
    ("url", "namespace", "name"),
    [
        ("/data/x/", "file", "/data/x"),
        ("file:///data/./x", "file", "/data/x"),
        ("s3://Bucket/a/b/", "s3://Bucket", "a/b"),
        ("s3://bucket", "s3://bucket", "/"),
        ("s3a://b/k", "s3://b", "k"),
        ("gcs://b/k/", "gs://b", "k"),
        ("sftp://user:secret@host:2222/srv/data/", "file://host:2222", "/srv/data"),
        ("sftp://host/srv", "file://host:22", "/srv"),
        ("hdfs://nn:8020/p", "hdfs://nn:8020", "/p"),
    ],
)
def test_openlineage_names(url, namespace, name):
    """The OpenLineage naming spec: file / s3://bucket / remote file system file://host:port."""
    from airflow_pfs.lineage import dataset_name

    assert dataset_name(url) == (namespace, name)


def test_operator_lineage_facets():
    """Remove drops a tree (not in a dry run), sync writes the destination and its plan; the pfs
    run facet carries the counts and matches the schema shipped with the provider."""
    import jsonschema
    from openlineage.client.serde import Serde

    import airflow_pfs
    from airflow_pfs.operators import PfsRemoveOperator, PfsSyncOperator

    def lineage(op, result):
        op._pfs_result = result
        return Serde.to_dict(op.get_openlineage_facets_on_complete(None))

    rm = lineage(PfsRemoveOperator(task_id="rm", path="/scratch/old/"), {"removed_files": 3, "exit_code": 0})
    assert rm["inputs"] == [] and [(d["namespace"], d["name"]) for d in rm["outputs"]] == [("file", "/scratch/old")]
    assert rm["outputs"][0]["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "DROP"
    dry = lineage(PfsRemoveOperator(task_id="dry", manifest="/m", where="size > 0"), {"dry_run": True, "target": "/t"})
    assert [d["name"] for d in dry["inputs"]] == ["/m"] and dry["outputs"] == []
    assert dry["run_facets"]["pfs"]["dryRun"] is True

    result = {"plan": "/plans/p1", "copied_files": 4, "copied_bytes": 40, "new": 4, "errors": 0, "exit_code": 0}
    sync = lineage(PfsSyncOperator(task_id="sync", src="s3://in/data", dst="/mirror"), result)
    assert [(d["namespace"], d["name"]) for d in sync["inputs"]] == [("s3://in", "data")]
    assert [(d["namespace"], d["name"]) for d in sync["outputs"]] == [("file", "/mirror"), ("file", "/plans/p1")]
    assert sync["outputs"][0]["outputFacets"]["outputStatistics"] == {
        "_producer": sync["outputs"][0]["outputFacets"]["outputStatistics"]["_producer"],
        "_schemaURL": sync["outputs"][0]["outputFacets"]["outputStatistics"]["_schemaURL"],
        "fileCount": 4,
        "size": 40,
    }
    facet = sync["run_facets"]["pfs"]
    assert facet["counts"] == {"copied_files": 4, "copied_bytes": 40, "new": 4, "errors": 0}
    schema_file = os.path.join(os.path.dirname(airflow_pfs.__file__), "pfs_run_facet.schema.json")
    with open(schema_file) as f:
        own = json.load(f)["$defs"]["PfsRunFacet"]["allOf"][1]  # [0] is OpenLineage's RunFacet
    assert facet["_schemaURL"].startswith("airflow_pfs/pfs_run_facet.schema.json#")
    jsonschema.validate(facet, own)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**facet, "counts": {"files": "many"}}, own)


def test_connection_form_fields():
    """The form fields come from the provider info (Airflow 3.2+ conn-fields), not hook methods;
    the provider info lists the sensor and trigger modules."""
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    widgets = manager.connection_form_widgets
    for name in ("mode", "workers", "threads", "scheduler_file", "tls_ca_file", "tls_cert", "tls_key"):
        assert widgets[f"extra__pfs_dask__{name}"].hook_class_name == "airflow_pfs.hooks.PfsDaskHook"
    assert widgets["extra__pfs_dask__mode"].field["schema"]["enum"] == ["local", "scheduler"]
    assert widgets["extra__pfs_dask__tls_ca_file"].field["schema"]["title"] == "TLS CA file"
    assert manager.field_behaviours["pfs_dask"]["hidden_fields"] == ["login", "password"]
    from airflow_pfs import get_provider_info

    info = get_provider_info()
    modules = {kind: info[kind][0]["python-modules"] for kind in ("operators", "hooks", "sensors", "triggers")}
    assert modules["sensors"] == ["airflow_pfs.sensors"]
    assert hasattr(importlib.import_module("airflow_pfs.sensors"), "PfsManifestSensor")
    triggers = set().union(*(vars(importlib.import_module(m)) for m in modules["triggers"]))
    assert {"PfsJobTrigger", "PfsManifestTrigger", "PfsTreeChangedTrigger"} <= triggers


def test_hook_test_connection(dask_processes, tmp_path, monkeypatch):
    """Local mode, the scheduler processes, nothing listening, and a TLS-only scheduler reached
    with the connection's TLS files (the protocol defaults to tls); incomplete TLS is refused."""
    from distributed import LocalCluster, Security

    from airflow_pfs.hooks import PfsDaskHook

    from .conftest import _free_port

    def test(conn_id: str, **conn) -> tuple[bool, str]:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "pfs_dask", **conn}))
        return PfsDaskHook(conn_id).test_connection()

    expected = (True, "local mode: each task starts an embedded LocalCluster of 3 worker processes")
    assert test("t_local", host="local", extra={"workers": 3}) == expected
    host, port = dask_processes.removeprefix("tcp://").rsplit(":", 1)
    ok, message = test("t_plain", host=host, port=int(port))
    assert ok and message.startswith(f"Dask scheduler {dask_processes}: 1 workers, 4 threads"), message
    down = _free_port()
    ok, message = test("t_down", host="127.0.0.1", port=down)
    assert not ok and message.startswith(f"cannot reach the Dask scheduler tcp://127.0.0.1:{down}"), message

    security = Security.temporary()
    files = {}
    for field, pem in (("tls_ca_file", "tls_ca_file"), ("tls_cert", "tls_client_cert"), ("tls_key", "tls_client_key")):
        files[field] = str(tmp_path / f"{field}.pem")
        with open(files[field], "w") as f:
            f.write(getattr(security, pem))
    with LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        processes=False,
        protocol="tls://",
        host="127.0.0.1",
        security=security,
        dashboard_address=":0",
    ) as cluster:
        tls_port = int(cluster.scheduler_address.rsplit(":", 1)[1])
        ok, message = test("t_tls", host="127.0.0.1", port=tls_port, extra=files)
        assert ok and message.startswith(f"Dask scheduler tls://127.0.0.1:{tls_port}: 1 workers, 2 threads"), message
        with PfsDaskHook("t_tls").client() as client:
            assert client.submit(sum, [1, 2], pure=False).result() == 3
        missing_key = {**files, "tls_key": str(tmp_path / "no-such-key.pem")}
        assert test("t_tls_nokey", host="127.0.0.1", port=tls_port, extra=missing_key) == (
            False,
            f"TLS key {missing_key['tls_key']}: not a readable file",
        )
        ok, message = test(
            "t_tls_partial", host="127.0.0.1", port=tls_port, extra={"tls_ca_file": files["tls_ca_file"]}
        )
        assert not ok and message.startswith("pfs_dask connection: TLS needs a CA file and a client"), message
        assert "missing: certificate" in message, message


def test_tree_changed_trigger_waits_out_a_brief_disappearance_and_refuses_an_edited_root(client, tmp_path):
    """Issue 44, item 7: the watched root renamed away for a moment does not end the watch (the change
    made meanwhile is reported once it is back); a marker whose ``root`` was edited to another tree
    (without changing its recorded identity) is refused, never watched."""
    from airflow_pfs.data_triggers import PfsTreeChangedTrigger

    tree, manifest, private = tmp_path / "tree", tmp_path / "manifest", tmp_path / "data" / "private"
    make_tree(tree)
    make_tree(private)
    scan(tree, manifest, client=client)

    async def scenario():
        watch = Watch(PfsTreeChangedTrigger(str(manifest), poll_interval=0.05))
        try:
            await watch.quiet(0.5)
            tree.rename(tmp_path / "away")
            await watch.quiet(0.5)  # gone for a moment: no event, no error
            (tmp_path / "away").rename(tree)
            (tree / "a" / "late.dat").write_bytes(b"x")
            assert "a" in (await watch.next())["samples"]
        finally:
            watch.stop()

    asyncio.run(scenario())
    marker = manifest / "_manifest.json"
    info = json.loads(marker.read_text())
    marker.write_text(json.dumps({**info, "root": str(private)}))

    async def edited():
        watch = Watch(PfsTreeChangedTrigger(str(manifest), poll_interval=0.05))
        try:
            with pytest.raises(Exception, match="is not the tree manifest"):
                await watch.next(5)
        finally:
            watch.stop()

    asyncio.run(edited())
