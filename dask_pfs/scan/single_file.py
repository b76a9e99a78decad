"""The scan of a root that is not a directory: one row (a file, a symlink's own), one part.

Nothing to walk, so no task and no journal: the driver writes the part itself and the manifest's
root is the file's directory (rows are relative to their root, and the file is its one row).
"""

from __future__ import annotations

import os

from dask_pfs.urls import Location
from operators.checksum import checksum_at, checksum_local_files, checksum_many, fill_rows
from operators.parts import part_name, write_part
from operators.rows import Row, row_from_info, row_from_stat, rows_to_table
from operators.scan.walk import Tally
from operators.stores import is_store
from operators.xattrs import file_xattrs


def scan_file(
    loc: Location, out: str, out_options: dict | None, checksum: str | None, xattrs: bool
) -> tuple[str, Tally, str]:
    """Write the part of the file ``loc``: ``(the manifest's root URL, its counters, the part)``."""
    row = _file_row(loc)
    if checksum and row[2] == "file":
        one = [row]
        if loc.is_local:
            fill_rows(one, lambda _: checksum_local_files(loc.path, [b""], checksum))
        else:
            at = lambda _: checksum_at(loc.protocol, loc.storage_options, loc.path, checksum)  # noqa: E731
            fill_rows(one, lambda todo: checksum_many(todo, at))
        row = one[0]
    table, row = file_xattrs(row, loc) if xattrs else (rows_to_table([row]), row)
    part = write_part(table, out, part_name("0000000", 0), out_options)
    tally = Tally()
    tally.count(row)
    parent = os.path.dirname(loc.path.rstrip("/")) or "/"
    return (parent if loc.is_local else f"{loc.protocol}://{parent}"), tally, part


def _file_row(loc: Location) -> Row:
    """The row of a root that is not a directory (a symlink's own, when it is one)."""
    if is_store(loc.protocol):  # obstore: imported only for a root on a store
        from operators.scan.objstore import ObstoreLister

        return ObstoreLister(loc.protocol, loc.path, loc.storage_options).stat("")
    if not loc.is_local:
        return row_from_info(os.path.basename(loc.path.rstrip("/")), loc.filesystem().info(loc.path))
    name = os.fsencode(os.path.basename(loc.path.rstrip("/")))
    ls = os.lstat(loc.path)
    target = os.readlink(loc.path) if os.path.islink(loc.path) else None
    return row_from_stat(name, ls if target is not None else os.stat(loc.path), os.fsencode(target) if target else None)
