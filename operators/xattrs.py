"""Extended attributes and ACL presence of manifest rows (``pfs scan --xattrs``), read in the core.

The core (``operators._native.xattrs_of``, ``native/core/src/xattrs.rs``) reads each entry's
attributes relative to its parent directory, never following a symlink (a symlink's own attributes),
on up to ``PFS_CHECKSUM_THREADS`` core threads, and hands back Arrow buffers (no Python object per
entry or attribute).  A row gets ``xattrs`` (sorted by name: name, "xxh3:" digest of the value, the
value when at most 256 bytes) and ``has_acl`` (``system.posix_acl_access`` or ``_default`` present).
An entry whose attributes cannot be read keeps its row with the error, prefixed ``xattrs:``, and null
columns.  S3 objects: their user metadata (``operators.objmeta``); other object stores are refused.
"""

from __future__ import annotations

import os
from typing import Protocol

import pyarrow as pa

import operators._native as _native
from operators.checksum import _threads
from operators.objmeta import fill_object_xattrs, has_metadata, object_metadata
from operators.rows import Row, rows_to_table
from operators.schema import ROW_COLUMNS, XATTR, XATTRS

XATTRS_LOCAL = "--xattrs reads the attributes of local and mounted trees and the metadata of S3 objects only"


def _binary(kind: pa.DataType, n: int, buffers: tuple[bytes, bytes, bytes | None]) -> pa.Array:
    offsets, data, validity = buffers
    bufs = [pa.py_buffer(validity) if validity is not None else None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, n, bufs)


def xattrs_local(root: bytes | str, rels: list[bytes], threads: int | None = None) -> tuple[pa.Array, pa.Array, list]:
    """The ``xattrs`` and ``has_acl`` arrays of the entries ``rels`` (relative to ``root``; ``b""``: ``root``
    itself), null where they could not be read, and those entries as ``(index, error text)``."""
    import pyarrow.compute as pc  # 30-57 ms of imports: only for a job that reads attributes

    root_b = os.fsencode(root).rstrip(b"/") or b"/"
    ok, acl, ends, names, digests, values, failed = _native.xattrs_of(root_b, rels, _threads(threads))
    n = len(rels)
    count = int.from_bytes(ends[-4:], "little") if n else 0
    attrs = pa.StructArray.from_arrays(
        [_binary(pa.string(), count, names), _binary(pa.string(), count, digests), _binary(pa.binary(), count, values)],
        fields=list(XATTR),
    )
    read = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(ok)]).cast(pa.bool_())
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(ends)])
    lists = pa.ListArray.from_arrays(offsets, attrs, type=XATTRS, mask=pc.invert(read))
    has_acl = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(acl)]).cast(pa.bool_())
    return lists, pc.if_else(read, has_acl, pa.scalar(None, pa.bool_())), failed


def fill_xattrs(table: pa.Table, root: bytes | str, threads: int | None = None) -> tuple[pa.Table, list[str]]:
    """``table`` with its ``xattrs`` and ``has_acl`` columns read from the tree at ``root`` (rows
    already in error are left null); and "path: error" for the entries that could not be read."""
    import pyarrow.compute as pc

    readable = pc.is_null(table.column("error")).combine_chunks()
    todo = pc.indices_nonzero(readable)
    keys = pc.coalesce(table.column("path_raw"), table.column("path").cast(pa.binary())).combine_chunks()
    lists, acl, failed = xattrs_local(root, pc.take(keys, todo).to_pylist(), threads)
    # row i takes result j when it was read (todo[j] == i), else null
    where = pc.subtract(pc.cumulative_sum(readable.cast(pa.int32())), 1)
    where = pc.if_else(readable, where, pa.scalar(None, pa.int32()))
    columns = {"xattrs": pc.take(lists, where), "has_acl": pc.take(acl, where)}
    failures: list[str] = []
    if failed:
        errors = table.column("error").to_pylist()
        paths = table.column("path").to_pylist()
        for j, text in failed:
            i = todo[j].as_py()
            errors[i] = f"xattrs: {text}"
            failures.append(f"{paths[i]}: {errors[i]}")
        columns["error"] = pa.array(errors, pa.string())
    for name, values in columns.items():
        idx = table.schema.get_field_index(name)
        table = table.set_column(idx, table.schema.field(idx), values)
    return table, failures


class _Where(Protocol):
    """A resolved location (``dask_pfs.urls.Location``): what a single-file scan reads attributes from."""

    @property
    def path(self) -> str: ...

    @property
    def protocol(self) -> str: ...

    @property
    def storage_options(self) -> dict: ...


def readable(protocol: str) -> bool:
    """Whether ``scan --xattrs`` can read the attributes of a tree of ``protocol``."""
    return protocol in ("file", "local") or has_metadata(protocol)


def file_xattrs(row: Row, where: _Where) -> tuple[pa.Table, Row]:
    """The table of a scan whose root is one file, with its attributes (read relative to its
    directory: a symlink's own; an S3 object: its metadata), and its row again (an error reading
    them is the row's)."""
    if has_metadata(where.protocol):
        from operators.stores import store_at

        store, key = store_at(where.protocol, where.path, where.storage_options)
        table, _ = fill_object_xattrs(rows_to_table([row]), lambda _: object_metadata(store, key))
    else:
        table, _ = fill_xattrs(rows_to_table([row]), os.path.dirname(where.path.rstrip("/")) or "/")
    return table, tuple(table.column(c)[0].as_py() for c in ROW_COLUMNS)
