"""DuckDB over manifests: ad-hoc queries and ``du``-style summaries.

Queries run out of core in DuckDB straight from the part files, so a manifest of a
hundred million rows is summarised without loading it into Python.  The clauses a user
writes are checked by ``dask_pfs.sql`` and run on its locked connection (``sql.connect``).
"""

from __future__ import annotations

import duckdb

from .errors import PfsError
from .manifest import Manifest
from .sql import check_order, check_select, check_where

BY_CHOICES = ("parent", "uid", "gid", "type", "ext", "depth")


def connection() -> duckdb.DuckDBPyConnection:
    """A plain connection for pfs's own SQL (plans, its own outputs); never for a user's clause."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")  # DuckDB draws it on stdout, where --json output goes
    return con


def select_sql(
    manifest: Manifest,
    where: str | None = None,
    select: str | None = None,
    order: str | None = None,
    limit: int | None = None,
) -> str:
    """The query of ``pfs query``; each clause is checked to be only what its option says."""
    where, select, order = check_where(where), check_select(select), check_order(order)
    sql = f"SELECT {select or '*'} FROM {manifest.relation_sql()} AS m"
    if where:
        sql += f" WHERE ({where})"
    if order:
        sql += f" ORDER BY {order}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql


def run_query(con: duckdb.DuckDBPyConnection, sql: str) -> duckdb.DuckDBPyRelation:
    try:
        return con.sql(sql)
    except duckdb.Error as exc:
        raise PfsError(f"query failed: {str(exc).splitlines()[0]}") from None


def du_sql(manifest: Manifest, by: str = "parent", depth: int | None = None, where: str | None = None) -> str:
    """Sizes and counts grouped by ``by``; ``depth`` N groups paths by their first N components."""
    if by not in BY_CHOICES:
        raise PfsError(f"--by must be one of {', '.join(BY_CHOICES)}")
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
    else:
        key = f"CAST({by} AS VARCHAR)"
    cond = f"WHERE ({where})" if where else ""
    return (
        f"SELECT {key} AS key, count(*) AS entries, count(*) FILTER (WHERE type = 'file') AS files, "
        f"coalesce(sum(size) FILTER (WHERE type = 'file'), 0) AS bytes, "
        f"count(*) FILTER (WHERE error IS NOT NULL) AS errors "
        f"FROM {manifest.relation_sql()} {cond} GROUP BY ALL ORDER BY bytes DESC, key"
    )
