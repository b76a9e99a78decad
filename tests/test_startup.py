"""Start-up of a small ``pfs`` command: it imports only what its path uses (docs/performance.md, issue 30).

Each command runs as the console script does (``dask_pfs.cli.main``, a fresh interpreter); an ``atexit``
hook (``main`` runs them before ``os._exit``) records which packages were imported.  pandas (0.3-0.5 s
of CPU, imported by pyarrow's first list conversion), rich (a terminal's progress bars) and distributed
(a cluster) are not on any 1-file command's path, nor is pyarrow.compute (~30-50 ms).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import REPO

MAIN = r"""
import atexit, json, sys
def _record():
    with open(sys.argv[1], "w") as f:
        json.dump(sorted({m.split(".")[0] for m in sys.modules} | ({"pyarrow.compute"} & set(sys.modules))), f)
atexit.register(_record)
from dask_pfs.cli import main
main(sys.argv[2:])
"""

HEAVY = {"pandas", "rich", "distributed", "pyarrow.compute"}


def _imported(tmp_path, *args: str) -> set[str]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "PFS_DASHBOARD": "0", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", MAIN, str(out), *args, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(out.read_text()))


@pytest.mark.parametrize("command", ["scan", "cp", "rm", "sync", "verify"])
def test_a_1_file_command_imports_no_pandas_rich_or_distributed(tmp_path, command):
    src = tmp_path / "src"
    src.mkdir()
    (src / "one").write_bytes(b"x" * 100)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "one").write_bytes(b"x" * 100)
    args = {
        "scan": ["scan", str(src), "-o", str(tmp_path / "m")],
        "cp": ["cp", f"{src}/", str(tmp_path / "cp")],
        "rm": ["rm", str(copy), "-y"],
        "sync": ["sync", f"{src}/", str(tmp_path / "sync")],
        "verify": ["verify", str(src), str(copy)],  # checksums of both sides: pyarrow converts Python lists
    }[command]
    modules = _imported(tmp_path, *args)
    assert "pyarrow" in modules  # the check sees the modules of the job it ran
    # sync compares extended attributes by default (issue 31): reading them takes pyarrow.compute
    allowed = {"pyarrow.compute"} if command == "sync" else set()
    assert not modules & (HEAVY - allowed)


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
