"""Extended attributes and ACL presence of manifest rows (``pfs scan --xattrs``), read in the core.

The core (``operators._native.xattrs_of``, ``native/core/src/xattrs.rs``) reads each entry's
attributes relative to its parent directory, never following a symlink (a symlink's own attributes),
on up to ``PFS_CHECKSUM_THREADS`` core threads.  A row gets ``xattrs`` (sorted by name: name, "xxh3:"
digest of the value, the value when at most 256 bytes) and ``has_acl`` (``system.posix_acl_access``
or ``_default`` present).  An entry whose attributes cannot be read keeps its row with the error,
prefixed ``xattrs:``, and null columns.  Only local and mounted trees: object stores are refused.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow as pa

import operators._native as _native
from operators.checksum import _threads
from operators.names import decode, to_bytes
from operators.rows import Row, rows_to_table
from operators.schema import ROW_COLUMNS, XATTRS

XATTRS_LOCAL = "--xattrs reads the attributes of local and mounted trees only"
Read = tuple[bool, tuple[list[tuple[bytes, str, bytes | None]], bool] | None, str]


def xattrs_local(root: bytes | str, rels: Sequence[bytes], threads: int | None = None) -> list[Read]:
    """Per entry ``rels`` (relative to ``root``; ``b""``: ``root`` itself): ``(True, (attrs, has_acl), "")``
    or ``(False, None, error text)``."""
    root_b = os.fsencode(root).rstrip(b"/") or b"/"
    return _native.xattrs_of(root_b, list(rels), _threads(threads))


def fill_xattrs(table: pa.Table, root: bytes | str, threads: int | None = None) -> tuple[pa.Table, list[str]]:
    """``table`` with its ``xattrs`` and ``has_acl`` columns read from the tree at ``root`` (rows
    already in error are left null); and "path: error" for the entries that could not be read."""
    paths = table.column("path").to_pylist()
    raws = table.column("path_raw").to_pylist()
    errors = table.column("error").to_pylist()
    todo = [i for i, e in enumerate(errors) if e is None]
    attrs: list[list[dict] | None] = [None] * len(paths)
    acl: list[bool | None] = [None] * len(paths)
    failures: list[str] = []
    done = xattrs_local(root, [to_bytes(paths[i], raws[i]) for i in todo], threads)
    for i, (ok, got, text) in zip(todo, done, strict=True):
        if ok and got is not None:
            attrs[i] = [{"name": decode(n)[0], "digest": d, "value": v} for n, d, v in got[0]]
            acl[i] = got[1]
        else:
            errors[i] = f"xattrs: {text}"
            failures.append(f"{paths[i]}: {errors[i]}")
    for name, values, kind in (("xattrs", attrs, XATTRS), ("has_acl", acl, pa.bool_()), ("error", errors, pa.string())):
        idx = table.schema.get_field_index(name)
        table = table.set_column(idx, table.schema.field(idx), pa.array(values, kind))
    return table, failures


def file_xattrs(row: Row, path: str) -> tuple[pa.Table, Row]:
    """The table of a scan whose root is one file, with its attributes (read relative to its
    directory: a symlink's own), and its row again (an error reading them is the row's)."""
    table, _ = fill_xattrs(rows_to_table([row]), os.path.dirname(path.rstrip("/")) or "/")
    return table, tuple(table.column(c)[0].as_py() for c in ROW_COLUMNS)
