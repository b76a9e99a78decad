"""Which manifest rows each copy phase takes, as DuckDB queries over the selection.

Every phase streams its query's record batches; nothing here holds rows.  A streamed copy has
already taken the rows of the parts it copied while the scan walked (``streamable``): the
phases after the scan leave those out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa

from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import Manifest, Selection
from dask_pfs.manifests.spread import spread_order
from dask_pfs.manifests.sql import Filter, literal
from operators.names import UnsafePathError, check_relative, to_bytes

# the columns operators.copy.plan.entries_from_batch reads; times in microseconds (the manifest's unit): in
# nanoseconds a 64-bit integer ends in 2262, and epoch_ns() of a later mtime failed the whole copy
META = "path, path_raw, type, size, epoch_us(mtime) AS mtime_us, epoch_us(atime) AS atime_us, mode, uid, gid"
UNSAFE = r"'(^/|//|(^|/)\.\.?(/|$)|/$|\x00)'"
REST = "pfs_rest"  # the rows a streamed copy did not take (``CopyRows._name_rest``)


class CopyRows:
    """The rows of ``manifest`` that ``where`` selects, and the queries of the copy phases over them."""

    def __init__(
        self, manifest: Manifest, where: Filter | None, split_size: int, links: bool, streamed_parts: tuple[str, ...]
    ) -> None:
        self.m = manifest
        self.sel = Selection(manifest, where)  # the where-clause runs only on its locked connection
        self.where = self.sel.where
        self.split_size = split_size
        self.links = links  # hard links are recreated (POSIX destinations)
        self.streamed_parts = streamed_parts  # parts whose streamable rows a streamed copy took
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

    def check_paths(self) -> None:
        """Refuse the whole job if any selected row (or link target of a hard link) could escape."""
        bad = self.sel.fetch(
            f"WITH {self.cte(True)} SELECT path FROM sel WHERE path = '' OR regexp_matches(path, {UNSAFE}) LIMIT 1"
        )
        if bad:
            raise PfsError(f"manifest row with an unsafe path {bad[0][0]!r}; refusing to copy anything")
        raw_paths = f"WITH {self.cte(True)} SELECT path, path_raw FROM sel WHERE path_raw IS NOT NULL"
        for batch in self.batches(raw_paths):
            for text, raw in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                try:
                    check_relative(to_bytes(text, raw))
                except UnsafePathError as exc:
                    raise PfsError(f"manifest row with an unsafe path: {exc}; refusing to copy anything") from None

    def totals(self) -> dict[str, int]:
        t = self.sel.totals()
        return {"total_files": t["entries"], "total_bytes": t["file_bytes"]}


def streamable(split_size: int) -> str:
    """Rows a streamed copy takes as they are listed: all but directories (their files make them; every
    one is made, and given its times, after the scan), hard links of any type (a group's first copy
    needs the whole manifest), and files big enough to be copied in ranges."""
    return (
        "type <> 'directory' AND error IS NULL AND coalesce(nlink, 1) < 2 AND NOT (type = 'file' AND "
        f"coalesce(size, 0) > {int(split_size)})"
    )
