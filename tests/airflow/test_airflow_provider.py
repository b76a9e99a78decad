"""The Airflow provider against real Airflow (dag.test() with an SQLite metadata DB) and real
Dask clusters: the embedded LocalCluster, and scheduler + worker processes for deferral."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from .conftest import asset_events, load_dag, run_states, xcom_results


def make_source(root) -> int:
    """A small tree: 3 directories of 20 files; returns the number of entries."""
    for d in range(3):
        sub = root / f"d{d}"
        sub.mkdir(parents=True)
        for i in range(20):
            (sub / f"f{i:02d}.txt").write_bytes(b"x" * (i + 1))
    return 3 + 60


def test_provider_registered(tmp_path):
    """``airflow providers list`` (a fresh AIRFLOW_HOME) shows pfs; the manager knows its hook."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env["AIRFLOW_HOME"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    providers = {p["package_name"]: p for p in json.loads(proc.stdout.strip().splitlines()[-1])}
    assert providers["pfs"]["version"] == "0.1.0"
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hook = ProvidersManagerTaskRuntime().hooks["pfs_dask"]
    assert hook.hook_class_name == "airflow_pfs.hooks.PfsDaskHook"
    assert hook.connection_id_attribute_name == "pfs_dask_conn_id"


def test_connection_modes():
    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.hooks import options_from_connection as opts

    assert opts("local", None, None, {"workers": "3", "threads": 16}).workers == 3
    assert opts(None, None, None, {"mode": "local"}).scheduler is None
    assert opts("sched.example.org", None, None, {}).scheduler == "tcp://sched.example.org:8786"
    assert opts("sched", 9000, "tls", {}).scheduler == "tls://sched:9000"
    assert opts("tcp://10.0.0.1:8788", None, None, {}).scheduler == "tcp://10.0.0.1:8788"
    assert opts(None, None, None, {"scheduler_file": "/s.json"}).scheduler_file == "/s.json"
    with pytest.raises(AirflowException, match="mode must be"):
        opts("x", None, None, {"mode": "cloud"})
    with pytest.raises(AirflowException, match="workers must be at least 1"):
        opts("local", None, None, {"workers": 0})


def test_tls_connection_reaches_a_secured_scheduler(tls_cluster):
    """Extras carry the client's certificates as PEM text (how the chart's connection Secret has them); the
    protocol becomes tls; the task's client and the deferred task's trigger both get through."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.hooks import options_from_connection as opts
    from airflow_pfs.triggers import PfsJobTrigger
    from dask_pfs.clusters.client import connect
    from dask_pfs.clusters.security import TlsFiles

    host, port = tls_cluster.address.removeprefix("tls://").rsplit(":", 1)
    extra = {
        "tls_ca_file": tls_cluster.ca_file.read_text(),
        "tls_cert": tls_cluster.client.cert.read_text(),
        "tls_key": tls_cluster.client.key.read_text(),
    }
    options = opts(host, int(port), None, extra)
    assert options.scheduler == tls_cluster.address
    assert options.security == TlsFiles(extra["tls_ca_file"], extra["tls_cert"], extra["tls_key"])
    with connect(options) as client:
        assert len(client.scheduler_info()["workers"]) == 1
    with pytest.raises(AirflowException, match="missing: CA file"):
        opts(host, int(port), None, {"tls_cert": "/c.pem"})

    trigger = PfsJobTrigger(tls_cluster.address, "no-such-job", poll_interval=0.1, tls=options.security.as_dict())
    _, kwargs = trigger.serialize()
    event = asyncio.run(anext(PfsJobTrigger(**kwargs).run()))
    assert event.payload["status"] == "missing"  # it connected, read the (absent) job record, and fired


def test_scan_on_embedded_cluster(airflow_db, tmp_path, capfd):
    """Scan, a downstream task reading the manifest, the asset event, and bad arguments."""
    src, out = tmp_path / "src", tmp_path / "out"
    entries = make_source(src)
    out.mkdir()
    pwned = tmp_path / "pwned.csv"
    injected = f"1=1; COPY (SELECT 1) TO '{pwned}'"
    dag_run = load_dag("pfs_test_dags.py", "pfs_local").test(
        run_conf={"src": str(src), "out": str(out), "where": injected}
    )
    logs = capfd.readouterr().out
    assert run_states(dag_run) == {
        "scan": "success",
        "count_rows": "success",
        "relative_path": "failed",
        "missing_root": "failed",
        "deferrable_local": "failed",
        "remove_over_cap": "failed",
        "copy_over_cap": "failed",
        "copy_at_cap": "success",
        "copy_paced": "success",
        "copy_bad_bandwidth": "failed",
        "remove_path_and_manifest": "failed",
        "remove_bad_where": "failed",
        "remove_injected_where": "failed",
    }
    results = xcom_results(dag_run)
    scan = results["scan"]
    assert scan["manifest"] == str(out / "scan") and scan["entries"] == entries and scan["files"] == 60
    assert scan["bytes"] == 3 * sum(range(1, 21)) and scan["errors"] == 0
    assert results["count_rows"] == {"rows": entries, "entries": entries}
    assert scan in asset_events("file:///pfs-test/manifest")
    assert f"scan {src} done: {entries} entries" in logs  # LogProgress in the task log
    assert "src must be an absolute path or a URL, got 'data/project'" in logs
    assert "no-such-dir: no such file or directory" in logs
    assert "deferrable=True needs a running Dask scheduler" in logs
    # counted by the engines, for the remove and for the copy
    refused = "refusing: the selection has 60 entries, more than max_entries=5"  # a Python caller's words
    assert logs.count(refused) == 2, logs
    assert not (out / "copy_over_cap").exists()  # refused before anything was written
    assert results["copy_at_cap"]["selected"] == 60 and results["copy_at_cap"]["files"] == 60
    assert len([p for p in (out / "copy_at_cap").rglob("*") if p.is_file()]) == 60
    paced = results["copy_paced"]
    assert paced["files"] == 60 and paced["errors"] == 0
    assert paced["seconds"] >= 0.9 * (entries - 1) / 8, paced  # every entry below the root drew a token (unpaced: ~1 s)
    assert "max_bandwidth: not a bandwidth: 'fast'" in logs and not (out / "copy_bad_bandwidth").exists()
    assert "give either path (a tree to remove) or manifest (rows to remove), not both" in logs
    assert 'Binder Error: Referenced column "no_such_column" not found' in logs
    assert "where refused: ';' ends a statement" in logs and not pwned.exists()
    assert len(list(src.rglob("*"))) == entries  # nothing was removed


def test_scan_on_scheduler_processes(airflow_db, dask_processes, tmp_path, capfd, caplog, monkeypatch):
    """In the worker and deferred (the trigger runs inline in dag.test), on separate Dask processes."""
    src, out = tmp_path / "src", tmp_path / "out"
    entries = make_source(src)
    out.mkdir()
    junk = make_source(out / "junk")
    monkeypatch.setenv("PFS_TEST_SRC", str(src))
    dag_run = load_dag("pfs_test_dags.py", "pfs_remote").test(run_conf={"src": str(src), "out": str(out)})
    logs = capfd.readouterr().out + caplog.text
    assert run_states(dag_run) == {
        "scan_sync": "success",
        "scan_deferred": "success",
        "count_deferred": "success",
        "deferred_missing": "failed",
        "driver_on_cluster": "failed",
        "remove_tree_deferred": "success",
        "remove_rows_deferred": "success",
        "scan_object_storage_path": "success",
    }
    results = xcom_results(dag_run)
    for task_id, name in [("scan_sync", "sync"), ("scan_deferred", "deferred"), ("scan_object_storage_path", "osp")]:
        assert results[task_id]["manifest"] == str(out / name)
        assert results[task_id]["entries"] == entries
    assert results["count_deferred"] == {"rows": entries, "entries": entries}
    assert results["scan_deferred"] in asset_events("file:///pfs-test/deferred")
    removed = results["remove_tree_deferred"]
    assert (removed["removed_files"], removed["removed_dirs"], removed["errors"]) == (60, junk - 60 + 1, 0)
    assert not (out / "junk").exists()
    rows = results["remove_rows_deferred"]  # a deferred run: the operator is re-created before execute_complete
    assert (rows["selected"], rows["would_remove_files"], rows["dry_run"]) == (60, 60, True)
    assert "removed_files" not in rows  # a dry run removes nothing
    assert len(list(src.rglob("*"))) == entries  # a dry run
    assert "[DAG TEST] running trigger in line" in logs
    assert f"Dask cluster: {dask_processes}" in logs
    assert "pfs job pfs-job-pfs_remote.scan_deferred-" in logs and ": submitted" in logs
    assert "deferred_missing: pfs job pfs-job-pfs_remote.deferred_missing-" in logs
    assert "error: " in logs and "no-such-dir: no such file or directory" in logs
    assert "not-here'] not on this host; the job's driver runs on the cluster" in logs
    assert "not-here: no such file or directory" in logs
    _assert_nothing_left(dask_processes)


def _assert_nothing_left(address: str) -> None:
    """Reported jobs are forgotten: no published driver, no state record."""
    from distributed import Client

    with Client(address, timeout="30s") as client:
        assert not [n for n in client.list_datasets() if str(n).startswith("pfs-job-")]


def _slow_operator(**kwargs):
    """A one-class operator over a test engine that runs for a while (as PfsSyncOperator will be)."""
    from airflow_pfs.jobs import JobSpec
    from airflow_pfs.operators import PfsBaseOperator

    class PfsSlowOperator(PfsBaseOperator):
        engine = "tests.airflow.slow_engine:slow"
        template_fields = ("marker",)

        def __init__(self, *, marker: str, seconds: float, **kw):
            super().__init__(**kw)
            self.marker, self.seconds = marker, seconds

        def job_spec(self, context):
            return JobSpec(self.engine, (self.marker, self.seconds))

    return PfsSlowOperator(task_id="slow", deferrable=True, poll_interval=0.1, progress_interval=0.1, **kwargs)


def _context(run_id: str) -> dict:
    ti = SimpleNamespace(dag_id="pfs_direct", task_id="slow", run_id=run_id, map_index=-1)
    return {"ti": ti, "outlet_events": {}}


def _defer(op, context):
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    return deferred.value.trigger


def test_retry_reattaches_to_running_job(airflow_db, dask_processes, tmp_path, capfd, caplog):
    """A second execute (a retry) of the same task instance attaches to the job still running."""
    from airflow_pfs import jobs

    marker = tmp_path / "runs"
    op = _slow_operator(marker=str(marker), seconds=3)
    context = _context("retry-1")
    first = _defer(op, context)
    second = _defer(op, context)  # the retry: the job is still running
    logs = capfd.readouterr().out + caplog.text
    assert ": submitted" in logs and ": attached (running)" in logs
    assert second.name == first.name == jobs.job_name("pfs_direct", "slow", "retry-1")
    event = asyncio.run(anext(second.run()))
    assert event.payload["status"] == "finished"
    progress = [line for line in capfd.readouterr().out.splitlines() if "] slow: " in line]
    assert len(progress) >= 3 and " entries, " in progress[-1]  # the trigger logs progress as it polls
    result = op.execute_complete(context, event.payload)
    assert result == {"runs": 1, "steps": result["steps"], "exit_code": 0}
    assert marker.read_text() == "run\n"  # the engine ran once
    _assert_nothing_left(dask_processes)


def test_killing_deferred_task_cancels_job(airflow_db, dask_processes, tmp_path):
    """Trigger.on_kill (the user killed the deferred task) stops the driver on the cluster."""
    import time

    from distributed import Client

    from airflow_pfs import jobs

    marker = tmp_path / "runs"
    op = _slow_operator(marker=str(marker), seconds=60)
    trigger = _defer(op, _context("kill-1"))
    with Client(dask_processes, timeout="30s") as client:
        deadline = time.monotonic() + 30
        while jobs.read_record(client, trigger.name, trigger.token).get("state") != "running":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.1)
        t0 = time.monotonic()
        asyncio.run(trigger.on_kill())
        while jobs.read_record(client, trigger.name, trigger.token).get("state") != "cancelled":
            assert time.monotonic() - t0 < 10, "the driver did not stop"
            time.sleep(0.1)
        jobs.forget(client, trigger.name)
    assert marker.read_text() == "run\n"


def test_killing_a_deferred_rm_stops_its_io_at_once(airflow_db, dask_processes, tmp_path):
    """Issue 44: on_kill of a deferred, capped rm: no file goes a second after it (the tasks in flight refuse
    their next batch, under the caps), and the job's record says it was cancelled and what its tasks did."""
    import os
    import time

    from distributed import Client

    from airflow_pfs import jobs
    from airflow_pfs.operators import PfsRemoveOperator

    tree = tmp_path / "victim"
    for i in range(6):
        (tree / f"d{i}").mkdir(parents=True)
        for j in range(120):
            (tree / f"d{i}" / f"f{j}").write_bytes(b"")

    def left() -> int:
        return sum(len(files) for _, _, files in os.walk(tree))

    op = PfsRemoveOperator(task_id="rm", path=str(tree), deferrable=True, max_ops_per_second=40)
    trigger = _defer(op, _context("kill-rm-1"))
    deadline = time.monotonic() + 60
    while left() > 720 - 64:
        assert time.monotonic() < deadline, "the rm did not start"
        time.sleep(0.05)
    asyncio.run(trigger.on_kill())
    time.sleep(1)
    at1 = left()
    time.sleep(4)
    assert left() == at1 > 0
    with Client(dask_processes, timeout="30s") as client:
        deadline = time.monotonic() + 30
        while (record := jobs.read_record(client, trigger.name, trigger.token)).get("state") != "cancelled":
            assert time.monotonic() < deadline, record
            time.sleep(0.1)
        jobs.forget(client, trigger.name)
    assert record["error"] == "cancelled" and record["stop"]["stopped_tasks"] >= 1, record
    removed = 720 - at1  # by tasks that were stopped (their counts never came back) or had finished
    assert record["title"].startswith("rm ")
    assert (record["counters"].get("entries") or 0) + record["stop"]["granted_ops"] >= removed, record


def test_deferred_job_needs_scheduler(airflow_db, tmp_path):
    from airflow.sdk.exceptions import AirflowException

    op = _slow_operator(marker=str(tmp_path / "m"), seconds=1, pfs_dask_conn_id="pfs_local")
    with pytest.raises(AirflowException, match="deferrable=True needs a running Dask scheduler"):
        op.execute(_context("local-1"))


class _Evil:
    """What a peer publishes: unpickling it runs code (writes the file it names)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        import os
        import shlex

        return (os.system, (f"touch {shlex.quote(self.path)}",))


def test_a_peer_cannot_forge_a_result_nor_run_code_in_the_trigger(airflow_db, dask_processes, tmp_path):
    """A second client acting as a peer of the scheduler (issue 44, item 3): a forged ``<name>-state``
    saying "finished, same 12345" and a pickled object re-published under the job's name neither make the
    deferred task succeed nor run code in the trigger's process; a pickled object put in the state record
    is refused unread."""
    import time

    from distributed import Client, Variable
    from distributed.protocol import to_serialize

    from airflow_pfs import jobs

    pwned = tmp_path / "pwned"
    op = _slow_operator(marker=str(tmp_path / "runs"), seconds=60)
    trigger = _defer(op, _context("forge-1"))
    with Client(dask_processes, timeout="30s", set_as_default=False) as peer:
        assert trigger.name in peer.list_datasets()  # the names are listed: a peer finds them
        deadline = time.monotonic() + 30
        while jobs.read_record(peer, trigger.name, trigger.token).get("state") != "running":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.1)
        asyncio.run(trigger.on_kill())  # the driver stops: nothing overwrites the forgery below
        while jobs.read_record(peer, trigger.name, trigger.token).get("state") != "cancelled":
            assert time.monotonic() < deadline, "the driver did not stop"
            time.sleep(0.1)
        Variable(jobs.state_name(trigger.name), client=peer).set({"state": "finished", "result": {"same": 12345}})
        peer.publish_dataset(to_serialize(_Evil(str(pwned))), name=trigger.name, override=True)
        event = asyncio.run(anext(trigger.run()))
        assert event.payload["status"] == "error" and "not signed" in event.payload["error"], event.payload
        with pytest.raises(Exception, match="not signed"):
            op.execute_complete(_context("forge-1"), event.payload)
        peer.publish_dataset(to_serialize(_Evil(str(pwned))), name=trigger.name, override=True)
        peer.sync(peer.scheduler.variable_set, data=to_serialize(_Evil(str(pwned))), name=jobs.state_name(trigger.name))
        event = asyncio.run(anext(trigger.run()))
        assert event.payload["status"] == "error" and "not signed" in event.payload["error"], event.payload
        asyncio.run(trigger.on_kill())
        assert not pwned.exists()  # nothing the peer put on the scheduler was unpickled here
        jobs.forget(peer, trigger.name)


def test_deferred_job_with_an_unreachable_scheduler_is_one_clear_line(airflow_db, tmp_path, monkeypatch):
    """Issue 44, item 7: nothing listens at the connection's address: one AirflowException line,
    well before Dask's 30 s default connect timeout."""
    import time

    from airflow.sdk.exceptions import AirflowException

    from .conftest import _free_port

    conn = {"conn_type": "pfs_dask", "host": "127.0.0.1", "port": _free_port()}
    monkeypatch.setenv("AIRFLOW_CONN_PFS_NOWHERE", json.dumps(conn))
    op = _slow_operator(marker=str(tmp_path / "m"), seconds=1, pfs_dask_conn_id="pfs_nowhere")
    t0 = time.monotonic()
    with pytest.raises(AirflowException, match="cannot reach the Dask scheduler") as exc:
        op.execute(_context("nowhere-1"))
    assert time.monotonic() - t0 < 25 and "\n" not in str(exc.value)
