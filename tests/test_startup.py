"""Start-up of a small ``pfs`` command: it imports only what its path uses (docs/performance.md, issues 30
and 43).

Each command runs as the console script does (``dask_pfs.cli.main``, a fresh interpreter); an ``atexit``
hook (``main`` runs them before ``os._exit``) records which packages were imported, and an audit hook
which processes it started.  pandas (0.3-0.5 s of CPU, imported by pyarrow's first list conversion),
NumPy (pyarrow's own import of it, about half of pyarrow's start-up), fsspec (a local path never needs
it), rich (a terminal's progress bars) and distributed (a cluster) are not on any 1-file command's path,
nor is pyarrow.compute (~30-50 ms).  A query's bounded probe is a fork, not a second interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import REPO

MAIN = r"""
import atexit, json, os, sys
started, forks, me = [], [], os.getpid()
def _audit(event, args):
    if event == "subprocess.Popen":
        started.append([os.fsdecode(a) for a in args[1]] if isinstance(args[1], (list, tuple)) else [str(args[1])])
    elif event == "os.fork":
        forks.append(1)
sys.addaudithook(_audit)
def _record():
    if os.getpid() != me:
        return
    modules = {m.split(".")[0] for m in sys.modules} | ({"pyarrow.compute", "pyarrow.dataset"} & set(sys.modules))
    with open(sys.argv[1], "w") as f:
        json.dump({"modules": sorted(modules), "started": started, "forks": len(forks)}, f)
atexit.register(_record)
from dask_pfs.cli import main
main(sys.argv[2:])
"""

HEAVY = {"pandas", "numpy", "fsspec", "rich", "distributed", "pyarrow.compute", "pyarrow.dataset"}
# object-store clients (obstore ~15-20 ms of a local cp, issue 43): only a job on a store imports them
STORES = {"obstore", "s3fs", "botocore", "aiobotocore", "gcsfs", "adlfs"}


def _run(tmp_path, *args: str, env: dict | None = None, code: int = 0) -> tuple[dict, str]:
    """What the command ``args`` imported and started (``MAIN``), and its stderr."""
    out = tmp_path / "modules.json"
    env = {**os.environ, "PFS_DASHBOARD": "0", "XDG_CACHE_HOME": str(tmp_path / "cache"), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-c", MAIN, str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == code, proc.stderr
    return json.loads(out.read_text()), proc.stderr


def _imported(tmp_path, *args: str) -> set[str]:
    return set(_run(tmp_path, *args, "--no-progress")[0]["modules"])


@pytest.mark.parametrize("command", ["scan", "scan-file", "cp", "rm", "sync", "verify"])
def test_a_1_file_command_imports_no_pandas_numpy_fsspec_rich_or_distributed(tmp_path, command):
    src = tmp_path / "src"
    src.mkdir()
    (src / "one").write_bytes(b"x" * 100)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "one").write_bytes(b"x" * 100)
    args = {
        "scan": ["scan", str(src), "-o", str(tmp_path / "m")],
        "scan-file": ["scan", str(src / "one"), "-o", str(tmp_path / "m")],  # a root that is a file
        "cp": ["cp", f"{src}/", str(tmp_path / "cp")],
        "rm": ["rm", str(copy), "-y"],
        "sync": ["sync", f"{src}/", str(tmp_path / "sync")],
        "verify": ["verify", str(src), str(copy)],  # checksums of both sides: pyarrow converts Python lists
    }[command]
    modules = _imported(tmp_path, *args)
    assert "pyarrow" in modules  # the check sees the modules of the job it ran
    # sync compares extended attributes by default (issue 31): reading them takes pyarrow.compute
    # and a root that is a file makes its one row's table in Python (operators.rows.rows_to_table)
    allowed = {"pyarrow.compute"} if command in ("sync", "scan-file") else set()
    assert not modules & (HEAVY - allowed)
    assert not modules & STORES  # a local tree: no object-store client
    if command in ("scan", "scan-file", "rm"):  # no SQL on their path
        assert "duckdb" not in modules


@pytest.fixture
def one_row(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "one").write_bytes(b"x" * 100)
    _run(tmp_path, "scan", str(src), "-o", str(tmp_path / "m"), "--no-progress")
    return tmp_path / "m"


def test_a_1_row_query_forks_its_bounded_probe_and_imports_nothing_heavy(tmp_path, one_row):
    """The user's clause still runs to the end in a bounded child first (sql_probe), a fork of the
    command's process: no second interpreter importing DuckDB and pyarrow again (issue 43)."""
    seen, _ = _run(tmp_path, "query", str(one_row), "--select", "count(*)", "--format", "csv")
    assert "duckdb" in seen["modules"] and "pyarrow" in seen["modules"]
    assert not set(seen["modules"]) & (HEAVY | STORES)
    assert seen["forks"] >= 1  # the probe
    assert not [cmd for cmd in seen["started"] if "dask_pfs.manifests.sql_probe" in cmd], seen["started"]


@pytest.mark.parametrize(
    "env, clause, said",
    [
        ({"PFS_SQL_MEMORY_LIMIT": "300MB"}, "len(range(0, 200000000)) > 0", "query refused: "),
        ({"PFS_SQL_TIMEOUT": "2"}, "list_reduce(range(0, 30000000 + len(path)), lambda x, y: x + y) > 0", "after 2 s"),
    ],
    ids=["memory", "time"],
)
def test_the_forked_probe_keeps_the_bounds(tmp_path, one_row, env, clause, said):
    """A memory bomb hits the forked child's address-space limit, a slow clause its time limit: one line,
    exit 2, nothing on stdout, as with the spawned child (tests/security/test_sql_bounds.py)."""
    seen, err = _run(tmp_path, "query", str(one_row), "--where", clause, env=env, code=2)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pfs: error: ") and said in lines[0], err
    assert seen["forks"] >= 1
    assert not [cmd for cmd in seen["started"] if "dask_pfs.manifests.sql_probe" in cmd]


OVERLAP = r"""
import os, sys
from dask_pfs.manifests.manifest import open_manifest
from dask_pfs.manifests.sql_probe import probe_manifest
m = open_manifest(sys.argv[1])
class Opened:
    closed = False
    def close(self):
        self.closed = True
children = []
def connecting(opened):
    with open(f"/proc/self/task/{os.getpid()}/children") as f:
        children.append(len(f.read().split()))
    return opened
ok = probe_manifest(m, "SELECT count(*) FROM " + m.relation_sql(), connecting=lambda: connecting(Opened()))
bad = Opened()
try:
    probe_manifest(m, "SELECT no_such_column FROM " + m.relation_sql(), connecting=lambda: connecting(bad))
except Exception as exc:
    print(type(exc).__name__)
print(type(ok).__name__, ok.closed, bad.closed, children)
"""


def test_the_commands_own_connection_opens_while_its_probe_runs(tmp_path, one_row):
    """A DuckDB database costs ~25 ms to open: the query's own connection is opened while the forked probe
    runs on the other core (a probe child exists then), returned when the probe finished, and closed when
    the probe refused the clause (nothing is left to the garbage collector)."""
    out = subprocess.run(
        [sys.executable, "-c", OVERLAP, str(one_row)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["PfsError", "Opened False True [1, 1]"], out.stdout


NUMPY_LATER = r"""
import json, sys
from operators import pandas_gate
pandas_gate.refuse_implicit()
import pyarrow as pa, pyarrow.compute as pc
out = {"numpy_with_pyarrow": "numpy" in sys.modules, "without": pandas_gate.arrow_without_numpy()}
out["sum"] = pc.sum(pa.array([1, 2])).as_py()
import numpy  # noqa: F401  (distributed does: still importable)
try:
    with pandas_gate.wanted():
        import pandas  # noqa: F401
    out["pandas"] = "imported"
except ImportError as exc:
    out["pandas"] = str(exc)
print(json.dumps(out))
"""


def test_pyarrow_runs_without_numpy_in_a_command_and_pandas_is_refused_not_a_crash():
    """In a command's process pyarrow is imported without NumPy; NumPy stays importable, and pandas (whose
    conversions such a pyarrow would crash in) is refused with a clear ImportError."""
    proc = subprocess.run([sys.executable, "-c", NUMPY_LATER], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["numpy_with_pyarrow"] is False and out["without"] is True and out["sum"] == 3
    assert "without NumPy" in out["pandas"]


GATED = r"""
import json, sys
import pyarrow as pa
from operators import pandas_gate
pandas_gate.refuse_implicit()
pa.array(["a", None], pa.string())
out = {"implicit": "pandas" in sys.modules}
from dask_pfs import open_manifest
frame = open_manifest(sys.argv[1]).to_pandas()
out["rows"] = len(frame)
out["gate"] = pandas_gate.installed()
try:
    import pandas  # noqa: F401  (imported by to_pandas above: there for everyone now)
    out["later"] = True
except ImportError:
    out["later"] = False
print(json.dumps(out))
"""


def test_the_gate_refuses_pyarrows_import_of_pandas_not_to_pandas(tmp_path):
    """In a command's process pyarrow cannot pull pandas in, but the code that wants pandas gets it."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "one").write_bytes(b"x")
    from dask_pfs import scan

    scan(str(src), str(tmp_path / "m"))
    proc = subprocess.run(
        [sys.executable, "-c", GATED, str(tmp_path / "m")], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "implicit": False,
        "rows": 1,
        "gate": True,
        "later": True,
    }


def test_core_columns_with_backward_offsets_are_refused_without_pyarrow_compute():
    """The check of the core's string offsets (operators.rows) uses Arrow's validation, not pyarrow.compute."""
    import struct

    import pyarrow as pa

    from operators.rows import _check_offsets

    data = pa.py_buffer(b"abcd")
    _check_offsets("path", 3, pa.py_buffer(struct.pack("<4i", 0, 1, 2, 4)), data)
    with pytest.raises(ValueError, match="offsets go backwards"):
        _check_offsets("path", 3, pa.py_buffer(struct.pack("<4i", 0, 3, 2, 4)), data)
    with pytest.raises(ValueError, match="do not cover"):
        _check_offsets("path", 3, pa.py_buffer(struct.pack("<4i", 0, 1, 2, 3)), data)


def test_ctrl_c_during_the_forked_probe_takes_the_probe_too(tmp_path, one_row):
    """Interrupted while its probe runs, the command ends as interrupted (130) and leaves no child behind."""
    import signal
    import time

    slow = "list_reduce(range(0, 30000000 + len(path)), lambda x, y: x + y) > 0"
    env = {**os.environ, "PFS_SERVER": "off", "PFS_SQL_TIMEOUT": "120", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dask_pfs", "query", str(one_row), "--where", slow],
        cwd="/",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children = f"/proc/{proc.pid}/task/{proc.pid}/children"
    deadline = time.monotonic() + 120
    probe = ""
    while not probe and time.monotonic() < deadline and proc.poll() is None:
        with open(children) as f:
            probe = f.read().strip()
        time.sleep(0.05)
    assert probe, "the probe was never forked"
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert out == ""
    assert not os.path.exists(f"/proc/{probe.split()[0]}")
