"""Real Airflow for the provider tests: a temp AIRFLOW_HOME with an SQLite metadata DB, a DAGs
folder holding only our test DAGs and the examples, and a Dask scheduler + worker started as
separate processes (what a deferrable job needs: a cluster that outlives the task).

Airflow reads its configuration when first imported, so the environment is set here, at import
time of this conftest, before any test module in this folder imports airflow.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

REPO = Path(__file__).resolve().parents[2]
HOME = Path(tempfile.mkdtemp(prefix="pfs-airflow-home-"))
DAGS = HOME / "dags"
DAG_SOURCES = [
    REPO / "tests" / "airflow_dags" / "pfs_test_dags.py",
    REPO / "examples" / "stage_dataset.py",
    REPO / "examples" / "nightly_purge.py",
    REPO / "examples" / "landed_data.py",
]
# OpenLineage events of every task go to this file (one JSON event per line): what the
# lineage tests read.  Emitted in a thread, not a forked child, next to the tasks' Dask clients.
LINEAGE_LOG = HOME / "openlineage.jsonl"
LOCAL_CONN = {"conn_type": "pfs_dask", "host": "local", "extra": {"workers": 1, "threads": 8}}

os.environ.update(
    {
        "AIRFLOW_HOME": str(HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME / 'airflow.db'}",
        "AIRFLOW_CONN_PFS_LOCAL": json.dumps(LOCAL_CONN),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(LINEAGE_LOG), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "pfs-tests",
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
        # one key for this session and the dag.test() processes it starts (tests/airflow/test_task_logs.py):
        # without it each process makes its own and cannot read the triggers another one stored
        "AIRFLOW__CORE__FERNET_KEY": os.environ.get("AIRFLOW__CORE__FERNET_KEY") or Fernet.generate_key().decode(),
        "PFS_DEFER_FIRST_CHECK": "0",  # dag.test() runs triggers inline: no scheduler to race (airflow_pfs.triggers)
    }
)
os.environ.pop("PFS_SCHEDULER", None)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/airflow/" in str(item.fspath):
            item.add_marker(pytest.mark.filterwarnings("ignore:Using .httpx. with .starlette.testclient"))


@pytest.fixture(scope="session")
def airflow_db():
    """Init the metadata DB once and copy the DAG files into the DAGs folder."""
    DAGS.mkdir(parents=True, exist_ok=True)
    for src in DAG_SOURCES:
        if src.exists():
            shutil.copy(src, DAGS / src.name)
    from airflow.utils import db

    db.initdb()
    return HOME


def load_dag(filename: str, dag_id: str):
    """Import a DAG file from the DAGs folder (what dag.test() expects) and return one DAG."""
    import importlib.util

    path = DAGS / filename
    spec = importlib.util.spec_from_file_location(f"pfs_dagfile_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for value in vars(module).values():
        if getattr(value, "dag_id", None) == dag_id and hasattr(value, "test"):
            return value
    raise LookupError(f"{dag_id} not in {path}")


def lineage_events(job: str, event_type: str = "COMPLETE", within: str | None = None) -> list[dict]:
    """OpenLineage events the tasks emitted for ``dag_id.task_id`` (the log is the session's: ``within``
    keeps the events that name a place under that directory, one test's own runs)."""
    if not LINEAGE_LOG.exists():
        return []
    events = [json.loads(line) for line in LINEAGE_LOG.read_text().splitlines() if line.strip()]
    return [
        e
        for e in events
        if e.get("job", {}).get("name") == job
        and e.get("eventType") == event_type
        and (within is None or within in json.dumps(e))
    ]


def run_states(dag_run) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances(session=session)}


def xcom_results(dag_run) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dag_run.run_id, key="return_value", dag_ids=dag_run.dag_id))
        return {x.task_id: XComModel.deserialize_value(x) for x in rows}


def asset_events(uri: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent).join(AssetModel, AssetModel.id == AssetEvent.asset_id).where(AssetModel.uri == uri)
        return [dict(e.extra) for e in session.scalars(query)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def dask_processes(tmp_path_factory):
    """``dask scheduler`` and ``dask worker`` subprocesses on 127.0.0.1; yields the address.

    The default ``pfs_dask_default`` connection points at them through its env variable.
    """
    logs = tmp_path_factory.mktemp("dask-logs")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_THREADS": "8"}
    dask = str(Path(sys.executable).parent / "dask")
    scheduler = subprocess.Popen(
        [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", ":0", "--no-show"],
        env=env,
        stdout=open(logs / "scheduler.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [
            dask,
            "worker",
            address,
            "--nworkers",
            "1",
            "--nthreads",
            "4",
            "--dashboard-address",
            ":0",
            "--no-nanny",
        ],
        env=env,
        stdout=open(logs / "worker.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    from distributed import Client

    try:
        deadline = time.monotonic() + 60
        with Client(address, timeout="60s") as client:
            while not client.nthreads():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no dask worker joined; see {logs}")
                time.sleep(0.2)
        os.environ["AIRFLOW_CONN_PFS_DASK_DEFAULT"] = json.dumps(
            {"conn_type": "pfs_dask", "host": "127.0.0.1", "port": port}
        )
        yield address
    finally:
        os.environ.pop("AIRFLOW_CONN_PFS_DASK_DEFAULT", None)
        for proc in (worker, scheduler):
            proc.terminate()
        for proc in (worker, scheduler):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(autouse=True)
def example_roots(tmp_path, monkeypatch):
    """The examples' allowed roots (``PFS_EXAMPLE_ROOTS``, read when a DAG file is parsed): the test's
    own temp directory, so a path a test's run conf points elsewhere is refused."""
    monkeypatch.setenv("PFS_EXAMPLE_ROOTS", str(tmp_path))
    return tmp_path
