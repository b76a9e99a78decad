"""Manifests as DataFrames, and DataFrames as selections of manifest rows.

Notebook users filter a manifest with the tool they know (Dask, pandas, pyarrow, DuckDB) and hand the
result to ``copy``, ``remove`` or ``verify`` as ``selection=``.  The frame only *picks* rows: its
``path``/``path_raw`` columns are written to a Parquet file and the manifest is semi-joined on them in
DuckDB, so the rows acted on, their types and the engine's safety checks all come from the manifest
itself; a frame cannot add a path or change a size.  The semi-join is a ``dask_pfs.manifests.sql.Filter`` (pfs's
own condition, naming the one file it reads), ANDed with the user's checked ``where``, so every driver
that takes a ``where`` takes a selection unchanged (like the sync plan's filters).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from dask_pfs.errors import PfsError
from dask_pfs.manifests import sql as pfs_sql
from operators import pandas_gate
from operators.core import outputs
from operators.schema import SCHEMA

if TYPE_CHECKING:
    import dask.dataframe as dd
    import duckdb
    import pandas as pd

    from dask_pfs.manifests.manifest import Manifest

KEY = "coalesce(path_raw, encode(path))"  # exact path bytes: what selections, the sync plan, verify and diff join on
SELECTION_FIELDS = {"path": pa.string(), "path_raw": pa.binary()}

Selectable = Any  # a Parquet path, a pandas/Dask DataFrame, a pyarrow Table/RecordBatchReader, a DuckDB relation


# ---------------------------------------------------------------- manifest -> frames


def query(m: Manifest, where: str | None = None, select: str | None = None, order: str | None = None,
          limit: int | None = None, group_by: str | None = None,
          con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyRelation:  # fmt: skip
    """The manifest's rows matching ``where`` as a lazy DuckDB relation (streamed out of core), on the
    connection that can read nothing but the manifest (``dask_pfs.manifests.sql``: the clauses are checked).

    With ``con`` (the caller's own connection, e.g. ``duckdb.default_connection()``), the result is read
    on pfs's locked connection into Arrow and handed to ``con`` as a relation there, to join with the
    caller's own tables: the clauses still run only where they can read nothing but the manifest.
    """
    sql = pfs_sql.select_sql(m, where, select, order, limit, group_by)
    rel = pfs_sql.run_query(pfs_sql.connect(m), sql)
    if con is None:
        return rel
    return con.from_arrow(rel.to_arrow_table())


def to_arrow(m: Manifest, where: str | None = None, columns: list[str] | None = None) -> pa.Table:
    rel = query(m, where, ", ".join(f'"{c}"' for c in columns) if columns else None)
    return rel.to_arrow_table()


def _import_pandas() -> None:
    """pandas, even in a ``pfs`` command's process (where ``operators.pandas_gate`` keeps pyarrow from importing it)."""
    with pandas_gate.wanted():
        import pandas  # noqa: F401


def to_pandas(m: Manifest, where: str | None = None, columns: list[str] | None = None) -> pd.DataFrame:
    _import_pandas()
    return to_arrow(m, where, columns).to_pandas(types_mapper=pandas_type)


def pandas_type(arrow_type: pa.DataType):
    """pandas dtypes that survive a round trip through Dask's ``to_parquet``: names as strings (not
    categories whose values a partition does not know), raw name bytes as Arrow binary (not objects)."""
    import pandas as pd

    if pa.types.is_binary(arrow_type):
        return pd.ArrowDtype(pa.binary())
    if pa.types.is_dictionary(arrow_type):
        return pd.StringDtype()
    return None


def to_dask(m: Manifest, columns: list[str] | None = None, **read_parquet: Any) -> dd.DataFrame:
    """The manifest as a Dask DataFrame, one partition per part file (or more, per ``read_parquet``)."""
    _import_pandas()
    import dask.dataframe as dd
    import fsspec

    files = m.part_files()
    if not m.is_local:  # URLs, opened with the manifest's own storage options
        fs, _ = fsspec.core.url_to_fs(m.url, **(m.storage_options or {}))
        files = [fs.unstrip_protocol(p) for p in files]
        read_parquet.setdefault("storage_options", m.storage_options or {})
    if not files:  # an empty scan: no part files, same columns
        empty = SCHEMA.empty_table().to_pandas(types_mapper=pandas_type)
        return dd.from_pandas(empty[columns] if columns else empty, npartitions=1)
    read_parquet.setdefault("arrow_to_pandas", {"types_mapper": pandas_type})
    return dd.read_parquet(files, columns=columns, **read_parquet)


# ---------------------------------------------------------------- frames -> a selection


def selection_filter(files: list[str], has_raw: bool) -> pfs_sql.Filter:
    """The filter picking the manifest rows whose path is in the Parquet ``files`` (each one a relation
    of the connection the filter runs on, named by ``sql.file_table``: ``sql.connect``'s ``reads``)."""
    key = KEY if has_raw else "path"
    source = " UNION ALL ".join(f"SELECT {key} FROM {pfs_sql.file_table(f)}" for f in files)
    return pfs_sql.Filter(f"{key} IN ({source})", tuple(files))


@contextlib.contextmanager
def selected(selection: Selectable) -> Iterator[pfs_sql.Filter]:
    """The filter of ``selection``, valid inside the block (a frame is written to a temp file).

    A Parquet path (file or directory, e.g. a frame saved with ``to_parquet``) is read in place,
    so a job given the same file again is the same job (its journal resumes it).
    """
    if isinstance(selection, (str, os.PathLike)):
        yield _saved(os.fspath(selection))
        return
    work = tempfile.mkdtemp(prefix="pfs-selection-")
    try:
        path = os.path.join(work, "selection.parquet")
        has_raw = _write(selection, path)
        yield selection_filter([path], has_raw)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _saved(path: str) -> pfs_sql.Filter:
    if not os.path.exists(path):
        raise PfsError(f"selection {path}: no such file or directory")
    try:
        dataset = pq.ParquetDataset(path)  # a directory: its *.parquet files, hidden and _metadata left out
        names = set(dataset.schema.names)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise PfsError(f"selection {path}: not readable as Parquet ({exc})") from None
    if "path" not in names:
        raise PfsError(f"selection {path}: no 'path' column (select rows of a manifest, e.g. Manifest.to_dask())")
    files = sorted(os.path.abspath(f) for f in dataset.files)
    if not files:
        raise PfsError(f"selection {path}: no Parquet files")
    return selection_filter(files, "path_raw" in names)


def _write(selection: Selectable, path: str) -> bool:
    """Stream the frame's path columns into ``path`` (through the one writer); whether it had ``path_raw``."""
    writer: pq.ParquetWriter | None = None
    schema: pa.Schema | None = None
    with outputs.replace_file(path, outputs.PRIVATE_FILE) as out:
        try:
            for batch in _batches(selection):
                if "path" not in batch.column_names:
                    raise PfsError(
                        "selection has no 'path' column (select rows of a manifest, e.g. Manifest.to_dask())"
                    )
                names = [n for n in SELECTION_FIELDS if n in batch.column_names]
                table = pa.Table.from_batches([batch]).select(names)
                try:
                    table = table.cast(pa.schema([(n, SELECTION_FIELDS[n]) for n in names]))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise PfsError(f"selection: path/path_raw of the wrong type ({exc})") from None
                if writer is None:
                    schema = table.schema
                    writer = pq.ParquetWriter(out.file, schema)
                writer.write_table(table.cast(schema))
            if writer is None:  # no batches at all: an empty selection
                schema = pa.schema([("path", pa.string())])
                writer = pq.ParquetWriter(out.file, schema)
        finally:
            if writer is not None:
                writer.close()
    return schema is not None and "path_raw" in schema.names


def _batches(selection: Selectable) -> Iterator[pa.RecordBatch]:
    """Record batches of any supported frame, a partition or batch at a time (out of core)."""
    if _is_dask(selection):
        cols = [c for c in SELECTION_FIELDS if c in selection.columns] or list(selection.columns)
        for part in selection[cols].to_delayed():
            yield from _batches(part.compute())
        return
    if type(selection).__module__.startswith("pandas"):
        cols = [c for c in SELECTION_FIELDS if c in selection.columns] or list(selection.columns)
        yield from pa.Table.from_pandas(selection[cols], preserve_index=False).to_batches()
        return
    if isinstance(selection, pa.RecordBatch):
        yield selection
        return
    if isinstance(selection, pa.Table):
        yield from selection.to_batches()
        return
    if hasattr(selection, "__arrow_c_stream__"):  # pyarrow readers, DuckDB relations, polars, ...
        yield from pa.RecordBatchReader.from_stream(selection)
        return
    raise PfsError(
        f"selection: a {type(selection).__name__} is not a frame (give a Dask or pandas DataFrame, "
        "a pyarrow Table, a DuckDB relation or a Parquet path with a 'path' column)"
    )


def _is_dask(obj: Any) -> bool:
    return type(obj).__module__.startswith("dask") and hasattr(obj, "to_delayed")


def takes_selection(manifest_arg: str | None = "manifest") -> Callable[[Callable], Callable]:
    """Give a driver a ``selection=`` argument: a frame of rows its where clause then also requires.

    ``manifest_arg`` names the argument that must be given with a selection (the rows it picks from).
    """

    def wrap(func: Callable) -> Callable:
        @functools.wraps(func)
        def driver(*args: Any, selection: Selectable = None, **kwargs: Any) -> Any:
            if selection is None:
                return func(*args, **kwargs)
            if manifest_arg and kwargs.get(manifest_arg) is None:
                raise PfsError(f"selection= needs {manifest_arg}=: it picks rows of that manifest")
            given = pfs_sql.where_filter(kwargs.get("where"))  # the user's clause is checked as ever
            with selected(selection) as picked:
                if given is not None:
                    picked = pfs_sql.Filter(f"({given.condition}) AND {picked.condition}", given.reads + picked.reads)
                kwargs["where"] = picked
                return func(*args, **kwargs)

        sig = inspect.signature(func)
        extra = inspect.Parameter("selection", inspect.Parameter.KEYWORD_ONLY, default=None)
        driver.__signature__ = sig.replace(parameters=[*sig.parameters.values(), extra])  # type: ignore[attr-defined]
        return driver

    return wrap
