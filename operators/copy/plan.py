"""Turning streamed manifest rows into copy tasks: chunks of small files and ranges of big ones.

The driver feeds Arrow record batches as DuckDB produces them; the planner keeps at most one
open chunk, so planning a hundred-million-row manifest needs memory for one chunk, not the
manifest.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from operators.copy.spec import Entry
from operators.names import check_relative, to_bytes

# columns the driver's SQL must select, in this order (link_first* only for the hard-link query)
ENTRY_COLUMNS = ("path", "path_raw", "type", "size", "mtime_us", "atime_us", "mode", "uid", "gid")
LINK_COLUMNS = ("link_target", "link_target_raw")


@dataclass(frozen=True)
class ChunkLimits:
    files: int = 500  # entries per chunk
    bytes: int = 256 << 20  # bytes per chunk
    split_size: int = 256 << 20  # files larger than this are copied in ranges of this size
    part_size: int = 8 << 20  # object stores: size of a multipart upload's parts (operators.copy.multipart)


@dataclass
class Chunk:
    entries: list[Entry]
    bytes: int


@dataclass
class BigFile:
    entry: Entry
    ranges: list[tuple[int, int]]  # (offset, length)


def _ns(us: int | None) -> int | None:
    """Microseconds (the manifest's unit; any year) as the nanoseconds an :class:`Entry` holds."""
    return None if us is None else us * 1000


def entries_from_batch(batch: pa.RecordBatch, dst_rel: dict[bytes, bytes] | None = None) -> Iterator[Entry]:
    """Rows -> :class:`Entry`, exact path bytes checked to stay below the root."""
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    for i in range(batch.num_rows):
        rel = check_relative(to_bytes(cols["path"][i], cols["path_raw"][i]))
        target = None
        if cols.get("link_target", [None] * (i + 1))[i] is not None:
            target = to_bytes(cols["link_target"][i], cols["link_target_raw"][i])
        yield Entry(
            rel=rel,
            kind=cols["type"][i],
            size=cols["size"][i],
            mtime_ns=_ns(cols["mtime_us"][i]),
            atime_ns=_ns(cols["atime_us"][i]),
            mode=cols["mode"][i],
            uid=cols["uid"][i],
            gid=cols["gid"][i],
            link_target=target,
            dst_rel=(dst_rel or {}).get(rel),
        )


def link_firsts(batch: pa.RecordBatch) -> list[bytes]:
    """The ``link_first`` column (the copy each hard link points at) as checked bytes."""
    texts = batch.column("link_first").to_pylist()
    raws = batch.column("link_first_raw").to_pylist()
    return [check_relative(to_bytes(t, r)) for t, r in zip(texts, raws, strict=True)]


def ranges(size: int, split_size: int) -> list[tuple[int, int]]:
    return [(off, min(split_size, size - off)) for off in range(0, size, split_size)]


class Planner:
    """Groups entries into chunks by count and bytes; splits big files when ``split`` is allowed."""

    def __init__(self, limits: ChunkLimits, split: bool) -> None:
        self.limits = limits
        self.split = split
        self.open: list[Entry] = []
        self.open_bytes = 0
        self.last: bytes | None = None

    def add(self, entry: Entry) -> Iterator[Chunk | BigFile]:
        """``entry`` into the open chunk (or a big file of its own); rows come in path order, so a row
        repeated in the manifest (damaged or forged) is adjacent to the first and dropped: copied once."""
        if entry.out_rel == self.last:
            return
        self.last = entry.out_rel
        size = (entry.size or 0) if entry.kind == "file" else 0
        if self.split and entry.kind == "file" and size > self.limits.split_size:
            yield BigFile(entry, ranges(size, self.limits.split_size))
            return
        if self.open and (len(self.open) >= self.limits.files or self.open_bytes + size > self.limits.bytes):
            yield self.flush()
        self.open.append(entry)
        self.open_bytes += size

    def flush(self) -> Chunk:
        chunk = Chunk(self.open, self.open_bytes)
        self.open, self.open_bytes = [], 0
        return chunk

    def finish(self) -> Iterator[Chunk]:
        if self.open:
            yield self.flush()
