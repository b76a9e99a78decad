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

The child is a fork of this process when this process has one thread (a command's, issue 43): it has
DuckDB and pyarrow imported already, so the probe costs a connection and the query, not an interpreter
and its imports (~0.4 s of CPU before).  Its address-space limit is then what this process has mapped
plus the same allowance (``PFS_SQL_MEMORY_LIMIT`` plus :data:`FORK_HEADROOM`).  A process with more
threads (a cluster's driver, a worker) cannot fork safely: its child is a fresh interpreter as before.

Manifests on object stores are read through registered datasets the child cannot rebuild
without their credentials: their clauses are bounded by the in-process limits only
(``dask_pfs.manifests.sql_run``).
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, TypeVar, overload

from dask_pfs.errors import PfsError
from dask_pfs.manifests.sql_run import memory_limit, threads, timeout

if TYPE_CHECKING:
    from dask_pfs.manifests.manifest import Manifest
    from dask_pfs.manifests.relations import Tables

FAILED, BOUNDED = 3, 4  # the child's exit: the clause is wrong; it hit a limit
_OUT_OF_MEMORY = re.compile(r"out of memory|failed to allocate|bad_alloc", re.IGNORECASE)
HEADROOM = 1 << 30  # the interpreter, DuckDB and pyarrow mapped before any row is read (~400 MB measured)
# a forked child's allowance above what its parent has mapped: the database it opens and its threads
# (what ``HEADROOM`` leaves a fresh interpreter above its ~400 MB)
FORK_HEADROOM = 512 << 20
_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}
_UNITS |= {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def limit_bytes(text: str) -> int:
    """DuckDB's memory syntax (``500MB``, ``2GiB``) in bytes."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise PfsError(f"PFS_SQL_MEMORY_LIMIT: not a size such as 2GB: {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)
_PROBED: set[tuple[str, str, str, tuple[str, ...]]] = set()  # queries probed over the same files in this process


@overload
def probe_manifest(manifest: Manifest, sql: str, reads: Iterable[str] = ...) -> None: ...
@overload
def probe_manifest(manifest: Manifest, sql: str, reads: Iterable[str], connecting: Callable[[], C]) -> C: ...
@overload
def probe_manifest(manifest: Manifest, sql: str, *, connecting: Callable[[], C]) -> C: ...


def probe_manifest(
    manifest: Manifest, sql: str, reads: Iterable[str] = (), connecting: Callable[[], C] | None = None
) -> C | None:
    """:func:`probe` of ``sql`` over a local ``manifest`` (and the files ``reads``); once per process
    for the same query (a job builds its selection more than once).  ``connecting``: opens the
    connection the query will run on, while the probe runs (returned; closed if the probe fails)."""
    if not manifest.is_local:  # bounded by the in-process limits only (module docstring)
        return connecting() if connecting is not None else None
    tables = manifest.tables()  # lists the parts: once
    key = (sql, json.dumps(tables, sort_keys=True), manifest.local_dir, tuple(reads))
    if key in _PROBED:
        return connecting() if connecting is not None else None
    con = probe(sql, (manifest.local_dir,), reads, tables, connecting)
    _PROBED.add(key)  # after it finished: a probe that raised is asked again by a retry
    return con


def probe(
    sql: str,
    dirs: Iterable[str],
    reads: Iterable[str] = (),
    tables: Tables | None = None,
    connecting: Callable[[], C] | None = None,
) -> C | None:
    """Run ``sql`` to the end in a limited child process (see the module docstring); PfsError when it
    does not finish there.  The child's connection is ``sql.connect(reads=, dirs=, tables=)``: the
    same relations under the same names (the local manifests' ``Manifest.tables``) and the same locks.

    ``connecting`` opens the caller's own connection for the query meanwhile: a DuckDB database costs
    ~25 ms to open, and a forked child runs on the other core (the connection reads nothing before the
    probe has finished; one that failed is closed).  It is returned."""
    job: dict[str, object] = {"sql": sql, "dirs": list(dirs), "reads": list(reads), "tables": dict(tables or {})}
    room = limit_bytes(memory_limit())
    limit = timeout()
    opened: list[C] = []
    try:
        if _fork_ready():
            job["as"] = _mapped() + room + FORK_HEADROOM
            code, err = _forked(job, limit, lambda: opened.append(connecting()) if connecting else None)
        else:
            job["as"] = room + HEADROOM
            code, err = _spawned(job, limit)
        _refuse(code, err)
        return opened[0] if opened else connecting() if connecting is not None else None
    except BaseException:
        for con in opened:
            con.close()
        raise


def _refuse(code: int, err: str) -> None:
    """PfsError for a probe that did not finish (exit ``code``, its error text ``err``)."""
    if code != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        why = lines[-1].removeprefix("pfs-probe: ") if lines else f"the query process ended with {code}"
        if code == FAILED and lines and lines[-1].startswith("pfs-probe: "):
            raise PfsError(why)  # the clause is wrong, no bound was hit: said as in pfs's own process
        raise PfsError(f"query refused: {why} (bounds: PFS_SQL_MEMORY_LIMIT={memory_limit()}, threads {threads()})")


def _stopped(limit: float) -> PfsError:
    return PfsError(f"query stopped after {limit:g} s (PFS_SQL_TIMEOUT): narrow the clause or raise the limit")


# jemalloc's (pyarrow's allocator) purging thread, started at import: jemalloc's own fork handlers take its
# locks around fork and the child starts its threads again when needed (as for dask_pfs.warm's server)
FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd"})


def _threads() -> int | None:
    """Threads of this process other than :data:`FORK_SAFE_THREADS`; None when they cannot be read."""
    count = 0
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/comm") as f:
                count += f.read().strip() not in FORK_SAFE_THREADS
    except OSError:
        return None
    return count


def _fork_ready() -> bool:
    """Whether this process can fork its probe: one thread (and jemalloc's).  The parse-only DuckDB
    database (``sql._parser``) keeps threads while open; it is closed for the fork (opened again when needed)."""
    if _threads() == 1:
        return True
    from dask_pfs.manifests.sql import release_parser

    release_parser()
    return _threads() == 1


def _mapped() -> int:
    """Bytes of address space this process has mapped (``VmSize``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def _forked(job: dict, limit: float, meanwhile: Callable[[], object]) -> tuple[int, str]:
    """Run the probe in a fork of this one-thread process, ``meanwhile()`` here as it runs; (exit status,
    its error text)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns, never touches this process's buffered streams
        code = 1
        try:
            os.close(r)
            for sig in (signal.SIGINT, signal.SIGTERM):  # as a fresh interpreter: Python's handlers gone,
                if signal.getsignal(sig) not in (signal.SIG_IGN, None):  # an ignored signal still ignored
                    signal.signal(sig, signal.SIG_DFL)
            with open(w, "w", encoding="utf-8", errors="backslashreplace") as err:
                code = _drain(job, err)
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    ends = time.monotonic() + limit if limit else None
    status: int | None = None
    try:
        meanwhile()
        while True:
            wait = None if ends is None else max(0.0, ends - time.monotonic())
            if not select.select([r], [], [], wait)[0]:
                break  # over the time limit
            chunk = os.read(r, 65536)
            if not chunk:
                status = os.waitpid(pid, 0)[1]
                break
            chunks.append(chunk)
    finally:  # over the limit, or Ctrl-C here: the child goes too, never left running
        os.close(r)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if status is None:
        raise _stopped(limit)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", "replace")


def _spawned(job: dict, limit: float) -> tuple[int, str]:
    """Run the probe in a fresh interpreter (``python -m dask_pfs.manifests.sql_probe``)."""
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
        raise _stopped(limit) from None
    return done.returncode, done.stderr


def _main() -> int:
    """The spawned child: the job from stdin, errors on stderr."""
    from operators import pandas_gate

    pandas_gate.refuse_implicit()  # pyarrow without NumPy (or pandas): a third of this child's start-up
    return _drain(json.load(sys.stdin), sys.stderr)


def _drain(job: dict, err) -> int:
    """The child: limits first, then the query, drained batch by batch; one line on ``err`` if it fails."""
    import resource

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
            print(f"pfs-probe: {first}", file=err)
            return FAILED
        if isinstance(exc, (MemoryError, duckdb.OutOfMemoryException)) or _OUT_OF_MEMORY.search(first):
            print(f"pfs-probe: {first}", file=err)
            return BOUNDED
        print(f"pfs-probe: query failed: {first}", file=err)  # as sql_run/sql say it in process
        return FAILED
    return 0


if __name__ == "__main__":
    sys.exit(_main())
