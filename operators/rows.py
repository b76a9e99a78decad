"""Collect manifest rows column-wise and turn them into sorted Arrow tables."""

from __future__ import annotations

import stat as st
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from operators.names import decode
from operators.schema import LISTED_COLUMNS, ROW_COLUMNS, ROW_WIDTH, SCHEMA, TABLE_COLUMNS, TIME_UNIT_NS, TYPES

# Values in ROW_COLUMNS order (what the compiled core's rows hold), maybe followed by LISTED_COLUMNS values (a
# store's etag: ``row_from_info``, ``operators.scan.objstore.file_row``): a table makes those null where a row
# stops before them.  Read a row's values by their index in ROW_COLUMNS, never from its end.
Row = tuple

_I_PATH = ROW_COLUMNS.index("path")
_I_ERROR = ROW_COLUMNS.index("error")
_I_TYPE = ROW_COLUMNS.index("type")
_I_DEV = ROW_COLUMNS.index("dev")


def type_of_mode(mode: int) -> str:
    if st.S_ISREG(mode):
        return "file"
    if st.S_ISDIR(mode):
        return "directory"
    if st.S_ISLNK(mode):
        return "symlink"
    return "other"


def row_from_stat(rel: bytes, s, link_target: bytes | None = None, checksum: str | None = None) -> Row:
    """A row from an ``os.lstat`` result; ``rel`` is the path relative to the scan root."""
    path, path_raw = decode(rel)
    target, target_raw = decode(link_target) if link_target is not None else (None, None)
    return (
        path,
        path_raw,
        type_of_mode(s.st_mode),
        s.st_size,
        s.st_mtime_ns,
        s.st_atime_ns,
        s.st_ctime_ns,
        s.st_mode,
        s.st_uid,
        s.st_gid,
        s.st_ino,
        s.st_dev,
        s.st_nlink,
        target,
        target_raw,
        checksum,
        None,
    )


def error_row(rel: bytes | str, kind: str, error: BaseException | str) -> Row:
    """A row for an entry whose stat or listing failed: path, guessed type and the error text."""
    if isinstance(rel, bytes):
        path, path_raw = decode(rel)
    else:
        path, path_raw = rel, None
    values: list[Any] = [None] * len(ROW_COLUMNS)
    values[_I_PATH] = path
    values[1] = path_raw
    values[_I_TYPE] = kind
    values[_I_ERROR] = describe_error(error)
    return tuple(values)


def with_error(row: Row, error: BaseException | str) -> Row:
    values = list(row)
    values[_I_ERROR] = describe_error(error)
    return tuple(values)


def error_of(row: Row) -> str | None:
    """The error a row records (None: the entry was read), wherever its values end (``Row``)."""
    return row[_I_ERROR]


def describe_error(error: BaseException | str) -> str:
    if isinstance(error, str):
        return error
    if isinstance(error, OSError) and error.strerror:
        return f"{type(error).__name__}: [Errno {error.errno}] {error.strerror}"
    return f"{type(error).__name__}: {error}"


def row_from_info(rel: str, info: dict[str, Any]) -> Row:
    """A row from an fsspec ``info``/``ls(detail=True)`` dict (object stores, sftp, ...)."""
    kind = {"file": "file", "directory": "directory", "link": "symlink"}.get(str(info.get("type")), "other")
    if info.get("islink"):
        kind = "symlink"
    mtime = _ns(info.get("mtime", info.get("LastModified", info.get("last_modified", info.get("updated")))))
    atime = _ns(info.get("atime"))
    ctime = _ns(info.get("created", info.get("ctime")))
    mode = info.get("mode")
    target = info.get("destination")
    return (
        rel,
        None,
        kind,
        info.get("size") if kind != "directory" else info.get("size", 0),
        mtime,
        atime,
        ctime,
        int(mode) if mode is not None else None,
        _int(info.get("uid")),
        _int(info.get("gid")),
        _int(info.get("ino")),
        None,
        _int(info.get("nlink")),
        str(target) if target is not None else None,
        None,
        None,
        None,
        etag_of(info) if kind == "file" else None,
    )


def etag_of(info: dict[str, Any]) -> str | None:
    """The entity tag of an object (s3fs: ``ETag``; gcsfs, adlfs: ``etag``; obstore's ``ObjectMeta``: ``e_tag``)
    as :func:`http_etag` writes it, or None where the backend has none (sftp, memory, local)."""
    for key in ("ETag", "etag", "e_tag"):
        value = info.get(key)
        if value is not None:
            return http_etag(value)
    return None


def http_etag(tag: Any) -> str:
    """An entity tag as an HTTP ``ETag`` header (a HEAD) gives it: quoted.  A store's listing may not quote it
    (Azure's ``<Etag>`` does not, its HEAD does): the manifest holds one form, the one a HEAD reports."""
    tag = str(tag)
    return tag if tag.startswith(('"', 'W/"')) else f'"{tag}"'


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _ns(value: Any) -> int | None:
    """Nanoseconds since the epoch from the many shapes backends use (float, datetime, str)."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return int(value * 1_000_000_000)
    if hasattr(value, "timestamp"):
        if getattr(value, "tzinfo", 1) is None:
            from datetime import UTC

            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1_000_000) * 1000
    try:
        from datetime import datetime

        return _ns(datetime.fromisoformat(str(value).replace("Z", "+00:00")))
    except ValueError:
        return None


class RowBuffer:
    """Rows appended one at a time, turned into a manifest table sorted by path.

    With a ``sink`` (the compiled core's column buffer, ``operators.scan.local``) every row goes
    there: the core writes most of them itself, Python adds a directory's own row, and the table is
    made from its buffers without a Python list becoming an Arrow array (which would also import
    pandas, ~0.3 s of a small scan).
    """

    def __init__(self, sink: Any = None) -> None:
        self.rows: list[Row] = []
        self.sink = sink

    def __len__(self) -> int:
        return len(self.sink) if self.sink is not None else len(self.rows)

    def add(self, row: Row) -> None:
        self.extend([row])

    def extend(self, rows: Iterable[Row]) -> None:
        if self.sink is not None:
            self.sink.push_rows(list(rows))
        else:
            self.rows.extend(rows)

    def detach(self) -> RowBuffer:
        """The buffered rows in a new buffer, this one empty (no copy): a writer thread makes and writes
        their table while the walk fills this one again."""
        if self.sink is not None:
            return RowBuffer(self.sink.detach())
        out = RowBuffer()
        out.rows, self.rows = self.rows, []
        return out

    def take_table(self) -> pa.Table:
        """The buffered rows as a table (sorted by path); the buffer is emptied."""
        if self.sink is not None:
            return sink_table(self.sink, sort=True)
        rows, self.rows = self.rows, []
        return rows_to_table(rows)


def rows_to_table(rows: list[Row]) -> pa.Table:
    import pyarrow.compute as pc  # on first use: ~30-50 ms of imports a 1-file job does not need

    names = ROW_COLUMNS
    if any(len(r) != len(ROW_COLUMNS) for r in rows):  # some rows carry LISTED_COLUMNS: the others' are null
        names = ROW_COLUMNS + LISTED_COLUMNS
        rows = [r if len(r) == ROW_WIDTH else _padded(r) for r in rows]
    # lists, not tuples: pyarrow 26 converts a tuple of str ~1000x slower than a list
    columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in names]
    data = dict(zip(names, columns, strict=True))
    paths = pa.array(data["path"], pa.string())
    split = pc.split_pattern(paths, "/", max_splits=None, reverse=False)
    depth = pc.cast(pc.list_value_length(split), pa.int32())
    name = _name_of(paths)
    parent = pc.dictionary_encode(_parent_of(paths))
    arrays = {
        "path": paths,
        "name": name,
        "parent": parent,
        "depth": depth,
    }
    for col in names:
        if col == "path":
            continue
        field = SCHEMA.field(col)
        if col == "type":
            arrays[col] = pc.dictionary_encode(pa.array(data[col], pa.string()))
        elif pa.types.is_timestamp(field.type):
            # rows carry nanoseconds; the schema stores microseconds (truncated, like `touch -d`)
            ns = pa.array(data[col], pa.int64())
            arrays[col] = pc.divide(ns, TIME_UNIT_NS).cast(field.type)
        else:
            arrays[col] = pa.array(data[col], field.type)
    n = len(paths)
    table = pa.table([arrays[f.name] if f.name in arrays else pa.nulls(n, f.type) for f in SCHEMA], schema=SCHEMA)
    return table.sort_by("path") if len(rows) > 1 else table


def _padded(row: Row) -> Row:
    """``row`` with nulls for the LISTED_COLUMNS it stops before; a row of another width is refused."""
    if len(row) not in (len(ROW_COLUMNS), ROW_WIDTH):
        raise ValueError(f"a row of {len(row)} values: {len(ROW_COLUMNS)} or {ROW_WIDTH} expected")
    return row + (None,) * (ROW_WIDTH - len(row))


def _name_of(paths: pa.Array) -> pa.Array:
    import pyarrow.compute as pc

    return pc.replace_substring_regex(paths, pattern=r"^.*/", replacement="")


def _parent_of(paths: pa.Array) -> pa.Array:
    import pyarrow.compute as pc

    has_parent = pc.match_substring(paths, "/")
    parents = pc.replace_substring_regex(paths, pattern=r"/[^/]*$", replacement="")
    return pc.if_else(has_parent, parents, pa.scalar("", pa.string()))


def dir_row(rel: bytes, dev: int | None = None) -> Row:
    """A directory's row when only its name (and, for --one-file-system, its device) is known (a
    remover's walk reports it once it is listed)."""
    values: list = [None] * len(ROW_COLUMNS)
    values[0], values[1] = decode(rel)
    values[2] = "directory"
    values[_I_DEV] = dev
    return tuple(values)


def sink_table(sink: Any, sort: bool = False) -> pa.Table:
    """The rows in ``sink`` as a manifest table, wrapping the core's buffers (no copy); ``sort``: in path
    order, sorted by the core on its threads (``native/core/src/order.rs``: ~4x less CPU than ``sort_by``)."""
    n, cols, (n_parents, p_offsets, p_data) = sink.take(sort)
    arrays = []
    p_offsets, p_data = pa.py_buffer(p_offsets), pa.py_buffer(p_data)
    _check_offsets("parents", n_parents, p_offsets, p_data)
    parents = pa.Array.from_buffers(pa.string(), n_parents, [None, p_offsets, p_data])
    for field in SCHEMA:
        name, kind = field.name, field.type
        if name in ("checksum", *TABLE_COLUMNS):
            arrays.append(pa.nulls(n, kind))
            continue
        bufs = cols[name]
        if name in ("parent", "type"):
            indices = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bufs[1])])
            values = parents if name == "parent" else _TYPE_VALUES
            arrays.append(pa.DictionaryArray.from_arrays(indices, values))
            continue
        buffers = [pa.py_buffer(b) if b is not None else None for b in bufs]
        if len(buffers) == 3:
            _check_offsets(name, n, buffers[1], buffers[2])
        arrays.append(pa.Array.from_buffers(kind, n, buffers))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _check_offsets(name: str, n: int, offsets: pa.Buffer, data: pa.Buffer) -> None:
    """Refuse a variable-width column whose int32 offsets do not run from 0 up to its data's size
    (the core checks them; this keeps a wrapped offset from ever reaching a manifest)."""
    if offsets.size < 4 * (n + 1):
        raise ValueError(f"core column {name!r}: fewer offsets than values")
    values = pa.Array.from_buffers(pa.int32(), n + 1, [None, offsets])
    if values[0].as_py() != 0 or values[n].as_py() != data.size:
        raise ValueError(f"core column {name!r}: offsets do not cover its data")
    try:  # Arrow's own full check (not pyarrow.compute: ~30-50 ms to import, for a 1-file scan)
        pa.Array.from_buffers(pa.binary(), n, [None, offsets, data]).validate(full=True)
    except pa.ArrowInvalid as exc:
        raise ValueError(f"core column {name!r}: offsets go backwards ({exc})") from None


def _strings(values: tuple[str, ...]) -> pa.Array:
    """A string array made from buffers: ``pa.array`` of a Python list imports pandas (0.3 s)."""
    data = "".join(values).encode()
    offsets, end = [0], 0
    for v in values:
        end += len(v.encode())
        offsets.append(end)
    packed = b"".join(o.to_bytes(4, "little") for o in offsets)
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(packed), pa.py_buffer(data)])


_TYPE_VALUES = _strings(TYPES)
