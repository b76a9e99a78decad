"""A user's SQL is bounded (issue 27, finding 4 and the smaller items): memory and time bombs, deep
nesting and DuckDB's own settings end in one line and exit 2, with short limits set here."""

from __future__ import annotations

import resource
import time

import pytest

from dask_pfs import scan

from ..conftest import make_tree
from .conftest import cli, one_line_error

BOMBS = [
    ("range", "--where", "len(range(0, 200000000)) > 0"),
    ("repeat", "--where", "md5(repeat(path, 200000000)) <> ''"),
    ("select", "--select", "list_sum(range(0, 300000000))"),
]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory, dask_client):
    base = tmp_path_factory.mktemp("bounds")
    tree = make_tree(base / "t", {f"d{i}/f{j}": "x" * j for i in range(3) for j in range(5)})
    scan(tree, base / "m", dask_client)
    return base / "m"


@pytest.fixture
def short_limits(monkeypatch):
    monkeypatch.setenv("PFS_SQL_MEMORY_LIMIT", "300MB")
    monkeypatch.setenv("PFS_SQL_TIMEOUT", "60")


@pytest.mark.parametrize("case, option, clause", BOMBS, ids=[b[0] for b in BOMBS])
def test_memory_bombs_are_refused_without_growing_pfs(manifest, capsys, short_limits, case, option, clause):
    """The child that runs the clause first hits its address-space limit; pfs itself stays small."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    code, _, err = cli(capsys, "query", manifest, option, clause)
    one_line_error(code, err)
    assert "Out of Memory" in err or "memory" in err.lower(), err
    assert time.monotonic() - t0 < 60
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 500_000, f"pfs grew by {grown_kb} KB"


def test_a_bomb_in_a_jobs_where_is_refused_before_anything_is_done(manifest, capsys, short_limits, scheduler_address):
    tree_file = manifest.parent / "t" / "d0" / "f1"
    code, _, err = cli(
        capsys, "rm", "--manifest", manifest, "--where", BOMBS[0][2], "-y", "--scheduler", scheduler_address
    )
    one_line_error(code, err)
    assert tree_file.exists()


def test_a_slow_clause_is_stopped_at_the_time_limit(manifest, capsys, monkeypatch):
    monkeypatch.setenv("PFS_SQL_TIMEOUT", "2")
    slow = "list_reduce(range(0, 30000000 + len(path)), lambda x, y: x + y) > 0"  # DuckDB 2 refuses ->
    t0 = time.monotonic()
    code, _, err = cli(capsys, "query", manifest, "--where", slow)
    one_line_error(code, err)
    assert "PFS_SQL_TIMEOUT" in err
    assert time.monotonic() - t0 < 30


def test_a_400_deep_clause_is_one_line(manifest, capsys):
    for depth in (400, 3000):
        clause = "(" * depth + "size >= 0" + ")" * depth
        code, _out, err = cli(capsys, "query", manifest, "--where", clause, "--format", "csv", "--select", "path")
        assert "Traceback" not in err and "RecursionError" not in err, err
        if code != 0:
            one_line_error(code, err)


@pytest.mark.parametrize(
    "option, clause",
    [
        ("--select", "current_setting('allowed_directories')"),
        ("--where", "current_setting('temp_directory') <> ''"),
        ("--select", "getvariable('x')"),
        ("--where", "len(duckdb_settings()) > 0"),
    ],
)
def test_settings_functions_are_refused(manifest, capsys, option, clause):
    code, out, err = cli(capsys, "query", manifest, option, clause)
    one_line_error(code, err)
    assert "refused" in err and str(manifest) not in out


@pytest.mark.parametrize("cap", ["200%", "100.5%", "nan%"])
def test_max_entries_over_100_percent_is_refused(manifest, capsys, cap, scheduler_address):
    code, _, err = cli(
        capsys, "rm", "--manifest", manifest, "--max-entries", cap, "-y", "--scheduler", scheduler_address
    )
    one_line_error(code, err)
    assert "--max-entries" in err
    assert (manifest.parent / "t" / "d0" / "f1").exists()
