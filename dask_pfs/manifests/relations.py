"""The relations pfs's own SQL names: each manifest and Parquet file a locked connection reads.

pfs's SQL never carries a path in its text.  ``dask_pfs.manifests.sql.connect`` makes one view per
name pfs chose (``Manifest.table_name``, :func:`file_table`) with DuckDB's Python API, the files
given as Python values, so a path is never parsed as SQL whatever its characters.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from dask_pfs.errors import PfsError

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

# What a name pfs chose reads: Parquet files (a glob or a list of paths), or None: the manifest
# schema with no rows (an empty scan).  JSON-able: the probe's child rebuilds the same relations.
Tables = Mapping[str, "str | list[str] | None"]
MANIFEST_PREFIX = "pfs_manifest_"  # a manifest's name (``Manifest.table_name``): its columns are the schema's


def literal(path: str) -> str:
    """The pattern DuckDB's ``read_parquet`` matches to ``path`` alone: it globs every path it is given
    (a plan under ``p*/`` also read ``pX/plan.parquet``; one under ``a[b]/`` read ``ab/``'s), so each
    of ``*``, ``?`` and ``[`` is put in a character class of its own."""
    return re.sub(r"([*?\[])", r"[\1]", utf8(path))


def file_table(path: str) -> str:
    """The name ``sql.connect`` reads the Parquet file ``path`` (one of its ``reads``) under."""
    return "pfs_file_" + hashlib.sha1(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()[:12]


def create_views(con: duckdb.DuckDBPyConnection, tables: Tables, optional: Iterable[str] = ()) -> None:
    """One view per name, its files given to DuckDB as Python values (never pasted into SQL text): a
    list is of paths (each matched as it is, :func:`literal`), a string a pattern (``Manifest.tables``).
    A name in ``optional`` whose file is not readable Parquet (a temp file an earlier run left half
    written, to be overwritten) gets no view: only a query naming it fails."""
    import duckdb

    from operators.schema import SCHEMA

    skip = set(optional)
    for name, files in tables.items():
        try:
            if files is None:
                cols = ", ".join(f'NULL::{duck_type(f)} AS "{f.name}"' for f in SCHEMA)
                rel = con.sql(f"SELECT {cols} WHERE false")
            else:
                rel = con.read_parquet([literal(f) for f in files] if isinstance(files, list) else utf8(files))
                if name.startswith(MANIFEST_PREFIX):
                    rel = _with_current_columns(rel, SCHEMA)
            rel.create_view(name)
        except duckdb.Error:
            if name not in skip:
                raise


def _with_current_columns(rel: duckdb.DuckDBPyRelation, schema: pa.Schema) -> duckdb.DuckDBPyRelation:
    """``rel`` with the schema's columns an older manifest lacks as nulls (schema version 1 had no
    ``xattrs``/``has_acl``, versions 1 and 2 no ``etag``: each added at the schema's end, so they come in
    its order): every query pfs or a user writes reads one set of columns."""
    missing = [f for f in schema if f.name not in rel.columns]
    if not missing:
        return rel
    return rel.select(", ".join(["*", *(f'NULL::{duck_type(f)} AS "{f.name}"' for f in missing)]))


def duck_type(field: pa.Field) -> str:
    """The DuckDB type of a manifest column (an empty manifest's relation has the schema's columns)."""
    import pyarrow as pa

    t = field.type
    if pa.types.is_dictionary(t) or pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_binary(t):
        return "BLOB"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_list(t):  # the xattrs column
        return "STRUCT(name VARCHAR, digest VARCHAR, value BLOB)[]"
    if pa.types.is_unsigned_integer(t):
        return "UBIGINT"
    return "BIGINT"


def utf8(place: str) -> str:
    """``place`` if DuckDB can be given it (valid UTF-8), else a one-line PfsError."""
    try:
        place.encode("utf-8")
    except UnicodeEncodeError:
        raise PfsError(
            f"{place.encode('utf-8', 'backslashreplace').decode()}: not valid UTF-8 (DuckDB cannot read it)"
        ) from None
    return place
