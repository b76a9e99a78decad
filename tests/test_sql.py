"""SQL a user writes may only filter the manifest (``dask_pfs.manifests.sql``): every way out is refused with
exit code 2 and one line, through the CLI (``pfs query``/``rm``/``cp``/``du``/``verify``) and the
Python API, and nothing outside the manifest is read or written.  Legal clauses keep working."""

from __future__ import annotations

import os
import time

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_pfs import PfsError, copy, remove, scan, verify
from dask_pfs.cli import run
from dask_pfs.manifests.manifest import open_manifest
from dask_pfs.manifests.sql import check_order, check_select, check_where, connect, file_table
from tests.conftest import make_tree, run_pfs, tree_digest

SECRET = "TOP-SECRET-7f3a9"
TREE = {
    "keep/a.txt": "alpha",
    "keep/b;c.txt": "semicolon in a name",
    "old/o.log": "old",
    "tmp/x.tmp": "junk",
}

# (case id, option, clause): {secret} is a readable file outside the manifest, {target} a file
# nothing may create, {outdir} a directory nothing may create
ESCAPES = [
    ("copy", "--where", "1=1; COPY (SELECT 1) TO '{target}'"),
    ("read_csv-subquery", "--where", "path IN (SELECT column0 FROM read_csv('{secret}', header=false, sep=':'))"),
    ("attach", "--where", "1=1; ATTACH '{target}' AS stolen"),
    ("install", "--where", "1=1; INSTALL httpfs"),
    ("load", "--where", "1=1; LOAD httpfs"),
    ("read_text", "--where", "EXISTS (SELECT * FROM read_text('{secret}'))"),
    ("read_blob", "--where", "size < (SELECT length(content) FROM read_blob('{secret}'))"),
    ("glob", "--where", "path IN (SELECT file FROM glob('{outdir}/../*'))"),
    ("getenv", "--where", "getenv('HOME') IS NOT NULL"),
    ("export", "--where", "1=1; EXPORT DATABASE '{outdir}'"),
    ("set", "--where", "1=1; SET enable_external_access = true"),
    ("pragma", "--where", "1=1; PRAGMA enable_profiling = 'json'; PRAGMA profiling_output = '{target}'"),
    ("comment-hides-statement", "--where", "1=1 /* just a filter */; COPY (SELECT 1) TO '{target}' -- done"),
    ("line-comment-then-statement", "--where", "1=1 --\n; COPY (SELECT 1) TO '{target}'"),
    ("cte", "--where", "path IN (WITH s AS (SELECT content FROM read_text('{secret}')) SELECT content FROM s)"),
    ("union", "--where", "false UNION ALL SELECT 1 FROM read_text('{secret}')"),
    ("parenthesis-escape", "--where", "1) OR (1"),
    ("select-from", "--select", "content FROM read_text('{secret}') --"),
    ("select-subquery", "--select", "(SELECT content FROM read_text('{secret}')) AS c"),
    ("order-subquery", "--order-by", "(SELECT content FROM read_text('{secret}'))"),
    ("order-limit-statement", "--order-by", "path LIMIT 1; COPY (SELECT 1) TO '{target}'"),
]
WHERE_ESCAPES = [c for c in ESCAPES if c[1] == "--where"]


@pytest.fixture(scope="module")
def world(tmp_path_factory, dask_client):
    """A scanned tree, a secret beside it, and the names an escape would write to."""
    base = tmp_path_factory.mktemp("sql")
    src = make_tree(base / "src", TREE)
    past = time.time() - 100 * 86400
    os.utime(src / "old" / "o.log", (past, past))
    scan(src, base / "m", dask_client)
    (base / "secret.txt").write_text(f"{SECRET}:x:0:0\n")
    return {
        "base": base,
        "src": src,
        "m": base / "m",
        "secret": base / "secret.txt",
        "target": base / "pwned.csv",
        "outdir": base / "pwned-dir",
    }


def fill(clause: str, w: dict) -> str:
    return clause.format(secret=w["secret"], target=w["target"], outdir=w["outdir"])


def assert_untouched(w: dict, out: str = "", before: dict | None = None) -> None:
    assert not w["target"].exists() and not w["outdir"].exists()
    assert SECRET not in out
    extra = [p.name for p in w["m"].iterdir() if not (p.name.startswith("part-") or p.name == "_manifest.json")]
    assert not extra, f"a journal or a log appeared in the manifest directory: {extra}"
    if before is not None:
        assert tree_digest(w["src"]) == before


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# Cases whose refusal must be pfs's own clause check, not an error of DuckDB's (getenv does not even exist
# in DuckDB's Python build: a "Catalog Error" there would pass with every guard of pfs removed)
OWN_REFUSALS = {"getenv": "--where refused: getenv() reads outside the manifest"}


def assert_refused(code: int, out: str, err: str, case: str = "") -> None:
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pfs: error: "), err
    if case in OWN_REFUSALS:
        assert OWN_REFUSALS[case] in err, err


@pytest.mark.parametrize("case, option, clause", ESCAPES, ids=[c[0] for c in ESCAPES])
def test_query_refuses(world, capsys, case, option, clause):
    for fmt in (["--format", "csv"], ["--format", "parquet", "-o", world["base"] / "out.parquet"]):
        code, out, err = cli(capsys, "query", world["m"], option, fill(clause, world), *fmt)
        assert_refused(code, out, err, case)
        assert_untouched(world, out + err)
        assert not (world["base"] / "out.parquet").exists()


@pytest.mark.parametrize("case, option, clause", WHERE_ESCAPES, ids=[c[0] for c in WHERE_ESCAPES])
def test_rm_cp_du_verify_refuse(world, capsys, monkeypatch, case, option, clause):
    monkeypatch.setenv("XDG_CACHE_HOME", str(world["base"] / "cache"))  # where journals would go otherwise
    before, where = tree_digest(world["src"]), fill(clause, world)
    dst = world["base"] / "dst"
    for argv in (
        ["rm", "--manifest", world["m"], "--where", where, "-y"],
        ["rm", "--manifest", world["m"], "--where", where, "--dry-run"],
        ["cp", "--manifest", world["m"], "--where", where, dst],
        ["du", world["m"], "--where", where],
        ["verify", "--src-manifest", world["m"], "--dst-manifest", world["m"], "--where", where],
    ):
        code, out, err = cli(capsys, *argv)
        assert_refused(code, out, err, case)
        assert_untouched(world, out + err, before)
        assert not dst.exists() and not (world["base"] / "cache").exists()


API_ESCAPES = [c for c in WHERE_ESCAPES if c[0] in ("copy", "read_csv-subquery", "attach", "getenv", "cte")]


@pytest.mark.parametrize("case, option, clause", API_ESCAPES, ids=[c[0] for c in API_ESCAPES])
def test_python_api_refuses(world, dask_client, case, option, clause):
    before, where, dst = tree_digest(world["src"]), fill(clause, world), world["base"] / "dst"
    for call in (
        lambda: remove(manifest=world["m"], where=where, client=dask_client),
        lambda: copy(None, dst, manifest=world["m"], where=where, client=dask_client),
        lambda: verify(src_manifest=world["m"], dst_manifest=world["m"], where=where, client=dask_client),
    ):
        with pytest.raises(PfsError) as info:
            call()
        assert "\n" not in str(info.value)
        if case in OWN_REFUSALS:
            assert OWN_REFUSALS[case].replace("--where", "where=") in str(info.value), info.value  # Python's name
        assert_untouched(world, str(info.value), before)
        assert not dst.exists()


def test_first_cases_of_the_issue_through_the_real_cli(world):
    """The reported escapes in a real ``pfs`` process (the other cases run the same CLI in-process)."""
    before = tree_digest(world["src"])
    q = run_pfs("query", world["m"], "--where", fill("1=1; COPY (SELECT 1) TO '{target}'", world))
    passwd = "path IN (SELECT column0 FROM read_csv('/etc/passwd', header=false, sep=':'))"
    rm = run_pfs("rm", "--manifest", world["m"], "--where", passwd, "-y")
    for proc in (q, rm):
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and "refused" in proc.stderr
        assert "root:" not in proc.stdout + proc.stderr
        assert_untouched(world, proc.stdout + proc.stderr, before)
    assert "';' ends a statement" in q.stderr and "subqueries are not allowed" in rm.stderr


def test_legal_clauses_still_work(world, capsys):
    def rows(*argv) -> list[str]:
        code, out, err = cli(capsys, "query", world["m"], "--format", "csv", *argv)
        assert code == 0, err
        return out.splitlines()

    assert rows("--where", "name = 'b;c.txt'", "--select", "path") == ["path", "keep/b;c.txt"]
    assert rows("--where", "type = 'file' AND mtime < now() - INTERVAL 90 DAY", "--select", "path") == [
        "path",
        "old/o.log",
    ]
    assert rows(
        "--where",
        "type = 'file' -- files only",
        "--select",
        "path, size * 2 AS twice -- doubled",
        "--order-by",
        "size DESC, path -- biggest first",
        "--limit",
        "2",
    ) == ["path,twice", "keep/b;c.txt,38", "keep/a.txt,10"]
    assert rows("--where", "list_contains(['a.txt', 'x.tmp'], name)", "--select", "count(*) AS n") == ["n", "2"]
    assert rows("--where", "regexp_matches(path, '^keep/') AND name LIKE '%;%'", "--select", "name") == [
        "name",
        "b;c.txt",
    ]


def test_query_output_file_is_the_only_write(world, capsys):
    """``-o`` writes the user's file (pyarrow or Python writes it; the locked connection cannot)."""
    out_dir = world["base"] / "outputs"
    out_dir.mkdir()
    for fmt, name in (("parquet", "sel.parquet"), ("csv", "sel.csv"), ("json", "sel.json")):
        code, _, err = cli(
            capsys, "query", world["m"], "--where", "type = 'file'", "--format", fmt, "-o", out_dir / name
        )
        assert code == 0, err
    assert sorted(p.name for p in out_dir.iterdir()) == ["sel.csv", "sel.json", "sel.parquet"]
    assert duckdb.connect().execute(f"SELECT count(*) FROM '{out_dir}/sel.parquet'").fetchall() == [(4,)]
    assert (out_dir / "sel.csv").read_text().splitlines()[0].startswith("path,path_raw,name")
    assert len(duckdb.connect().execute(f"SELECT * FROM read_json('{out_dir}/sel.json')").fetchall()) == 4
    code, _, err = cli(capsys, "query", world["m"], "--where", "no_such_column > 1", "-o", out_dir / "bad.csv",
                       "--format", "csv")  # fmt: skip
    assert code == 2 and "no_such_column" in err and not (out_dir / "bad.csv").exists()


def test_legal_where_selects_exactly_for_rm(tmp_path, dask_client):
    """A string literal holding ';' is data, not a statement: rm removes exactly that row."""
    src = make_tree(tmp_path / "src", TREE)
    scan(src, tmp_path / "m", dask_client)
    result = remove(manifest=tmp_path / "m", where="name = 'b;c.txt'", client=dask_client)
    assert (result.removed_files, result.selected, result.failed) == (1, 1, 0)
    assert not (src / "keep" / "b;c.txt").exists() and (src / "keep" / "a.txt").exists()


def test_the_connection_reads_only_the_manifest(world):
    """The second wall, without the clause check: the locked connection itself refuses."""
    con = connect(open_manifest(world["m"]))
    assert con.execute(f"SELECT count(*) FROM {open_manifest(world['m']).relation_sql()}").fetchall() == [(7,)]
    for sql in (
        f"SELECT * FROM read_text('{world['secret']}')",
        f"SELECT * FROM read_csv('{world['secret']}')",
        f"SELECT * FROM glob('{world['base']}/*')",
        f"COPY (SELECT 1) TO '{world['target']}'",
        f"ATTACH '{world['target']}' AS x",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "SET allowed_directories = ['/']",
    ):
        with pytest.raises(duckdb.Error):
            con.execute(sql).fetchall()
    assert not world["target"].exists()


def test_clause_checks_name_their_option():
    assert check_where("  size > 1  ") == "size > 1\n"
    assert check_where(None) is None and check_where("   ") is None
    assert check_select("path, size") == "path, size\n"
    assert check_order("size DESC NULLS LAST") == "size DESC NULLS LAST\n"
    with pytest.raises(PfsError, match=r"^where refused: subqueries"):
        check_where("EXISTS (SELECT 1)", "where")
    with pytest.raises(PfsError, match=r"^select= refused"):  # from Python: the argument's name
        check_select("DISTINCT path")  # a modifier of the statement, not a select list
    with pytest.raises(PfsError, match=r"^where= must be a string"):
        check_where(42)
    with pytest.raises(PfsError, match="not valid SQL"):
        check_where("size >")


@pytest.mark.parametrize(
    "clause",
    ["getenv('HOME') IS NOT NULL", "lower(GETENV('HOME')) = 'x'", "size > 0 AND coalesce(getenv('X'), '') = ''"],
)
def test_host_reading_functions_are_refused_by_the_clause_check(clause):
    """pfs's own wall, before any connection: not DuckDB's missing function (an extension could add one)."""
    with pytest.raises(PfsError, match=r"where= refused: getenv\(\) reads outside the manifest"):
        check_where(clause)
    assert check_where("size > 0 AND lower(name) = 'getenv'") is not None  # the name as a value is fine


@pytest.mark.parametrize("clause", ["size > ?", "size > $1", "name = $algorithm", "starts_with(checksum, ?)"])
@pytest.mark.parametrize("check", [check_where, check_select, check_order])
def test_parameters_are_refused_in_a_users_clause(check, clause):
    """pfs passes its own values as parameters (a checksum prefix, a LIMIT): a user's ``?`` would take one."""
    with pytest.raises(PfsError, match=r"refused: parameters \(\$1, \?\) are not allowed"):
        check(clause)


def test_a_half_written_file_in_reads_gets_no_relation_and_stops_nothing(tmp_path):
    """A temp file an earlier run left half written (sync's manifest rewrite) is named in ``reads`` to be
    overwritten: the connection is made anyway, and only a query of that file fails."""
    bad = tmp_path / "it's [half]*.tmp"
    bad.write_bytes(b"PAR1 not parquet")
    con = connect(reads=[str(bad)])
    assert con.execute("SELECT 1").fetchall() == [(1,)]
    with pytest.raises(duckdb.Error):
        con.execute(f"SELECT * FROM {file_table(str(bad))}").fetchall()
    good = tmp_path / "it's [whole]*.parquet"
    pq.write_table(pa.table({"key": [b"a"]}), good)
    assert connect(reads=[str(good)]).execute(f"SELECT key FROM {file_table(str(good))}").fetchall() == [(b"a",)]


@pytest.mark.parametrize("zone", ["Europe/Berlin", "Asia/Tokyo"])
def test_query_output_is_in_utc_whatever_the_hosts_zone(world, zone):
    """Every statement runs on a cursor (a connection of its own): it had the host's zone, so a TIMESTAMPTZ
    rendered, and date_trunc cut, in local time under TZ=... (the connection's own setting was UTC)."""
    proc = run_pfs(
        "query", world["m"], "--format", "csv", "--limit", "1", "--select",
        "TIMESTAMPTZ '2020-01-01 23:30:00+00' AS t, date_trunc('day', TIMESTAMPTZ '2020-01-01 23:30:00+00') AS d",
        env={"TZ": zone}, check=True,
    )  # fmt: skip
    assert proc.stdout.splitlines()[1] == "2020-01-01 23:30:00+00:00,2020-01-01 00:00:00+00:00", proc.stdout
