"""Writing manifest part files so that retries never duplicate rows.

Part names are chosen by the driver (deterministic per task), each part is written through the
one writer (``operators.core.outputs``: a random temp name in the checked directory) and renamed
into place, so a reader never sees a half-written part and a retried task replaces, rather than
adds to, what an earlier attempt wrote.  Names that start with ``.`` or ``_`` are ignored by
pyarrow.dataset, Dask and the ``*.parquet`` glob.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from operators.core import localfs, outputs
from operators.schema import PART_PREFIX, PART_SUFFIX

# Dictionary encoding only where values repeat: on a column of (nearly) unique values (path, name,
# size, times, ino, checksum) Parquet builds a hash table, outgrows the 1 MiB dictionary page and falls
# back to plain pages after all; on a 200,020-row part that cost 170 ms of the write's 270 ms of CPU and
# made the part 1.9x bigger (4.7 MB against 2.5 MB; benchmarks/RESULTS.md, issue 30, h30l).
DICTIONARY_COLUMNS = [
    "parent",
    "type",
    "depth",
    "mode",
    "uid",
    "gid",
    "dev",
    "nlink",
    "path_raw",
    "link_target",
    "link_target_raw",
    "error",
    "xattrs.list.element.name",
    "has_acl",
]
# Page checksums (CRC32) let a reader tell a part damaged on disk from one it can trust
# (``dask_pfs.manifests.check`` verifies them before a job acts on a manifest).
WRITE_OPTIONS = {
    "compression": "zstd",
    "row_group_size": 128 * 1024,
    "write_page_checksum": True,
    "use_dictionary": DICTIONARY_COLUMNS,
}


def part_name(task_id: str, seq: int) -> str:
    return f"{PART_PREFIX}{task_id}-{seq:04d}{PART_SUFFIX}"


def write_part(table: pa.Table, out_url: str, name: str, storage_options: dict | None = None) -> str:
    """Write ``table`` as ``out_url/name`` atomically; return the part's name."""
    fs, out = localfs.url_to_fs(out_url, **(storage_options or {}))
    if outputs.is_local(fs):
        # the one writer: a random temp name in the checked directory, renamed there (per part, not per entry);
        # pyarrow writes natively into the open temp file through its /proc/self/fd name
        with outputs.open_dir(out) as d, d.replace(name) as tmp:
            pq.write_table(table, tmp.path, **WRITE_OPTIONS)
    else:  # object stores: one put of the complete part, there is no rename
        with outputs.remote_file(fs, f"{out.rstrip('/')}/{name}") as f:
            pq.write_table(table, f, **WRITE_OPTIONS)
    return name


# Fewest rows of a part written beside another: a flush of at least twice this many is written as
# consecutive slices (so each part stays sorted) at once, one per core, up to 4.  The last part of a
# task is written after its walk, with every core free: 100,000 rows took ~45 ms of one core to
# encode, zstd-compress and write (benchmarks/RESULTS.md, issue 30, h30l).
SPLIT_ROWS = 32_768


def write_parts(
    table: pa.Table, out_url: str, name: Callable[[int], str], storage_options: dict | None = None
) -> list[str]:
    """Write ``table`` as one part per consecutive slice (:data:`SPLIT_ROWS`), the slices at once on
    threads (Parquet encoding and zstd release the interpreter lock); ``name(i)`` names slice ``i``.
    Returns the parts' names in slice order."""
    k = max(1, min(len(os.sched_getaffinity(0)), 4, len(table) // SPLIT_ROWS))
    if k == 1:
        return [write_part(table, out_url, name(0), storage_options)]
    bounds = [i * len(table) // k for i in range(k + 1)]
    slices = [table.slice(bounds[i], bounds[i + 1] - bounds[i]) for i in range(k)]
    with ThreadPoolExecutor(k - 1, thread_name_prefix="pfs-part") as pool:
        rest = [pool.submit(write_part, slices[i], out_url, name(i), storage_options) for i in range(1, k)]
        first = write_part(slices[0], out_url, name(0), storage_options)
        return [first] + [f.result() for f in rest]


def release_arrow_memory() -> None:
    """Hand the memory Arrow's pool kept after a part (its sort and Parquet buffers) back to the system.

    Without it each part's buffers stay mapped in the pool (mimalloc), and the core's next rows, in
    the C heap, are allocated beside them: a 1,000,000-entry directory peaked at 281-305 MB instead
    of 200-230 (``benchmarks/RESULTS.md``, "Native core: peak RSS").
    """
    pa.default_memory_pool().release_unused()
