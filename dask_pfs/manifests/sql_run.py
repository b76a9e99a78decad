"""Running SQL under bounds: memory, threads and wall-clock time per statement; results as Arrow.

A clause a user writes (``--where "len(range(0, 200000000)) > 0"``) can ask DuckDB for gigabytes
or hours; from an Airflow run's conf that would take a worker down.  Every connection pfs opens
(``dask_pfs.manifests.sql.connect``) gets a ``memory_limit`` and a ``threads`` count before it is locked, and
every statement (and every batch streamed out of one) runs under :func:`deadline`: a timer that
interrupts the connection (``interrupt()``) when the limit passes, turned into one line, exit 2.

Configured by environment (read per connection, so a worker's own environment counts):
``PFS_SQL_MEMORY_LIMIT`` (DuckDB's syntax, e.g. ``2GB``; default a quarter of this host's memory,
at most 8 GB), ``PFS_SQL_THREADS`` (default 2) and ``PFS_SQL_TIMEOUT`` (seconds per statement or
batch, default 900; ``0`` switches it off).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dask_pfs.errors import PfsError

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

BATCH_ROWS = 100_000

GiB = 1 << 30


def memory_limit() -> str:
    """DuckDB's ``memory_limit`` for pfs's connections."""
    given = os.environ.get("PFS_SQL_MEMORY_LIMIT", "").strip()
    if given:
        return given
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 * GiB
    return f"{max(256, min(8 * GiB, total // 4) >> 20)}MB"


def threads() -> int:
    try:
        return max(1, int(os.environ.get("PFS_SQL_THREADS", "2")))
    except ValueError:
        raise PfsError("PFS_SQL_THREADS must be a whole number") from None


def timeout() -> float:
    """Seconds a statement (or one streamed batch) may run; 0: no limit."""
    try:
        value = float(os.environ.get("PFS_SQL_TIMEOUT", "900"))
    except ValueError:
        raise PfsError("PFS_SQL_TIMEOUT must be a number of seconds") from None
    return max(0.0, value)


def apply(con: duckdb.DuckDBPyConnection) -> None:
    """Set the memory and thread limits (before the connection's configuration is locked)."""
    import duckdb

    try:
        con.execute("SET memory_limit = ?", [memory_limit()])
    except duckdb.Error as exc:
        raise PfsError(f"PFS_SQL_MEMORY_LIMIT refused by DuckDB: {str(exc).splitlines()[0]}") from None
    con.execute("SET threads = ?", [threads()])


@contextlib.contextmanager
def deadline(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Run the body with the connection interrupted after :func:`timeout` seconds; an interrupted
    statement is a one-line :class:`PfsError` (exit 2) naming the limit."""
    import duckdb

    limit = timeout()
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(limit, stop) if limit else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield
    except duckdb.Error:
        if fired.is_set():
            raise PfsError(
                f"query stopped after {limit:g} s (PFS_SQL_TIMEOUT): narrow the clause or raise the limit"
            ) from None
        raise
    finally:
        if timer is not None:
            timer.cancel()


def arrow_reader(
    con: duckdb.DuckDBPyConnection, sql: str, rows: int = BATCH_ROWS, params: dict[str, Any] | None = None
) -> pa.RecordBatchReader:
    """The result of ``sql`` as Arrow batches; a DuckDB error becomes a one-line PfsError.  ``params``:
    the values of ``sql``'s ``$name`` placeholders (a value pfs puts into SQL is a parameter, never text)."""
    import pyarrow as pa

    cur = con.cursor()
    with _one_line(), deadline(cur):
        reader = cur.sql(sql, params=params).to_arrow_reader(rows)

    def batches() -> Iterator[pa.RecordBatch]:
        while True:
            with _one_line(), deadline(cur):
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    """A DuckDB error (out of memory, a bad cast in a row) as a one-line PfsError (exit 2)."""
    import duckdb

    try:
        yield
    except duckdb.Error as exc:
        raise PfsError(f"query failed: {_first_line(exc)}") from None


def fetch_all(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of ``sql``, run under the limits (``dask_pfs.manifests.sql_run``)."""
    cur = con.cursor()
    with _one_line(), deadline(cur):
        rel = cur.sql(sql)
        return list(rel.columns), rel.fetchall()


def write_parquet(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    path: str,
    storage_options: dict | None = None,
    params: dict[str, Any] | None = None,
) -> int:
    """Write the result of ``sql`` (``params``: see :func:`arrow_reader`) to the Parquet file ``path``
    (pyarrow does the writing: the connection itself cannot write); returns the rows written."""
    import pyarrow.parquet as pq

    from operators.core import outputs

    reader = arrow_reader(con, sql, params=params)
    rows = 0
    # the one writer: a random temp name in the checked directory, renamed onto ``path`` when complete
    # (a local name is taken as it is: fsspec reads '::' and globs); one put on an object store
    with (
        outputs.output_file(path, storage_options) as f,
        pq.ParquetWriter(f, reader.schema, compression="zstd") as writer,
    ):
        for batch in reader:
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


__all__ = ["apply", "arrow_reader", "deadline", "fetch_all", "memory_limit", "threads", "timeout", "write_parquet"]
