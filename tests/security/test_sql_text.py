"""pfs's own SQL never carries a path or a value in its text (issue 27): a static guard.

Paths reach DuckDB as relations ``dask_pfs.manifests.sql.connect`` names (``Manifest.table_name``,
``sql.file_table``) or as parameters (``?``); values as parameters.  Identifiers from pfs's own schema
may be pasted.  This reads every module of ``dask_pfs/`` (and ``operators/``) and refuses:

* a call of a quoting helper (``sql_str``: the one pfs had, which pasted paths as literals);
* an f-string that reads as SQL with a placeholder inside a single-quoted SQL string (``'{x}'``);
* an f-string that reads as SQL with a placeholder straight after ``read_parquet(`` or one formatted
  with ``!r`` (a Python value's repr pasted as SQL, e.g. a tuple for ``IN``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dask_pfs", "operators")
HOLE = "\x00"  # where a placeholder sits in an f-string's text
# words only SQL uses (upper case keywords, DuckDB's functions): an English message has none of them
SQL = re.compile(r"\b(SELECT|FROM|WHERE|WITH|COPY|UNION|JOIN|IN|LIKE|AND|OR)\b|read_parquet\(|starts_with\(")
QUOTING = {"sql_str"}


def _template(node: ast.JoinedStr) -> str:
    """The f-string's text with each placeholder as :data:`HOLE`."""
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value)
        else:
            parts.append(HOLE)
    return "".join(parts)


def _quoted_hole(text: str) -> bool:
    """A placeholder inside a single-quoted SQL string (``''`` is a quote inside one)."""
    inside = False
    for ch in text:
        if ch == "'":
            inside = not inside
        elif ch == HOLE and inside:
            return True
    return False


def problems(source: str, name: str = "<source>") -> list[str]:
    """Every place in ``source`` that builds SQL text out of a path or a value."""
    found = []
    tree = ast.parse(source, name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if called in QUOTING:
                found.append(f"{name}:{node.lineno}: {called}() pastes a value into SQL text")
        if not isinstance(node, ast.JoinedStr):
            continue
        text = _template(node)
        if not SQL.search(text.replace(HOLE, " ")):
            continue
        reprs = [v for v in node.values if isinstance(v, ast.FormattedValue) and v.conversion == ord("r")]
        if _quoted_hole(text):
            found.append(f"{name}:{node.lineno}: a placeholder inside a quoted SQL string")
        elif f"read_parquet({HOLE}" in text or f"read_parquet([{HOLE}" in text:
            found.append(f"{name}:{node.lineno}: a placeholder as read_parquet's files")
        elif reprs:
            found.append(f"{name}:{node.lineno}: a Python value's repr pasted into SQL")
    return found


def test_no_sql_is_built_from_paths_or_values():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += problems(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'sql = f"SELECT * FROM read_parquet({sql_str(path)})"',
        'sql = f"(SELECT key FROM read_parquet({files}) WHERE {cond})"',
        "missing = f\"type = 'file' AND NOT starts_with(checksum, '{algorithm}:')\"",
        'w = f"action IN {ACTIONS!r}"',
        "names = ', '.join(sql_str(n) for n in parts)",
        "q = f\"SELECT path FROM t WHERE path = '{p}'\"",
    ],
)
def test_the_guard_sees_each_way_main_built_sql(source):
    """Each shape pfs's SQL once had (issue 27) is caught: the guard cannot pass vacuously."""
    assert problems(source)


@pytest.mark.parametrize(
    "source",
    [
        'sql = f"SELECT {cols} FROM {m.relation_sql()} AS m WHERE {cond}"',
        "sql = f\"SELECT count(*) FROM {file_table(p)} WHERE action = 'new'\"",
        "raise PfsError(f\"'{path}': not a manifest\")",
        "msg = f\"{option} refused: it is not '{kind}'\"",
    ],
)
def test_the_guard_lets_identifiers_and_messages_pass(source):
    assert not problems(source)
