"""No DuckDB database outlives the job that opened it.

A host process forks after a pfs call (Airflow's OpenLineage listener starts a process pool when a
DAG run fails): a connection left for the garbage collector is then freed in the child, whose
DuckDB destructor joins threads that only the parent has and spins on SIGSEGV for good.  Found in
``test_scan_on_embedded_cluster``: a forked listener child at 100 % CPU for 12 minutes.
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

import duckdb
import pytest

import dask_pfs
from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import Selection

from .conftest import make_balanced


def _selections(exc: BaseException) -> list[Selection]:
    """Every Selection a failed call's traceback still reaches (through locals and their attributes)."""
    found, seen = [], set()
    tb = exc.__traceback__
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            for obj in [value, *vars(value).values()] if hasattr(value, "__dict__") else [value]:
                if isinstance(obj, Selection) and id(obj) not in seen:
                    seen.add(id(obj))
                    found.append(obj)
        tb = tb.tb_next
    return found


def _is_open(sel: Selection) -> bool:
    try:
        sel.con.execute("SELECT 1")
    except duckdb.ConnectionException:
        return False
    return True


def test_failed_remove_leaves_no_open_database_for_a_fork(tmp_path: Path):
    src = tmp_path / "src"
    make_balanced(src, dirs=3, files_per_dir=10)
    dask_pfs.scan(str(src), str(tmp_path / "m"))
    gc.disable()  # keep what the failure left behind where the collector would find it later
    try:
        with pytest.raises(PfsError, match="more than max_entries=1") as failed:
            dask_pfs.remove(manifest=str(tmp_path / "m"), where="type = 'file'", max_entries=1, log=str(tmp_path / "l"))
        held = _selections(failed.value)
        assert held, "the traceback no longer reaches the job's selection: this test checks nothing"
        assert not [s for s in held if _is_open(s)], "a selection's database outlived its job"
        pid = os.fork()
        if pid == 0:  # what a listener's pool worker does sooner or later
            gc.enable()
            gc.collect()
            os._exit(0)
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        if done == (0, 0):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0, f"forked child: {done}"
    finally:
        gc.enable()
    assert len([p for p in src.rglob("*") if p.is_file()]) == 30  # nothing was removed
