"""Content checksums of files, many at once: local files in the compiled core, others via fsspec.

A checksum is stored as ``"<algorithm>:<hex>"`` (``xxh3:``, ``sha256:``, ``md5:``), so manifests
made with different algorithms never compare equal by accident.  Reading is the cost.  Local and
mounted files go to the core in batches (``operators._native.checksum_files``,
``native/src/checksum.rs``): opened relative to their parents without following symlinks, read in
4 MiB blocks and hashed without the interpreter lock, on up to ``PFS_CHECKSUM_THREADS`` of the
core's threads, with no Python object per file or block.  Files on object stores and sftp stream
through fsspec on a small pool of Python threads (xxhash/hashlib release the GIL on large inputs).

Every batch function returns ``(ok, text)`` per file, in order: the checksum, or the text of the
error that kept the file from being read (its row keeps that, prefixed ``checksum:``).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import operators._native as _native
from operators.core.pool import CarryingPool
from operators.ratelimit import bytes_capped, take_bytes
from operators.root_identity import RootIdentity, host_pin

T = TypeVar("T")
Sums = list[tuple[bool, str]]  # per file: (True, "xxh3:...") or (False, "PermissionError: ...")

ALGORITHMS = ("xxh3", "sha256", "md5")
DEFAULT = "xxh3"
BUFFER = 8 << 20  # bytes per read of a remote file
DEFAULT_THREADS = 8
CAPPED_BATCH = 16  # files per core call under a bandwidth cap: their bytes are taken before they are read

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _forget_after_fork() -> None:
    global _lock, _pool
    _lock, _pool = threading.Lock(), None


os.register_at_fork(after_in_child=_forget_after_fork)


def check_algorithm(name: str) -> str:
    """The canonical algorithm name; ValueError for an unknown one (``xxh3-128`` is ``xxh3``)."""
    name = name.lower().replace("xxh3-128", "xxh3").replace("xxh128", "xxh3")
    if name not in ALGORITHMS:
        raise ValueError(f"unknown checksum algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")
    return name


def new_hasher(algorithm: str):
    if algorithm == "xxh3":
        import xxhash

        return xxhash.xxh3_128()
    return hashlib.new(algorithm)


def _threads(threads: int | None = None) -> int:
    return max(1, threads or int(os.environ.get("PFS_CHECKSUM_THREADS", DEFAULT_THREADS)))


def checksum_local_files(
    root: bytes | str,
    rels: Sequence[bytes],
    algorithm: str = DEFAULT,
    sizes: Sequence[int | None] | None = None,
    threads: int | None = None,
    root_id: RootIdentity | None = None,
) -> Sums:
    """Checksums of the files ``rels`` (relative to ``root``; ``b""``: ``root`` is the file) in the
    core.  ``sizes`` (the rows' sizes) pace a ``--max-bandwidth`` cap: without one, one call.
    ``root_id``: the root's identity when the job started (``operators.root_identity``); another
    directory renamed into its place since fails every file (ESTALE) instead of being read."""
    root_b = os.fsencode(root).rstrip(b"/") or b"/"
    rels = list(rels)
    pinned = host_pin(root_b, root_id)  # this host's (device, inode) of it, checked on its first look
    step = CAPPED_BATCH if bytes_capped() else max(1, len(rels))
    out: Sums = []
    for lo in range(0, len(rels), step):
        hi = lo + step
        if sizes is not None and bytes_capped():
            take_bytes(sum(size or 0 for size in sizes[lo:hi]))
        out.extend(_native.checksum_files(root_b, rels[lo:hi], algorithm, _threads(threads), root_id=pinned))
    return out


def checksum_local(path: bytes | str, algorithm: str = DEFAULT) -> str:
    """Checksum of one local (or mounted) file; symlinks are not followed.  OSError if unreadable."""
    ok, text = checksum_local_files(path, [b""], algorithm)[0]
    if not ok:
        raise OSError(text)
    return text


def checksum_remote(fs, path: str, algorithm: str = DEFAULT) -> str:
    """Checksum of a file on an fsspec file system (streamed in BUFFER-sized reads)."""
    h = new_hasher(algorithm)
    with fs.open(path, "rb", block_size=BUFFER) as f:
        while True:
            data = f.read(BUFFER)
            if not data:
                break
            take_bytes(len(data))
            h.update(data)
    return f"{algorithm}:{h.hexdigest()}"


def checksum_object(store, key: str, algorithm: str = DEFAULT) -> str:
    """Checksum of an object on an ``obstore`` store (``operators.stores``), streamed in BUFFER-sized chunks."""
    import obstore

    h = new_hasher(algorithm)
    for chunk in obstore.get(store, key).stream(min_chunk_size=BUFFER):
        take_bytes(len(chunk))
        h.update(chunk)
    return f"{algorithm}:{h.hexdigest()}"


def checksum_at(protocol: str, storage_options: dict, path: str, algorithm: str = DEFAULT) -> str:
    """Checksum of the file ``path`` (no protocol) of a non-local tree: on obstore for the stores it
    serves (``operators.stores``), else through fsspec."""
    from operators.stores import is_store, store_at

    if is_store(protocol):
        return checksum_object(*store_at(protocol, path, storage_options), algorithm)
    import fsspec

    return checksum_remote(fsspec.filesystem(protocol, **storage_options), path, algorithm)


def get_pool(threads: int | None = None) -> ThreadPoolExecutor:
    """The process-wide pool for fsspec checksums (``PFS_CHECKSUM_THREADS``, default 8)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = CarryingPool(max_workers=_threads(threads), thread_name_prefix="pfs-sum")
        return _pool


def checksum_many(items: list[T], checksum_one: Callable[[T], str], threads: int | None = None) -> Sums:
    """``checksum_one(item)`` for every item on the fsspec pool; errors are returned as text."""
    from operators.rows import describe_error

    def one(item: T) -> tuple[bool, str]:
        try:
            return True, checksum_one(item)
        except Exception as exc:
            return False, describe_error(exc)

    return list(get_pool(threads).map(one, items))


def fill_rows(rows: list[tuple], sums: Callable[[list[tuple]], Sums]) -> list[str]:
    """Set the ``checksum`` column of every error-free file row (``sums`` gets those rows); return
    "path: error" for failures.  A file that cannot be read keeps its row, with the error in its
    ``error`` column."""
    from operators.schema import ROW_COLUMNS

    i_type, i_sum, i_err = ROW_COLUMNS.index("type"), ROW_COLUMNS.index("checksum"), ROW_COLUMNS.index("error")
    todo = [i for i, r in enumerate(rows) if r[i_type] == "file" and r[i_err] is None and r[i_sum] is None]
    failures: list[str] = []
    for i, (ok, text) in zip(todo, sums([rows[i] for i in todo]), strict=True):
        values = list(rows[i])
        if ok:
            values[i_sum] = text
        else:
            values[i_err] = f"checksum: {text}"
            failures.append(f"{values[0]}: {values[i_err]}")
        rows[i] = tuple(values)
    return failures


def fill_table(table, sums: Callable[[list[tuple[str, bytes | None, int | None]]], Sums]):
    """:func:`fill_rows` for a manifest table: ``(table with checksums, "path: error" failures)``.

    ``sums`` gets ``(path, path_raw, size)`` of each error-free file without a checksum.
    """
    import pyarrow as pa

    kinds = table.column("type").to_pylist()
    errors = table.column("error").to_pylist()
    sums_col = table.column("checksum").to_pylist()
    rows = enumerate(zip(kinds, errors, sums_col, strict=True))
    todo = [i for i, (k, e, c) in rows if k == "file" and e is None and c is None]
    if not todo:
        return table, []
    paths = table.column("path").to_pylist()
    raws = table.column("path_raw").to_pylist()
    sizes = table.column("size").to_pylist()
    failures: list[str] = []
    for i, (ok, text) in zip(todo, sums([(paths[i], raws[i], sizes[i]) for i in todo]), strict=True):
        if ok:
            sums_col[i] = text
        else:
            errors[i] = f"checksum: {text}"
            failures.append(f"{paths[i]}: {errors[i]}")
    table = table.set_column(table.schema.get_field_index("checksum"), "checksum", pa.array(sums_col, pa.string()))
    table = table.set_column(table.schema.get_field_index("error"), "error", pa.array(errors, pa.string()))
    return table, failures


def checksum_table(
    protocol: str,
    root: str,
    storage_options: dict,
    table,
    out_url: str,
    name: str,
    algorithm: str = DEFAULT,
    out_storage_options: dict | None = None,
    root_id: RootIdentity | None = None,
) -> tuple[int, int, list[str]]:
    """Checksum the files of a chunk of manifest rows (below ``root``) and write them as a part.

    Used when a manifest was scanned without checksums: the rows keep every column, the
    checksum column is (re)computed, read failures go to ``error``.  Returns (files, bytes, errors).
    ``root_id``: a local root's pinned identity (:func:`checksum_local_files`): another
    directory renamed into its place fails every file instead of being hashed.
    """
    import pyarrow as pa

    from operators.names import to_bytes
    from operators.parts import write_part

    local = protocol in ("file", "local")
    cols = {n: table.column(n).to_pylist() for n in ("path", "path_raw", "type", "size", "error")}
    todo = [i for i in range(table.num_rows) if cols["type"][i] == "file" and cols["error"][i] is None]
    if local:
        rels = [to_bytes(cols["path"][i], cols["path_raw"][i]) for i in todo]
        results = checksum_local_files(root, rels, algorithm, [cols["size"][i] for i in todo], root_id=root_id)
    else:
        base = root.rstrip("/")
        at = lambda i: checksum_at(protocol, storage_options, f"{base}/{cols['path'][i]}", algorithm)  # noqa: E731
        results = checksum_many(todo, at)
    sums: list[str | None] = [None] * table.num_rows
    errors = list(cols["error"])
    failures: list[str] = []
    nbytes = 0
    for i, (ok, text) in zip(todo, results, strict=True):
        if ok:
            sums[i] = text
            nbytes += cols["size"][i] or 0
        else:
            errors[i] = f"checksum: {text}"
            failures.append(f"{cols['path'][i]}: {errors[i]}")
    idx_sum, idx_err = table.schema.get_field_index("checksum"), table.schema.get_field_index("error")
    table = table.set_column(idx_sum, "checksum", pa.array(sums, pa.string()))
    table = table.set_column(idx_err, "error", pa.array(errors, pa.string()))
    from operators.schema import SCHEMA

    write_part(table.cast(SCHEMA), out_url, name, out_storage_options)
    return len(todo) - len(failures), nbytes, failures
