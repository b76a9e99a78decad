"""A real Airflow deployment on loopback, as one starts it by hand (examples/README.md, "Run it for real").

PostgreSQL from Debian's package (a private cluster in a temp directory, on a free loopback port), a
Dask scheduler and workers (the ``pfs_dask_default`` connection), then ``airflow db migrate`` and the
four Airflow processes: scheduler (LocalExecutor, parallelism 8), triggerer, dag-processor and
api-server.  The REST API (Airflow 3's public API, ``/api/v2``) takes the simple auth manager's token.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PARALLELISM = 8
AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bindir() -> Path:
    """Debian's PostgreSQL server binaries, installed with apt when missing (a fresh CI machine)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found and shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-q", "postgresql"], check=True, capture_output=True)
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL server not found: apt-get install -y postgresql")
    return Path(found[-1]).parent


@dataclass
class Postgres:
    """A private PostgreSQL cluster: ``initdb`` into a temp directory, ``pg_ctl`` on 127.0.0.1:port."""

    root: Path
    port: int = field(default_factory=free_port)

    def _run(self, *cmd: str) -> None:
        # initdb refuses to run as root: root runs it as Debian's postgres user
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=300)

    def start(self) -> str:
        bindir = pg_bindir()
        self.data = self.root / "data"
        self.data.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.data, "postgres")
        self._run(
            str(bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "airflow", "-E", "UTF8", "--no-sync"
        )
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._run(
            str(bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.data / "log"), "-o", options, "-w", "start"
        )
        self._run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "airflow", "airflow")
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/airflow"

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run(str(pg_bindir() / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")


@dataclass
class Deployment:
    home: Path
    api: str
    env: dict
    logs: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    token: str | None = None

    # --- processes -------------------------------------------------------------------------------

    def start(self, name: str, program: str, *args: str) -> subprocess.Popen:
        """``program`` (from this virtualenv) as one process of the deployment, logging to ``logs/NAME.log``."""
        out = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            [str(BIN / program), *args], stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        self.procs[name] = proc
        return proc

    def airflow(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(BIN / "airflow"), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode:
            raise AssertionError(f"airflow {' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr[-5000:]}")
        return done

    def stop(self) -> None:
        stop_all(list(self.procs.values()))

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for path in sorted(self.logs.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)

    # --- REST API --------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.api + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read() or b"{}")

    def get(self, path: str) -> dict:
        return self.request("GET", path)

    def login(self) -> None:
        """The simple auth manager's token (all-admins mode: no credentials)."""
        self.token = self.get("/auth/token")["access_token"]

    def wait_api(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.get("/api/v2/monitor/health")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise AssertionError("api-server did not answer\n" + self.log_tail()) from None
                time.sleep(1)

    def wait_dag(self, dag_id: str, timeout: float = 300) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.get(f"/api/v2/dags/{dag_id}")
            except urllib.error.HTTPError as exc:
                if exc.code != 404 or time.monotonic() > deadline:
                    raise AssertionError(f"DAG {dag_id} not parsed\n{self.log_tail()}") from None
                time.sleep(2)

    def trigger(self, dag_id: str, conf: dict) -> str:
        run = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        return run["dag_run_id"]

    def runs(self, dag_id: str) -> list[dict]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns?order_by=start_date&limit=100")["dag_runs"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 600) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            if run["state"] in ("success", "failed"):
                return run
            if time.monotonic() > deadline:
                raise AssertionError(f"{dag_id} {run_id} still {run['state']}: {self.states(dag_id, run_id)}")
            time.sleep(2)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=1000"
        return self.get(path)["task_instances"]

    def states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        out = {}
        for ti in self.task_instances(dag_id, run_id):
            key = ti["task_id"] if ti["map_index"] < 0 else f"{ti['task_id']}[{ti['map_index']}]"
            out[key] = ti["state"]
        return out

    def xcom(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1):
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value"
        return self.get(path + f"?map_index={map_index}&deserialize=true")["value"]

    def lineage(self, job: str) -> list[dict]:
        """The OpenLineage COMPLETE events of ``dag_id.task_id`` (the file transport's lines)."""
        path = self.home / "openlineage.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        events = [json.loads(line) for line in lines if line.strip()]
        return [e for e in events if e.get("job", {}).get("name") == job and e.get("eventType") == "COMPLETE"]

    def log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1) -> str:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        body = self.get(path + f"?map_index={map_index}&full_content=true")
        content = body.get("content")
        if isinstance(content, list):
            return "\n".join(json.dumps(c) if not isinstance(c, str) else c for c in content)
        return str(content)

    def failure_report(self, dag_id: str, run_id: str) -> str:
        """What a failed run leaves to read: each failed task's own log (its last try), then the
        processes' log tails. The deployment's directory is gone once the module ends."""
        parts = [f"states: {self.states(dag_id, run_id)}"]
        for ti in self.task_instances(dag_id, run_id):
            if ti["state"] != "failed":
                continue
            try:
                text = self.log(dag_id, run_id, ti["task_id"], max(1, ti.get("try_number") or 1), ti["map_index"])
            except urllib.error.HTTPError as exc:
                text = f"(no log: HTTP {exc.code})"
            parts.append(f"--- task log of {ti['task_id']}[{ti['map_index']}]\n{text}")
        parts.append(self.log_tail(120))
        return "\n".join(parts)


def stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group (each was started in a session of its own), SIGKILL what is left after 10 s."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def deploy_env(home: Path, db_url: str, api_port: int, dask_address: str, extra: dict) -> dict:
    """The environment every Airflow process of the deployment shares (nothing of a test's Airflow)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PFS_"))}
    host, port = dask_address.split("://")[1].rsplit(":", 1)
    env.update(
        {
            "PATH": f"{BIN}:{env.get('PATH', '')}",
            "PYTHONPATH": str(REPO),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(PARALLELISM),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(64).hex(),
            "AIRFLOW__API__SECRET_KEY": os.urandom(16).hex(),
            "AIRFLOW__CORE__AUTH_MANAGER": AUTH_MANAGER,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "1200",
            # a busy 2-core machine: the api-server may take a while to answer a task's first call
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120",
            "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "10",
            "AIRFLOW__TRIGGERER__DEFAULT_CAPACITY": "100",
            "AIRFLOW_CONN_PFS_DASK_DEFAULT": json.dumps({"conn_type": "pfs_dask", "host": host, "port": int(port)}),
            "AIRFLOW_CONN_PFS_LOCAL": json.dumps({"conn_type": "pfs_dask", "host": "local", "extra": {"workers": 1}}),
            "PFS_LOCK_DIR": str(home / "locks"),
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": str(home / "openlineage.jsonl"), "append": True}
            ),
            "AIRFLOW__OPENLINEAGE__NAMESPACE": "pfs-deploy",
            **extra,
        }
    )
    return env


def start_dask(logs: Path, env: dict) -> tuple[str, list[subprocess.Popen]]:
    """``dask scheduler`` and ``dask worker`` processes: the cluster deferrable jobs outlive a task on."""
    scheduler_file = logs / "dask-scheduler.json"
    procs = []
    for name, cmd in (
        ("dask-scheduler", ["scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
                            "--scheduler-file", str(scheduler_file)]),
        ("dask-worker", ["worker", "--scheduler-file", str(scheduler_file), "--nworkers", "2", "--nthreads", "4",
                         "--dashboard-address", ":0", "--memory-limit", "2GiB"]),
    ):  # fmt: skip
        out = open(logs / f"{name}.log", "wb")  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                [str(BIN / "dask"), *cmd], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        )
        deadline = time.monotonic() + 120
        while name == "dask-scheduler" and not scheduler_file.exists():
            if time.monotonic() > deadline:
                raise AssertionError((logs / f"{name}.log").read_text())
            time.sleep(0.2)
    address = json.loads(scheduler_file.read_text())["address"]
    return address, procs


def temp_root() -> Path:
    """A directory the postgres user can reach (pytest's temp directories are root's, mode 0700)."""
    root = Path(tempfile.mkdtemp(prefix="pfs-airflow-deploy-"))
    root.chmod(0o755)
    return root
