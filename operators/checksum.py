"""Content checksums of files: large reads into a reused buffer, many files at once.

A checksum is stored as ``"<algorithm>:<hex>"`` (``xxh3:``, ``sha256:``, ``md5:``), so manifests
made with different algorithms never compare equal by accident.  Reading is the cost: each
file is read with ``readinto`` into a per-thread buffer of :data:`BUFFER` bytes (no allocation
per block), and xxhash/hashlib release the GIL on large inputs, so a few threads per process
keep a disk or a network mount busy.  The pool here is separate from the metadata pool
(``operators.pool``): it is small, because each thread holds a buffer.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from .ratelimit import take_bytes

T = TypeVar("T")

ALGORITHMS = ("xxh3", "sha256", "md5")
DEFAULT = "xxh3"
BUFFER = 8 << 20
DEFAULT_THREADS = 8

_local = threading.local()
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


def _buffer() -> memoryview:
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = memoryview(bytearray(BUFFER))
    return buf


def checksum_fd(fd: int, algorithm: str) -> str:
    """Hash everything readable from ``fd`` (from its current position)."""
    h = new_hasher(algorithm)
    buf = _buffer()
    with open(fd, "rb", buffering=0, closefd=False) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            take_bytes(n)  # --max-bandwidth (operators.ratelimit): no-op without a cap
            h.update(buf[:n])
    return f"{algorithm}:{h.hexdigest()}"


OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC  # symlinks are not followed (ELOOP)


def checksum_local(path: bytes | str, algorithm: str = DEFAULT) -> str:
    """Checksum of a local (or mounted) file; symlinks are not followed (ELOOP)."""
    return checksum_and_close(os.open(path, OPEN_FILE), algorithm)


def checksum_and_close(fd: int, algorithm: str = DEFAULT) -> str:
    """Checksum of a file opened (with ``OPEN_FILE``) for reading from the start; closes ``fd``."""
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        return checksum_fd(fd, algorithm)
    finally:
        os.close(fd)


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


def get_pool(threads: int | None = None) -> ThreadPoolExecutor:
    """The process-wide checksum pool (``PFS_CHECKSUM_THREADS``, default 8)."""
    global _pool
    with _lock:
        if _pool is None:
            n = threads or int(os.environ.get("PFS_CHECKSUM_THREADS", DEFAULT_THREADS))
            _pool = ThreadPoolExecutor(max_workers=max(1, n), thread_name_prefix="pfs-sum")
        return _pool


def checksum_many(
    items: list[T], checksum_one: Callable[[T], str], threads: int | None = None
) -> list[str | BaseException]:
    """``checksum_one(item)`` for every item on the checksum pool; errors are returned, not raised."""

    def one(item: T) -> str | BaseException:
        try:
            return checksum_one(item)
        except Exception as exc:
            return exc

    return list(get_pool(threads).map(one, items))


def fill_rows(rows: list[tuple], checksum_of: Callable[[tuple], str], threads: int | None = None) -> list[str]:
    """Set the ``checksum`` column of every error-free file row; return "path: error" for failures.

    A file that cannot be read keeps its row, with the error in its ``error`` column.
    """
    from .rows import describe_error
    from .schema import ROW_COLUMNS

    i_type, i_sum, i_err = ROW_COLUMNS.index("type"), ROW_COLUMNS.index("checksum"), ROW_COLUMNS.index("error")
    todo = [i for i, r in enumerate(rows) if r[i_type] == "file" and r[i_err] is None and r[i_sum] is None]
    failures: list[str] = []
    for i, result in zip(todo, checksum_many([rows[i] for i in todo], checksum_of, threads), strict=True):
        values = list(rows[i])
        if isinstance(result, BaseException):
            values[i_err] = f"checksum: {describe_error(result)}"
            failures.append(f"{values[0]}: {values[i_err]}")
        else:
            values[i_sum] = result
        rows[i] = tuple(values)
    return failures


def fill_table(table, checksum_of: Callable[[tuple], str], threads: int | None = None):
    """:func:`fill_rows` for a schema-v1 table: ``(table with checksums, "path: error" failures)``.

    ``checksum_of`` gets ``(path, path_raw)`` of each error-free file without a checksum.
    """
    import pyarrow as pa

    from .rows import describe_error

    kinds = table.column("type").to_pylist()
    errors = table.column("error").to_pylist()
    sums = table.column("checksum").to_pylist()
    rows = enumerate(zip(kinds, errors, sums, strict=True))
    todo = [i for i, (k, e, c) in rows if k == "file" and e is None and c is None]
    if not todo:
        return table, []
    paths = table.column("path").to_pylist()
    raws = table.column("path_raw").to_pylist()
    failures: list[str] = []
    for i, result in zip(todo, checksum_many([(paths[i], raws[i]) for i in todo], checksum_of, threads), strict=True):
        if isinstance(result, BaseException):
            errors[i] = f"checksum: {describe_error(result)}"
            failures.append(f"{paths[i]}: {errors[i]}")
        else:
            sums[i] = result
    table = table.set_column(table.schema.get_field_index("checksum"), "checksum", pa.array(sums, pa.string()))
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
) -> tuple[int, int, list[str]]:
    """Checksum the files of a chunk of manifest rows (below ``root``) and write them as a part.

    Used when a manifest was scanned without checksums: the rows keep every column, the
    checksum column is (re)computed, read failures go to ``error``.  Returns (files, bytes, errors).
    """
    import fsspec
    import pyarrow as pa

    from .dirfd import OpenDirs
    from .names import to_bytes
    from .parts import write_part
    from .rows import describe_error

    local = protocol in ("file", "local")
    fs = None if local else fsspec.filesystem(protocol, **storage_options)
    cols = {n: table.column(n).to_pylist() for n in ("path", "path_raw", "type", "size", "error")}
    todo = [i for i in range(table.num_rows) if cols["type"][i] == "file" and cols["error"][i] is None]

    # files open relative to their parent directory
    dirs = OpenDirs(os.fsencode(root).rstrip(b"/") or b"/") if local else None

    def one(i: int) -> str:
        rel = to_bytes(cols["path"][i], cols["path_raw"][i])
        if dirs is None:
            return checksum_remote(fs, f"{root.rstrip('/')}/{cols['path'][i]}", algorithm)
        return checksum_and_close(dirs.open_file(rel, OPEN_FILE), algorithm)

    sums: list[str | None] = [None] * table.num_rows
    errors = list(cols["error"])
    failures: list[str] = []
    nbytes = 0
    try:
        results = checksum_many(todo, one)
    finally:
        if dirs is not None:
            dirs.close()
    for i, result in zip(todo, results, strict=True):
        if isinstance(result, BaseException):
            errors[i] = f"checksum: {describe_error(result)}"
            failures.append(f"{cols['path'][i]}: {errors[i]}")
        else:
            sums[i] = result
            nbytes += cols["size"][i] or 0
    idx_sum, idx_err = table.schema.get_field_index("checksum"), table.schema.get_field_index("error")
    table = table.set_column(idx_sum, "checksum", pa.array(sums, pa.string()))
    table = table.set_column(idx_err, "error", pa.array(errors, pa.string()))
    from .schema import SCHEMA

    write_part(table.cast(SCHEMA), out_url, name, out_storage_options)
    return len(todo) - len(failures), nbytes, failures
