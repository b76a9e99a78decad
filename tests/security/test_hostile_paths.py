"""Places named with SQL's and the shell's special characters (issue 27, finding 2).

Every command and argument that names a place (scan -o, cp/rm/sync/verify/diff paths, --plan,
--src/--dst-manifest, query's and diff's -o, verify's --report) gets a directory whose name holds
``'``, ``"``, ``;``, ``--`` and a newline: each works, and nothing is written anywhere else (the
issue's ``--plan`` injection wrote a file through ``COPY ... TO``).  A name that is not UTF-8 works
where DuckDB is not involved and is otherwise refused with one line (DuckDB takes only UTF-8).
A name that is a glob pattern (``*``, ``?``, ``[``) names its own place only, never a sibling it matches.
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


# DuckDB's read_parquet globs every path it is given: a place named with ``*``, ``?`` or ``[`` once read
# another place's files (``p*[a]?/plan.parquet`` read ``pZaQ/plan.parquet``, never its own)
GLOB = "p*[a]?'\"; -- \nx"
DECOY = "pZaQ'\"; -- \nx"  # what GLOB matches as a pattern


def test_glob_characters_name_only_their_own_place(tmp_path, capsys, scheduler_address, monkeypatch):
    """Every command over places whose name is a glob pattern that matches a decoy sibling (and holds
    SQL's quotes, ``;``, ``--`` and a newline) reads and writes its own place, never the decoy's."""
    import pyarrow.parquet as pq

    monkeypatch.chdir(tmp_path)
    decoy_src = make_tree(tmp_path / "decoy-src", {"d/f": "decoy", "z/zz": "decoy"})
    decoy = tmp_path / DECOY
    decoy.mkdir()
    for argv in commands(decoy_src, decoy, scheduler_address):
        code, out, err = cli(capsys, *argv)
        assert code == 0, (argv, code, out, err)
    decoy_before = {p: tree_digest(decoy / p) for p in ("m", "d2", "dst")}
    src = make_tree(tmp_path / "src", {"d/f": "hello", "d/g": "x", "e": "yy"})
    base = tmp_path / GLOB
    base.mkdir()
    for argv in commands(src, base, scheduler_address):
        code, out, err = cli(capsys, *argv)
        assert code == 0, (argv, code, out, err)
        assert "z" not in out.split(), (argv, out)  # no decoy row counted or listed
    assert tree_digest(base / "d2") == tree_digest(src)
    assert {p: tree_digest(decoy / p) for p in ("m", "d2", "dst")} == decoy_before
    queried = set(pq.read_table(base / "q.parquet", columns=["path"]).column("path").to_pylist())
    assert {"d/f", "d/g", "e"} <= queried <= {"d", "d/f", "d/g", "e"}, queried
    changes = pq.read_table(base / "diff.parquet").column("path").to_pylist()
    assert not any(p.startswith("z") for p in changes), changes
    plan = pq.read_table(base / "plan" / "plan.parquet").column("path").to_pylist()
    assert sorted(plan) == sorted({"d", "d/f", "d/g", "e"}), plan
