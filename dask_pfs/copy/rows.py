"""Which manifest rows each copy phase takes, as DuckDB queries over the selection.

Every phase streams its query's record batches; nothing here holds rows.  A streamed copy has
already taken the rows of the parts it copied while the scan walked (``streamable``): the
phases after the scan leave those out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import Manifest, Selection
from dask_pfs.manifests.spread import spread_order
from dask_pfs.manifests.sql import Filter, literal
from operators.names import UnsafePathError, check_relative, to_bytes

if TYPE_CHECKING:
    import duckdb

# the columns operators.copy.plan.entries_from_batch reads; times in microseconds (the manifest's unit): in
# nanoseconds a 64-bit integer ends in 2262, and epoch_ns() of a later mtime failed the whole copy
META = "path, path_raw, type, size, epoch_us(mtime) AS mtime_us, epoch_us(atime) AS atime_us, mode, uid, gid"
UNSAFE = r"'(^/|//|(^|/)\.\.?(/|$)|/$|\x00)'"
REST = "pfs_rest"  # the rows a streamed copy did not take (``CopyRows._name_rest``)
_COPYABLE = "error IS NULL AND type <> 'directory'"  # a row the files and links phases may take


class CopyRows:
    """The rows of ``manifest`` that ``where`` selects, and the queries of the copy phases over them."""

    def __init__(
        self,
        manifest: Manifest,
        where: Filter | None,
        split_size: int,
        links: bool,
        streamed_parts: tuple[str, ...],
        on: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        """``on``: a locked connection that reads the manifest's directory (``Selection``'s)."""
        self.m = manifest
        self.sel = Selection(manifest, where, on)  # the where-clause runs only on a locked connection
        self.where = self.sel.where
        self.split_size = split_size
        self.links = links  # hard links are recreated (POSIX destinations)
        self.streamed_parts = streamed_parts  # parts whose streamable rows a streamed copy took
        self._census: Census | None = None
        if streamed_parts:
            self._name_rest()

    def batches(self, sql: str) -> Iterator[pa.RecordBatch]:
        return self.sel.batches(sql)

    def close(self) -> None:
        self.sel.close()

    # the selection, as a CTE named ``sel`` --------------------------------

    def cte(self, every_row: bool = False) -> str:
        """The selected rows; without ``every_row``, less those a streamed copy already took."""
        if every_row or not self.streamed_parts:
            return f"sel AS ({self.sel.sql()})"
        return f"sel AS (SELECT * FROM {REST} AS m WHERE {self.sel.condition})"

    def _name_rest(self) -> None:
        """Name :data:`REST` on the selection's connection: the rows of the parts not streamed, and those
        of the streamed parts a streamed copy left (part files given to DuckDB as values, not SQL text)."""
        con, streamed = self.sel.con, set(self.streamed_parts)
        files = self.m.part_files()
        taken = [f for f in files if os.path.basename(f) in streamed]
        others = [f for f in files if os.path.basename(f) not in streamed]
        rels = []
        if taken:
            rels.append(con.read_parquet([literal(f) for f in taken]).filter(f"NOT ({streamable(self.split_size)})"))
        if others:
            rels.append(con.read_parquet([literal(f) for f in others]))
        rest = rels[0].union(rels[1]) if len(rels) == 2 else rels[0] if rels else con.sql(f"FROM {self.sel.relation}")
        rest.create_view(REST)

    def hl(self) -> str:
        if not self.links:
            return (
                "hl AS (SELECT NULL::UBIGINT AS dev, NULL::UBIGINT AS ino, NULL::VARCHAR AS link_first, "
                "NULL::BLOB AS link_first_raw WHERE false)"
            )
        return (
            "hl AS (SELECT dev, ino, min(path) AS link_first, arg_min_null(path_raw, path) AS link_first_raw "
            "FROM sel WHERE type <> 'directory' AND nlink > 1 AND error IS NULL AND ino IS NOT NULL "
            "GROUP BY dev, ino HAVING count(*) > 1)"
        )

    # the phases' queries --------------------------------------------------

    def dirs_sql(self, descending: bool = False) -> str:
        order = "DESC" if descending else ""
        if not self.where:
            return f"WITH {self.cte()} SELECT {META} FROM sel WHERE type = 'directory' ORDER BY depth {order}, path"
        # a selection may leave out the directories above its rows: add every ancestor
        return (
            f"WITH RECURSIVE {self.cte()}, "
            f"alld AS (SELECT * FROM {self.m.relation_sql()} AS a WHERE type = 'directory'), "
            # the ancestors, one parent step per round from the distinct parents up: each directory made
            # once, not every prefix of every row (a row 1,000 levels down has 999 prefixes of up to its length)
            "anc(path) AS (SELECT DISTINCT regexp_replace(path, '/[^/]*$', '') FROM sel WHERE contains(path, '/') "
            "UNION SELECT regexp_replace(path, '/[^/]*$', '') FROM anc WHERE contains(path, '/')), "
            "want AS (SELECT path FROM sel WHERE type = 'directory' UNION SELECT path FROM anc) "
            "SELECT want.path, alld.path_raw, 'directory' AS type, alld.size, epoch_us(alld.mtime) AS mtime_us, "
            "epoch_us(alld.atime) AS atime_us, alld.mode, alld.uid, alld.gid "
            f"FROM want LEFT JOIN alld USING (path) ORDER BY len(string_split(want.path, '/')) {order}, want.path"
        )

    def files_sql(self) -> str:
        return (
            f"WITH {self.cte()}, {self.hl()} SELECT {META}, link_target, link_target_raw FROM sel "
            "LEFT JOIN hl USING (dev, ino) WHERE type <> 'directory' AND error IS NULL "
            f"AND (hl.link_first IS NULL OR path = hl.link_first) ORDER BY {spread_order()}"
        )

    def links_sql(self) -> str:
        return (
            f"WITH {self.cte()}, {self.hl()} SELECT {META}, link_first, link_first_raw FROM sel "
            "JOIN hl USING (dev, ino) WHERE path <> hl.link_first ORDER BY path"
        )

    def scan_errors_sql(self) -> str:
        return f"WITH {self.cte()} SELECT path, error FROM sel WHERE error IS NOT NULL AND type <> 'directory'"

    # checks and counts over every selected row ----------------------------

    def census(self) -> Census:
        """What the phases need to know of every selected row, in one query (asked once): each DuckDB
        query costs milliseconds before its first row, and a small job is mostly such fixed costs."""
        if self._census is None:
            # the copyable rows a streamed copy left (nothing streamed: every one, the entries, below)
            rest = (
                f", (SELECT count(*) FROM {REST} AS m WHERE {self.sel.condition} AND {_COPYABLE}) AS rest"
                if self.streamed_parts
                else ""
            )
            sql = (
                f"WITH {self.cte(True)} SELECT "
                f"min(path) FILTER (WHERE path = '' OR regexp_matches(path, {UNSAFE})) AS unsafe, "
                "count(*) FILTER (WHERE path_raw IS NOT NULL) AS raw, "
                f"count(*) FILTER (WHERE {_COPYABLE}) AS entries, "
                "coalesce(sum(size) FILTER (WHERE error IS NULL AND type = 'file'), 0) AS file_bytes, "
                "count(*) FILTER (WHERE type = 'directory') AS dirs, "
                "count(*) FILTER (WHERE error IS NOT NULL AND type <> 'directory') AS scan_errors, "
                f"count(*) FILTER (WHERE {_COPYABLE} AND nlink > 1 AND ino IS NOT NULL) AS linked{rest} FROM sel"
            )
            unsafe, *counts = self.sel.fetch(sql)[0]
            census = Census(unsafe, *map(int, counts))
            self._census = census if self.streamed_parts else census._replace(rest=census.entries)
        return self._census

    def check_paths(self) -> None:
        """Refuse the whole job if any selected row (or link target of a hard link) could escape."""
        c = self.census()
        if c.unsafe is not None:
            raise PfsError(f"manifest row with an unsafe path {c.unsafe!r}; refusing to copy anything")
        if not c.raw:
            return  # every name is its text, which UNSAFE checked
        raw_paths = f"WITH {self.cte(True)} SELECT path, path_raw FROM sel WHERE path_raw IS NOT NULL"
        for batch in self.batches(raw_paths):
            for text, raw in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                try:
                    check_relative(to_bytes(text, raw))
                except UnsafePathError as exc:
                    raise PfsError(f"manifest row with an unsafe path: {exc}; refusing to copy anything") from None

    def totals(self) -> dict[str, int]:
        c = self.census()
        return {"total_files": c.entries, "total_bytes": c.file_bytes}

    # whether a phase's query can return a row (False only where the census proves it cannot) ---------

    def has_scan_errors(self) -> bool:
        return self.census().scan_errors > 0

    def has_dirs(self) -> bool:
        """A selection (``where``) adds the directories above its rows, which it need not hold itself."""
        return self.where is not None or self.census().dirs > 0

    def has_files(self) -> bool:
        return self.census().rest > 0

    def has_links(self) -> bool:
        return self.links and self.census().linked > 1  # a group of hard links is two rows or more


class Census(NamedTuple):
    """Counts over every selected row (:meth:`CopyRows.census`).  ``unsafe``: the first path that could
    escape, if any; ``raw``: rows whose name is not UTF-8 (``path_raw``); ``entries`` and ``file_bytes``:
    the readable non-directories and their regular files' bytes; ``dirs``; ``scan_errors``: non-directory
    rows the scan could not read; ``linked``: readable rows with other hard links; ``rest``: readable
    non-directories a streamed copy did not take (all of them when nothing was streamed)."""

    unsafe: str | None
    raw: int
    entries: int
    file_bytes: int
    dirs: int
    scan_errors: int
    linked: int
    rest: int = 0


def streamable(split_size: int) -> str:
    """Rows a streamed copy takes as they are listed: all but directories (their files make them; every
    one is made, and given its times, after the scan), hard links of any type (a group's first copy
    needs the whole manifest), and files big enough to be copied in ranges."""
    return (
        "type <> 'directory' AND error IS NULL AND coalesce(nlink, 1) < 2 AND NOT (type = 'file' AND "
        f"coalesce(size, 0) > {int(split_size)})"
    )
