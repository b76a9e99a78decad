"""DuckDB over manifests: ad-hoc queries and ``du``-style summaries.

Queries run out of core in DuckDB straight from the part files, so a manifest of a
hundred million rows is summarised without loading it into Python.  The clauses a user
writes are checked by ``dask_pfs.manifests.sql`` and run on its locked connection (``sql.connect``).
"""

from __future__ import annotations

from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import Manifest
from dask_pfs.manifests.sql import check_where, run_query, select_sql
from dask_pfs.options import named

BY_CHOICES = ("parent", "uid", "gid", "type", "ext", "depth")
# run_query and select_sql are sql.py's (Manifest.query runs them too)
__all__ = ["BY_CHOICES", "du_sql", "run_query", "select_sql"]


def du_sql(manifest: Manifest, by: str = "parent", depth: int | None = None, where: str | None = None) -> str:
    """Sizes and counts grouped by ``by`` (biggest first; ``by="depth"``: by depth); ``depth`` N groups
    paths by their first N components."""
    if by not in BY_CHOICES:
        raise PfsError(named("by", by), f": must be one of {', '.join(BY_CHOICES)}")
    where = check_where(where)
    if by == "parent":
        key = (
            f"CASE WHEN depth > {int(depth)} THEN array_to_string(string_split(path, '/')[1:{int(depth)}], '/') "
            f"WHEN type = 'directory' AND depth = {int(depth)} THEN path ELSE parent END"
            if depth is not None
            else "parent"
        )
    elif by == "ext":
        key = (
            "CASE WHEN type <> 'file' THEN '(' || type || ')' WHEN strpos(name, '.') > 1 "
            "THEN lower(regexp_extract(name, '\\.([^.]*)$', 1)) ELSE '(none)' END"
        )
    elif by == "depth":
        key = "depth"  # a number: sorted 1, 2, ... 10, not as text
    else:
        key = f"CAST({by} AS VARCHAR)"
    order = "key" if by == "depth" else "bytes DESC, key"
    cond = f"WHERE ({where})" if where else ""
    return (
        f"SELECT {key} AS key, count(*) AS entries, count(*) FILTER (WHERE type = 'file') AS files, "
        f"coalesce(sum(size) FILTER (WHERE type = 'file'), 0) AS bytes, "
        f"count(*) FILTER (WHERE error IS NOT NULL) AS errors "
        f"FROM {manifest.relation_sql()} {cond} GROUP BY ALL ORDER BY {order}"
    )
