"""Places named with SQL's and the shell's special characters (issue 27, finding 2).

Every command and argument that names a place (scan -o, cp/rm/sync/verify/diff paths, --plan,
--src/--dst-manifest, query's and diff's -o, verify's --report) gets a directory whose name holds
``'``, ``"``, ``;``, ``--`` and a newline: each works, and nothing is written anywhere else (the
issue's ``--plan`` injection wrote a file through ``COPY ... TO``).  A name that is not UTF-8 works
where DuckDB is not involved and is otherwise refused with one line (DuckDB takes only UTF-8).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..conftest import make_tree, tree_digest
from .conftest import cli, one_line_error

INJECTION = "x') WHERE false; COPY (SELECT 'pwned') TO 'PWNED.csv'; SELECT * FROM read_parquet('"
HOSTILE = [
    ("quotes-and-comment", "q'\"; -- \nx"),
    ("plan-injection", INJECTION),
    ("non-utf8", os.fsdecode(b"bad\xff'name")),
]


def commands(src: Path, base: Path, scheduler: str) -> list[list[object]]:
    on = ["--scheduler", scheduler]
    return [
        ["scan", src, "-o", base / "m", *on],
        ["query", base / "m", "--format", "parquet", "-o", base / "q.parquet", "--where", "size > 0"],
        ["query", base / "m", "--format", "csv", "-o", base / "q.csv"],
        ["cp", f"{src}/", base / "dst", *on],
        ["verify", src, base / "dst", "--report", base / "report.parquet", *on],
        ["scan", base / "dst", "-o", base / "m2", *on],
        ["diff", base / "m", base / "m2", "-o", base / "diff.parquet"],
        ["cp", "--manifest", base / "m", base / "dst3", *on],
        ["sync", src, base / "d2", "--src-manifest", base / "sm", "--dst-manifest", base / "dm", "-y", *on],
        ["sync", src, base / "d2", "--plan", base / "plan", "--delete", "-y", *on],
        ["rm", "--manifest", base / "m2", "--where", "name = 'f'", "-y", *on],
        ["rm", base / "dst3", "-y", *on],
    ]


@pytest.mark.parametrize("case, name", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_every_place_argument_takes_a_hostile_name(tmp_path, capsys, scheduler_address, monkeypatch, case, name):
    monkeypatch.chdir(tmp_path)  # where a relative COPY ... TO would land
    src = make_tree(tmp_path / "src", {"d/f": "hello", "d/g": "x", "e": "yy"})
    base = tmp_path / name
    base.mkdir()
    before = set(os.listdir(tmp_path))
    for argv in commands(src, base, scheduler_address):
        code, out, err = cli(capsys, *argv)
        assert "Traceback" not in err, (argv, err)
        if case == "non-utf8" and code == 2:  # refused where pyarrow or DuckDB would have to name it
            one_line_error(code, err)
            continue
        if case == "non-utf8" and argv[0] == "verify":  # what cp was refused is missing: reported, exit 1
            assert code in (0, 1) and "missing" in out, (argv, code, out, err)
            continue
        assert code == 0, (argv, code, out, err)
    assert set(os.listdir(tmp_path)) == before  # nothing written beside the places named
    assert not list(tmp_path.rglob("PWNED*"))
    if case != "non-utf8":
        assert tree_digest(base / "d2") == tree_digest(src)
        assert not (base / "dst3").exists() and not (base / "dst" / "d" / "f").exists()
    else:  # refused where pyarrow or DuckDB must name it; a tree of that name is still removed
        tree = make_tree(base / "tree", {"d/f": "x"})
        code, _, err = cli(capsys, "rm", tree, "-y", "--scheduler", scheduler_address)
        assert code == 0 and not tree.exists(), err


def test_the_reported_plan_injection(tmp_path, capsys, scheduler_address, monkeypatch):
    """The issue's exact ``--plan`` argument: a plan directory of that name, no SQL run from it."""
    monkeypatch.chdir(tmp_path)
    src = make_tree(tmp_path / "s2", {"a": "1"})
    plan = (
        f"{tmp_path}/pl') WHERE false; COPY (SELECT 'pwned') TO '{tmp_path}/PWNED.csv'; "
        f"SELECT count(*) FROM read_parquet('{tmp_path}/q"
    )
    code, _, err = cli(capsys, "sync", src, tmp_path / "d2", "-y", "--plan", plan, "--scheduler", scheduler_address)
    assert code == 0, err
    assert not (tmp_path / "PWNED.csv").exists()
    assert (Path(plan) / "plan.parquet").exists()
