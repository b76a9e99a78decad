"""A user's clause is run once in a child process with hard limits before pfs runs it itself.

DuckDB's ``memory_limit`` bounds its buffer manager, not the lists and strings a scalar function
builds (``len(range(0, 200000000))`` grew to 14 GB in one process, ``interrupt()`` unheard, as
the function never returned to DuckDB's scheduler).  Only the kernel bounds those.  So before a
job runs a clause it did not write (``--where``, ``--select``, ``--order-by``, an Airflow ``where``),
:func:`probe` runs the same query over the same manifest in ``python -m dask_pfs.manifests.sql_probe``: an
address-space limit (``RLIMIT_AS``: ``PFS_SQL_MEMORY_LIMIT`` plus the interpreter's own), the
same locked connection (``sql.connect``), and a wall-clock limit (``PFS_SQL_TIMEOUT``; killed
when over).  A clause that fails there ends in one line, exit 2: ``query failed: ...`` when the
clause itself is wrong (a column the manifest lacks, a bad cast: what pfs would say running it
in its own process), ``query refused: ... (bounds: ...)`` when it hit a limit (or the child died).
One that finishes there is known to finish over these rows, and pfs runs it in its own process.

Manifests on object stores are read through registered datasets the child cannot rebuild
without their credentials: their clauses are bounded by the in-process limits only
(``dask_pfs.manifests.sql_run``).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from dask_pfs.errors import PfsError
from dask_pfs.manifests.sql_run import memory_limit, threads, timeout

if TYPE_CHECKING:
    from dask_pfs.manifests.manifest import Manifest
    from dask_pfs.manifests.relations import Tables

FAILED, BOUNDED = 3, 4  # the child's exit: the clause is wrong; it hit a limit
_OUT_OF_MEMORY = re.compile(r"out of memory|failed to allocate|bad_alloc", re.IGNORECASE)
HEADROOM = 1 << 30  # the interpreter, DuckDB and pyarrow mapped before any row is read (~400 MB measured)
_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}
_UNITS |= {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def limit_bytes(text: str) -> int:
    """DuckDB's memory syntax (``500MB``, ``2GiB``) in bytes."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise PfsError(f"PFS_SQL_MEMORY_LIMIT: not a size such as 2GB: {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def probe_manifest(manifest: Manifest, sql: str, reads: Iterable[str] = ()) -> None:
    """:func:`probe` of ``sql`` over a local ``manifest`` (and the files ``reads``); once per process
    for the same query (a job builds its selection more than once)."""
    if manifest.is_local:
        _probe_once(sql, json.dumps(manifest.tables(), sort_keys=True), (manifest.local_dir,), tuple(reads))


@functools.cache
def _probe_once(sql: str, tables: str, dirs: tuple[str, ...], reads: tuple[str, ...]) -> None:
    probe(sql, dirs, reads, json.loads(tables))  # raising: not cached, so a retry probes again


def probe(sql: str, dirs: Iterable[str], reads: Iterable[str] = (), tables: Tables | None = None) -> None:
    """Run ``sql`` to the end in a limited child process (see the module docstring); PfsError when it
    does not finish there.  The child's connection is ``sql.connect(reads=, dirs=, tables=)``: the
    same relations under the same names (the local manifests' ``Manifest.tables``) and the same locks."""
    job: dict[str, object] = {"sql": sql, "dirs": list(dirs), "reads": list(reads), "tables": dict(tables or {})}
    job["as"] = limit_bytes(memory_limit()) + HEADROOM
    limit = timeout()
    env = {**os.environ, "PFS_SQL_TIMEOUT": "0"}  # the parent keeps the time
    # -P: never the working directory on the child's sys.path (a planted duckdb.py); pfs from where this one has it
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (here, os.environ.get("PYTHONPATH"))))
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-m", "dask_pfs.manifests.sql_probe"],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=limit or None,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PfsError(
            f"query stopped after {limit:g} s (PFS_SQL_TIMEOUT): narrow the clause or raise the limit"
        ) from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        why = lines[-1].removeprefix("pfs-probe: ") if lines else f"the query process ended with {done.returncode}"
        if done.returncode == FAILED and lines and lines[-1].startswith("pfs-probe: "):
            raise PfsError(why)  # the clause is wrong, no bound was hit: said as in pfs's own process
        raise PfsError(f"query refused: {why} (bounds: PFS_SQL_MEMORY_LIMIT={memory_limit()}, threads {threads()})")


def _main() -> int:
    """The child: limits first, then the query, drained batch by batch."""
    import resource

    job = json.load(sys.stdin)
    resource.setrlimit(resource.RLIMIT_AS, (job["as"], job["as"]))
    import duckdb

    from dask_pfs.manifests.sql import connect

    try:
        con = connect(reads=job["reads"], dirs=job["dirs"], tables=job["tables"])
        for _ in con.sql(job["sql"]).to_arrow_reader(10_000):
            pass
    except (duckdb.Error, MemoryError, PfsError) as exc:
        text = str(exc).strip().splitlines()
        first = text[0] if text else type(exc).__name__
        if isinstance(exc, PfsError):  # already pfs's own one line
            print(f"pfs-probe: {first}", file=sys.stderr)
            return FAILED
        if isinstance(exc, (MemoryError, duckdb.OutOfMemoryException)) or _OUT_OF_MEMORY.search(first):
            print(f"pfs-probe: {first}", file=sys.stderr)
            return BOUNDED
        print(f"pfs-probe: query failed: {first}", file=sys.stderr)  # as sql_run/sql say it in process
        return FAILED
    return 0


if __name__ == "__main__":
    sys.exit(_main())
