"""Writing manifest part files so that retries never duplicate rows.

Part names are chosen by the driver (deterministic per task), each part is written to a
hidden temp name and renamed into place, so a reader never sees a half-written part and a
retried task replaces, rather than adds to, what an earlier attempt wrote.  Names that start
with ``.`` or ``_`` are ignored by pyarrow.dataset, Dask and the ``*.parquet`` glob.
"""

from __future__ import annotations

import os
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from .schema import PART_PREFIX, PART_SUFFIX


def part_name(task_id: str, seq: int) -> str:
    return f"{PART_PREFIX}{task_id}-{seq:04d}{PART_SUFFIX}"


def write_part(table: pa.Table, out_url: str, name: str, storage_options: dict | None = None) -> str:
    """Write ``table`` as ``out_url/name`` atomically; return the part's name."""
    fs, out = fsspec.core.url_to_fs(out_url, **(storage_options or {}))
    final = f"{out.rstrip('/')}/{name}"
    if isinstance(fs, LocalFileSystem):
        tmp = f"{out.rstrip('/')}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
        pq.write_table(table, tmp, compression="zstd", row_group_size=128 * 1024)
        os.replace(tmp, final)
    else:  # object stores: a PUT is atomic, there is no rename
        with fs.open(final, "wb") as f:
            pq.write_table(table, f, compression="zstd", row_group_size=128 * 1024)
    return name
