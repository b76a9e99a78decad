"""SQL a user writes may only filter a manifest: clause checks and the locked DuckDB connection.

Every clause a user supplies (``--where``, ``--select``, ``--order-by``, an Airflow ``where``) is
checked here before any SQL runs, and then runs only on a connection made by :func:`connect`.
Two independent walls:

1. **One expression, parsed by DuckDB.**  The clause is parsed in place (``SELECT 1 FROM rows
   WHERE <clause>``) and the statement must be exactly that shape with only the clause changed:
   one SELECT statement (no ``;``), no subquery anywhere in the clause (table functions such as
   ``read_text`` or ``read_csv`` can only be reached through one), no CTE, UNION, ORDER BY, LIMIT
   or GROUP BY smuggled after it.  A comment at the end is harmless: the clause is pasted with a
   line break after it.
2. **A connection that can touch nothing but the manifest.**  Local manifests' directories are
   the only ``allowed_directories``; manifests on object stores are registered as pyarrow
   datasets before the lock; then ``enable_external_access=false`` and ``lock_configuration``
   (so no ``SET``, ``ATTACH``, ``COPY``, ``INSTALL``/``LOAD`` elsewhere), with extension
   auto-install and auto-load off.  Outputs pfs itself writes (``pfs query -o``, reports, frozen
   selections) are fetched from the locked connection as Arrow and written by pyarrow.

pfs's own SQL that reads files beyond the manifest (sync's plan) is a :class:`Filter`: built by
pfs, not checked, and its extra files are named so the connection may read them.

pfs's own SQL never carries a path or a value in its text: :func:`connect` gives every manifest
and every Parquet file it may read a relation under a name pfs chooses (``Manifest.table_name``,
:func:`file_table`), made through DuckDB's Python API with the paths as Python values, and values
are parameters (``?``).  Identifiers from pfs's own schema are the only things pasted.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from dask_pfs.errors import Named, PfsError
from dask_pfs.manifests.relations import Tables, create_views, file_table, literal, utf8
from dask_pfs.manifests.sql_run import apply as apply_limits
from dask_pfs.manifests.sql_run import arrow_reader, fetch_all, write_parquet
from dask_pfs.options import named as opt_named

if TYPE_CHECKING:
    import duckdb

    from dask_pfs.manifests.manifest import Manifest

# Scalar functions that read the host rather than the row (the DuckDB shell's getenv): never in a clause
OUTSIDE_FUNCTIONS = frozenset({"getenv"})
ROWS = "pfs_rows"  # the table name clauses are parsed against (never created)


@dataclass(frozen=True)
class Filter:
    """A row condition pfs built itself (trusted: not checked) and the files its subqueries read."""

    condition: str
    reads: tuple[str, ...] = ()
    user: bool = False  # a user's checked clause (errors name --where), not one pfs built

    def __str__(self) -> str:
        return self.condition


# ---------------------------------------------------------------- checking clauses


def check_where(text: Any, option: str | Named | None = None) -> str | None:
    """``text`` as a condition safe to paste inside parentheses, or None when empty; else PfsError."""
    return _check(text, option or opt_named("where"), "where", "one SQL condition over the manifest's columns")


def check_select(text: Any, option: str | Named | None = None) -> str | None:
    """``text`` as a select list (columns and expressions over the manifest's columns), or None."""
    return _check(
        text, option or opt_named("select"), "select", "a list of columns or expressions over the manifest's columns"
    )


def check_order(text: Any, option: str | Named | None = None) -> str | None:
    """``text`` as an ORDER BY list (expressions, ASC/DESC, NULLS FIRST/LAST), or None."""
    return _check(
        text, option or opt_named("order_by"), "order", "a list of sort expressions over the manifest's columns"
    )


def check_group(text: Any, option: str | Named | None = None) -> str | None:
    """``text`` as a GROUP BY list (expressions over the manifest's columns), or None."""
    return _check(
        text, option or opt_named("group_by"), "group", "a list of grouping expressions over the manifest's columns"
    )


def where_filter(where: str | Filter | None, option: str | Named | None = None) -> Filter | None:
    """The filter of an engine's ``where`` argument: a user's string is checked, a :class:`Filter` passes."""
    if isinstance(where, Filter):
        return where
    checked = check_where(where, option)
    return Filter(checked, user=True) if checked else None


_TEMPLATES = {  # the clause's place in a statement, and the part of the parse tree it may change
    "where": (f"SELECT 1 FROM {ROWS} WHERE {{}}\n", "TRUE", ("where_clause",)),
    "select": (f"SELECT {{}}\nFROM {ROWS}", "1", ("select_list",)),
    "order": (f"SELECT 1 FROM {ROWS} ORDER BY {{}}\n", "1", ("modifiers",)),
    "group": (f"SELECT 1 FROM {ROWS} GROUP BY {{}}\n", "1", ("group_expressions", "group_sets", "aggregate_handling")),
}


def _check(text: Any, option: str | Named, kind: str, wanted: str) -> str | None:
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if not isinstance(text, str):
        raise PfsError.about(option, f" must be a string of SQL, got {type(text).__name__}")
    try:
        reason = _refusal(text, kind)
    except RecursionError:
        reason = "it is nested too deeply"
    if reason:
        raise PfsError.about(option, f" refused: {reason}; it must be {wanted}")
    return text.strip() + "\n"  # a trailing -- comment ends here, not in pfs's SQL after it


def _refusal(text: str, kind: str) -> str | None:
    """Why ``text`` is not one clause of ``kind`` (None when it is)."""
    import duckdb

    template, neutral, changes = _TEMPLATES[kind]
    if _has_semicolon(text):
        return "';' ends a statement (only one expression is run, never statements)"
    sql = template.format(text)
    try:
        with _parser_lock:  # the parse-only connection's, not DuckDB's default one (its database keeps threads)
            statements = _parser().extract_statements(sql)
    except duckdb.Error as exc:
        return f"not valid SQL ({_first_line(exc)})"
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        return "it is not part of a single SELECT"
    tree = _parse(sql)
    if isinstance(tree, str):
        return f"not valid SQL ({tree})"
    node, base = tree, _baseline(kind, neutral)
    if node.get("type") != "SELECT_NODE" or _without(node, changes) != _without(base, changes):
        if any(m.get("type") == "DISTINCT_MODIFIER" for m in node.get("modifiers") or []):
            return "DISTINCT is not allowed (it merges rows; counts per value: pfs du --by)"
        return "it reaches beyond its clause (FROM, a CTE, UNION, GROUP BY, ORDER BY, LIMIT...)"
    if kind == "order" and [m.get("type") for m in node["modifiers"]] != ["ORDER_MODIFIER"]:
        return "it reaches beyond its clause (LIMIT, OFFSET...)"
    if any(_walk_subqueries([node[c] for c in changes])):
        return "subqueries are not allowed (a filter reads only the manifest's own rows)"
    if _walk_parameters([node[c] for c in changes]):
        return "parameters ($1, ?) are not allowed (pfs passes its own values to its own SQL)"
    called = _walk_functions([node[c] for c in changes])
    outside = sorted(called & OUTSIDE_FUNCTIONS)
    if outside:  # refused here, not left to whichever functions a DuckDB build or extension provides
        return f"{outside[0]}() reads outside the manifest (a filter reads only the manifest's own rows)"
    hidden = sorted(n for n in called if n in _SETTINGS_FUNCTIONS or n.startswith(("duckdb_", "pragma_")))
    if hidden:
        return f"{', '.join(hidden)}() reads DuckDB's settings or catalog, not the manifest's rows"
    return None


# functions that expose DuckDB's own state (settings, paths, catalog), refused like subqueries
_SETTINGS_FUNCTIONS = {"current_setting", "getvariable", "getenv", "which_secret", "current_schemas"}


def _has_semicolon(text: str) -> bool:
    """A ``;`` outside string literals and comments (DuckDB's own tokenizer decides which is which)."""
    import duckdb

    try:
        tokens = duckdb.tokenize(text)
    except duckdb.Error:
        return False  # the parse below reports the error
    ends = [start for start, _ in tokens[1:]] + [len(text)]
    return any(
        kind == duckdb.token_type.operator and ";" in text[start:end]
        for (start, kind), end in zip(tokens, ends, strict=True)
    )


_parser_lock = threading.Lock()
# every database pfs opens: no extension is fetched or loaded behind its back
DUCKDB_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


@functools.cache
def _parser() -> duckdb.DuckDBPyConnection:
    """A connection used only to parse (``json_serialize_sql``); it reads and runs nothing."""
    import duckdb

    con = duckdb.connect(config=DUCKDB_CONFIG)
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


@atexit.register
def release_parser() -> None:
    """Free the parse-only connection: before the interpreter ends, as DuckDB's bindings (nanobind) print
    every one of their objects still alive then as leaked (dozens of lines after each Airflow task); and
    before a fork (``sql_probe``), as its database keeps threads while open.  The next parse opens another."""
    if _parser.cache_info().currsize:
        with _parser_lock:
            _parser().close()
            _parser.cache_clear()


def _parse(sql: str) -> dict | str:
    """The parse tree of the one SELECT in ``sql`` (locations dropped), or DuckDB's error message."""
    with _parser_lock:
        (raw,) = _parser().execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchall()[0]
    tree = json.loads(raw)
    if tree.get("error"):
        return str(tree.get("error_message", "parse error")).splitlines()[0]
    statements = tree.get("statements") or []
    if len(statements) != 1:
        return "not a single statement"
    return _strip_locations(statements[0]["node"])


@functools.cache
def _baseline(kind: str, neutral: str) -> dict:
    template = _TEMPLATES[kind][0]
    tree = _parse(template.format(neutral))
    assert isinstance(tree, dict), tree
    return tree


def _strip_locations(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_locations(v) for k, v in value.items() if not k.startswith("query_location")}
    if isinstance(value, list):
        return [_strip_locations(v) for v in value]
    return value


def _without(node: dict, keys: tuple[str, ...]) -> dict:
    return {k: v for k, v in node.items() if k not in keys}


def _walk_subqueries(value: Any) -> Iterator[dict]:
    """Every subquery (or any nested query node) below ``value``."""
    if isinstance(value, dict):
        if value.get("class") == "SUBQUERY" or "from_table" in value or "subquery" in value:
            yield value
            return
        for v in value.values():
            yield from _walk_subqueries(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk_subqueries(v)


def _walk_parameters(value: Any) -> bool:
    """Whether a prepared parameter (``?``, ``$1``, ``$name``) is anywhere below ``value``."""
    if isinstance(value, dict):
        return value.get("class") == "PARAMETER" or any(_walk_parameters(v) for v in value.values())
    if isinstance(value, list):
        return any(_walk_parameters(v) for v in value)
    return False


def _walk_functions(value: Any) -> set[str]:
    """The (lower-case) names of every function called below ``value``."""
    names: set[str] = set()
    if isinstance(value, dict):
        if value.get("class") == "FUNCTION" and isinstance(value.get("function_name"), str):
            names.add(value["function_name"].lower())
        for v in value.values():
            names |= _walk_functions(v)
    elif isinstance(value, list):
        for v in value:
            names |= _walk_functions(v)
    return names


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# ---------------------------------------------------------------- the locked connection


def connect(
    *manifests: Manifest, reads: Iterable[str] = (), dirs: Iterable[str] = (), tables: Tables | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that can read these manifests (and the files ``reads``, the directories
    ``dirs``) and nothing else, with bounded memory, threads and time (``dask_pfs.manifests.sql_run``).  Every
    connection pfs opens is one of these, for its own SQL (plans, diffs, counts) too.

    Each manifest is a relation named ``Manifest.table_name`` (``Manifest.relation_sql``): a view
    over its part files for a local one, a registered pyarrow dataset for one on an object store.
    Each of the ``reads`` that exists is a view named :func:`file_table`; ``tables`` names more.
    """
    import duckdb

    con = duckdb.connect(config=DUCKDB_CONFIG)
    # GLOBAL: a cursor (arrow_reader, fetch_all) is a connection of its own and takes the database's default,
    # which was the host's zone (a TIMESTAMPTZ rendered, or cut by date_trunc, in the host's time under TZ=...)
    con.execute("SET GLOBAL TimeZone = 'UTC'")
    _no_progress_bar(con)
    allowed = [os.path.abspath(d).rstrip("/") + "/" for d in dirs]
    named = dict(tables or {})
    datasets = {}
    for m in manifests:
        if m.is_local:
            allowed.append(m.local_dir.rstrip("/") + "/")
            named.update(m.tables())
        elif not m.part_files():
            named[m.table_name] = None
        else:
            datasets[m.table_name] = m.dataset()
            con.register(m.table_name, datasets[m.table_name])
    paths = [os.path.abspath(p) for p in reads]
    named.update({file_table(p): [p] for p in paths if os.path.isfile(p)})
    for place in allowed + paths:
        utf8(place)
    # DuckDB checks the pattern it is given (sql.literal's) against these too, then each file it matches
    allowed += [literal(a) for a in allowed if literal(a) != a]
    paths += [literal(p) for p in paths if literal(p) != p]
    apply_limits(con)
    if allowed:
        con.execute("SET allowed_directories = ?", [allowed])
    if paths:
        con.execute("SET allowed_paths = ?", [paths])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    # after the lock: each view binds under the same access rules as any query
    create_views(con, named, optional=[file_table(p) for p in paths])
    return cast(duckdb.DuckDBPyConnection, _Registered(con, datasets)) if datasets else con  # it quacks like one


def read_also(con: duckdb.DuckDBPyConnection, *manifests: Manifest) -> None:
    """Name these local manifests' rows on ``con``, a connection :func:`connect` locked to directories
    that hold them (``dirs``): a job whose connection already reads a manifest's directory (a streamed
    copy's) selects its rows there too, rather than opening a second database (~25 ms each).  Each view
    binds under ``con``'s access rules, so a manifest outside them is refused as any read there is."""
    for m in manifests:
        if not m.is_local:
            raise ValueError(f"{m.url}: only a local manifest's rows are named on a shared connection")
        create_views(con, m.tables())


def _no_progress_bar(con: duckdb.DuckDBPyConnection) -> None:
    """Turn DuckDB's progress bar off (it draws on stdout, where ``--json`` output goes).  In a Jupyter
    kernel without ipywidgets DuckDB refuses the setting itself, with the bar already off: that is fine."""
    import duckdb

    try:
        con.execute("SET enable_progress_bar = false")
    except duckdb.InvalidInputException:
        if con.execute("SELECT current_setting('enable_progress_bar')").fetchall()[0][0]:
            raise


class _Registered:
    """A locked connection whose cursors see its registered datasets too (DuckDB registers Python
    objects per connection, and a cursor is a new one)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, tables: dict) -> None:
        self._con, self._tables = con, tables

    def cursor(self) -> duckdb.DuckDBPyConnection:
        cur = self._con.cursor()
        for name, dataset in self._tables.items():
            cur.register(name, dataset)
        return cur

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


# ---------------------------------------------------------------- pfs query (and Manifest.query)


def select_sql(
    manifest: Manifest,
    where: str | None = None,
    select: str | None = None,
    order: str | None = None,
    limit: int | None = None,
    group_by: str | None = None,
) -> str:
    """The query of ``pfs query`` (and ``Manifest.query``); each clause is checked to be only what its option says."""
    where, select, order = check_where(where), check_select(select), check_order(order)
    group = check_group(group_by)
    sql = f"SELECT {select or '*'} FROM {manifest.relation_sql()} AS m"
    if where:
        sql += f" WHERE ({where})"
    if group:
        sql += f" GROUP BY {group}"
    if order:
        sql += f" ORDER BY {order}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql


def run_query(con: duckdb.DuckDBPyConnection, sql: str) -> duckdb.DuckDBPyRelation:
    import duckdb

    try:
        return con.sql(sql)
    except duckdb.Error as exc:
        raise PfsError(f"query failed: {str(exc).splitlines()[0]}") from None


__all__ = [
    "Filter",
    "arrow_reader",
    "check_group",
    "check_order",
    "check_select",
    "check_where",
    "connect",
    "fetch_all",
    "file_table",
    "literal",
    "run_query",
    "select_sql",
    "utf8",
    "where_filter",
    "write_parquet",
]
