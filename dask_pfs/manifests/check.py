"""Refuse a damaged manifest before anything acts on it (docs/reliability.md).

A part truncated or overwritten on disk (a full disk while it was copied, a bad sector, a stray
write) either fails to read, which mid-job would leave half a job done, or worse reads as other
rows.  So ``rm --manifest``, ``cp --manifest`` and ``query`` read every part through once before
they start: its footer, every page (checked against its CRC; parts are written with page
checksums, ``operators.parts``), and the row and part counts the completion marker recorded.  A
damaged part is a :class:`DamagedManifestError` (exit 2) naming it; nothing has been done.

Costs one decoding pass over the manifest (pyarrow, all cores; a 1 GB manifest of ~10 M rows
takes seconds), small next to the job it protects.
"""

from __future__ import annotations

import posixpath
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq

from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import Manifest
from operators.core import outputs


class DamagedManifestError(PfsError):
    """A part of the manifest cannot be read back as it was written (exit code 2)."""


def check_parts(m: Manifest) -> int:
    """Read every part of ``m`` through; its number of rows, or :class:`DamagedManifestError`."""
    parts = m.part_files()
    fs, _ = m._fs_path
    # a local part is read without pyarrow's pre-buffering, whose I/O threads would outlive the check (and
    # keep the query's bounded probe from forking: dask_pfs.manifests.sql_probe); one part without a pool
    local = outputs.is_local(fs)
    if len(parts) <= 1:
        counted = [_rows(fs, p, local) for p in parts]
    else:
        with ThreadPoolExecutor(max_workers=min(8, len(parts))) as pool:
            counted = list(pool.map(lambda p: _rows(fs, p, local), parts))
    rows = 0
    for part, n in zip(parts, counted, strict=True):
        if isinstance(n, str):
            raise DamagedManifestError(f"{part}: damaged manifest part ({n}); nothing was done (rescan the tree)")
        rows += n
    if m.complete:
        want_parts, want_rows = m.info.get("parts"), (m.info.get("counts") or {}).get("entries")
        if want_parts is not None and want_parts != len(parts):
            missing = sorted(set(m.info.get("part_names") or ()) - {posixpath.basename(p) for p in parts})
            named = f"part {missing[0]} is missing ({len(missing)} in all), " if missing else ""
            raise DamagedManifestError(
                f"{m.url}: {named}{len(parts)} part files where the scan wrote {want_parts}; "
                "nothing was done (rescan the tree)"
            )
        if want_rows is not None and want_rows != rows:
            raise DamagedManifestError(
                f"{m.url}: {rows} rows where the scan wrote {want_rows}; nothing was done (rescan the tree)"
            )
    return rows


def _rows(fs, part: str, local: bool) -> int | str:
    """The rows of one part read through (pages checked against their checksums), or why it cannot be read."""
    try:
        with fs.open(part, "rb") as f:
            pf = pq.ParquetFile(f, page_checksum_verification=True, pre_buffer=not local)
            n = 0
            for i in range(pf.num_row_groups):
                n += pf.read_row_group(i, use_threads=False).num_rows
            if n != pf.metadata.num_rows:
                return f"{n} rows read where its footer says {pf.metadata.num_rows}"
            return n
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid/ArrowIOError are ValueError/OSError
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except Exception as exc:  # a decoder error of another kind
        return f"{type(exc).__name__}: {exc}"


__all__ = ["DamagedManifestError", "check_parts"]
