"""``pfs query``, ``pfs du`` and ``pfs info``: reading manifests with DuckDB."""

from __future__ import annotations

import base64
import io
import json
import os
import sys
import tempfile
import warnings
from typing import TYPE_CHECKING, Any

import click
import duckdb

from dask_pfs.cli import cli, cluster_options, echo_json, reader_options
from dask_pfs.errors import PfsError
from dask_pfs.manifests.check import check_parts
from dask_pfs.manifests.manifest import has_marker, open_manifest
from dask_pfs.manifests.query import BY_CHOICES, du_sql, select_sql
from dask_pfs.manifests.sql import arrow_reader, check_where, connect, fetch_all, write_parquet
from dask_pfs.manifests.sql_probe import probe_manifest
from dask_pfs.manifests.sql_run import deadline
from dask_pfs.runtime.progress import NullProgress, human_bytes, make_reporter
from dask_pfs.runtime.results import counted
from dask_pfs.warm.faithful import descriptors_named
from operators.core import outputs

if TYPE_CHECKING:
    import pyarrow as pa
    from distributed import Client

    from dask_pfs.clusters.client import ClusterOptions
    from dask_pfs.runtime.progress import Reporter


def _text(value: Any) -> str:
    """A value as text: bytes (``path_raw``, a name that is not UTF-8) as base64, never a Python repr."""
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    return str(value)


def _plain(value: Any) -> Any:
    """A value for JSON: bytes as base64 text, the rest as JSON knows it (or its text)."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    return value


def _print_table(columns: list[str], rows: list[tuple], title: str | None = None) -> None:
    """A table on a terminal; tab-separated lines, whole values, when stdout is a pipe or a file."""
    if not sys.stdout.isatty():
        if title:
            click.echo(f"# {title}")
        click.echo("\t".join(columns))
        for row in rows:
            click.echo("\t".join(_text(v).replace("\t", " ").replace("\n", " ") for v in row))
        return
    from rich.console import Console  # only for a terminal: rich is ~40 ms of every query's start-up otherwise
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*[_text(v) for v in row])
    Console().print(table)


@cli.command("query")
@click.argument("manifest")
@click.option(
    "--where",
    help="One SQL condition over the manifest's columns, e.g. \"size > 1e9 AND mtime < '2026-01-01'\" "
    "(no statements, no subqueries).",
)
@click.option("--select", "select", help="Columns or expressions over the manifest's columns (default: all).")
@click.option("--order-by", "order", help='SQL ORDER BY list, e.g. "size DESC, path".')
@click.option("--limit", type=int)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "tsv", "csv", "json", "parquet"]),
    default=None,
    help="table on a terminal, else tsv (whole values, tab-separated). Bytes (path_raw) are base64 in every "
    "format but parquet.",
)
@click.option("-o", "--output", help="Write to this file instead of stdout (required for parquet).")
@click.option("--allow-incomplete", is_flag=True, help="Read a manifest without a completion marker.")
@reader_options
def query_cmd(manifest, where, select, order, limit, fmt, output, allow_incomplete, cluster) -> None:
    """Select rows of a manifest with SQL (DuckDB).

    The clauses may only filter and shape the manifest's rows: each is parsed as one
    expression (or one list), never a statement, and runs on a DuckDB connection that can
    read nothing but the manifest. A refused clause exits 2 and says why.

    With --scheduler and a manifest only the workers see, the query runs on a worker and its
    rows come back through the scheduler (use --limit); -o is written here.
    """
    from dask_pfs.remote.client import remote_driver, run_job
    from dask_pfs.remote.driver import JobSpec

    if fmt is None:
        fmt = "table" if sys.stdout.isatty() and not output else "tsv"
    if fmt == "parquet" and not output:
        raise PfsError("--format parquet needs -o FILE")
    if remote_driver(cluster, [manifest]):
        spec = JobSpec(f"{__name__}:select_rows", (manifest, where, select, order, limit, allow_incomplete))
        con = connect()  # locked too: it reads only the rows registered here
        con.register("rows", run_job(spec, cluster, NullProgress(), inputs=[manifest]))
        con.execute("CREATE TABLE selected AS SELECT * FROM rows")  # a table: cursors see it, not a view
        con.unregister("rows")
        sql = "SELECT * FROM selected"
    else:
        m = _open(manifest, allow_incomplete)
        check_parts(m)  # a damaged part: exit 2 naming it, not rows read wrong
        sql = select_sql(m, where, select, order, limit)
        # the user's clauses run to the end in a bounded child first; this process's connection opens meanwhile
        con = probe_manifest(m, sql, connecting=lambda: connect(m))
    if fmt == "parquet":
        write_parquet(con, sql, output)  # pyarrow writes: the locked connection cannot
        return
    if fmt == "table" and not output:
        _print_table(*fetch_all(con, sql))
        return
    cur = con.cursor()
    try:
        with deadline(cur):
            cur.execute(sql)  # a bad column fails here, before the output file is opened
    except duckdb.Error as exc:
        raise PfsError(f"query failed: {str(exc).splitlines()[0]}") from None
    named = descriptors_named([output]) if output else {}
    if output in named:  # ``-o /dev/fd/3``: the stream the caller opened, written as it is (nothing to rename)
        _to_descriptor(named[output], cur, fmt)
    elif output:  # the one writer: renamed into place when complete (one put on an object store)
        with outputs.output_file(output) as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            _write_rows(cur, fmt, text)
            text.flush()
            text.detach()
    else:
        _write_rows(cur, fmt, sys.stdout)


def _open(manifest: str, allow_incomplete: bool):
    """The manifest; an incomplete one (``--allow-incomplete``) is said in one line, not a raw warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = open_manifest(manifest, allow_incomplete=allow_incomplete)
    if not m.complete:
        click.echo(f"pfs: warning: {manifest}: incomplete manifest (no completion marker): the rows written so far",
                   err=True)  # fmt: skip
    return m


def select_rows(
    manifest: str,
    where: str | None,
    select: str | None,
    order: str | None,
    limit: int | None,
    allow_incomplete: bool = False,
    *,
    client: Client | None = None,
    progress: Reporter | None = None,
    cluster: ClusterOptions | None = None,
) -> pa.Table:
    """The rows ``pfs query`` selects, as one Arrow table (run on a worker that sees the manifest)."""
    m = open_manifest(manifest, allow_incomplete=allow_incomplete)
    check_parts(m)
    sql = select_sql(m, where, select, order, limit)
    probe_manifest(m, sql)
    return arrow_reader(connect(m), sql).read_all()


def marker(
    manifest: str,
    *,
    client: Client | None = None,
    progress: Reporter | None = None,
    cluster: ClusterOptions | None = None,
) -> tuple[str, dict]:
    """(URL, completion marker) of a manifest, for ``pfs info`` (run where the manifest is seen)."""
    m = open_manifest(manifest)
    return m.url, m.info


def _fetch(cur: duckdb.DuckDBPyConnection) -> list[tuple]:
    with deadline(cur):
        return cur.fetchmany(10_000)


def _to_descriptor(fd: int, cur: duckdb.DuckDBPyConnection, fmt: str) -> None:
    """The rows into a descriptor the caller named (``-o /dev/fd/3``): a stream it opened, written as it
    is, through a duplicate (it opens no name, so the one writer has nothing to check or rename)."""
    with open(os.dup(fd), "w", encoding="utf-8", newline="") as stream:
        _write_rows(cur, fmt, stream)


def _write_rows(cur: duckdb.DuckDBPyConnection, fmt: str, out) -> None:
    """Stream the rows of an executed query to ``out`` as CSV or TSV (with a header) or a JSON array of
    objects; bytes as base64 (``_text``)."""
    import csv

    try:
        cols = [d[0] for d in cur.description]
        dialect = "excel" if fmt == "csv" else "excel-tab"
        w = None if fmt == "json" else csv.writer(out, dialect, lineterminator="\r\n" if fmt == "csv" else "\n")
        if w is not None:
            w.writerow(cols)
        else:
            out.write("[")
        first = True
        while rows := _fetch(cur):
            if w is not None:
                w.writerows([_text(v) for v in r] for r in rows)
                continue
            for r in rows:
                record = {c: _plain(v) for c, v in zip(cols, r, strict=True)}
                out.write(("\n " if first else ",\n ") + json.dumps(record, default=str))
                first = False
        if w is None:
            out.write("\n]\n")
    except duckdb.Error as exc:
        raise PfsError(f"query failed: {str(exc).splitlines()[0]}") from None


@cli.command("du")
@click.argument("target")
@click.option("--by", type=click.Choice(BY_CHOICES), default="parent", show_default=True)
@click.option(
    "--depth",
    type=click.IntRange(0),
    default=None,
    help="With --by parent: total per directory at this depth (default 1).",
)
@click.option("--where", help="One SQL condition over the manifest's columns restricting the rows counted.")
@click.option("--limit", type=click.IntRange(0), default=50, show_default=True, help="Groups shown (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the totals and groups as JSON (more_groups: left out).")
@cluster_options
def du_cmd(target, by, depth, where, limit, as_json, cluster, threads, progress) -> None:
    """Sizes and counts of a manifest, or of a URL (scanned first into a temporary manifest).

    Groups come biggest first (--by depth: in depth order), the first --limit of them, in a table on a
    terminal and as tab-separated lines otherwise; --json gives the same groups and more_groups.
    """
    if by == "parent" and depth is None:
        depth = 1
    check_where(where)  # refused before any scan
    from dask_pfs.remote.client import run_job
    from dask_pfs.remote.driver import JobSpec

    spec = JobSpec(f"{__name__}:du_rows", (target, by, depth, where), {"threads": threads})
    report = run_job(spec, cluster, make_reporter(progress), inputs=[target])
    rows, totals = report["rows"], report["totals"]
    shown = rows[:limit] if limit else rows
    if as_json:
        keys = ("key", "entries", "files", "bytes", "errors")
        echo_json(
            {
                "root": report["root"],
                "by": by,
                "depth": depth,
                "total": totals,
                "groups": [dict(zip(keys, r, strict=True)) for r in shown],
                "more_groups": len(rows) - len(shown),
            }
        )
        return
    _print_table(
        [by, "bytes", "size", "files", "entries", "errors"],
        [
            (
                (r[0] if r[0] not in ("", None) else "."),
                r[3],
                human_bytes(r[3]),
                f"{r[2]:,}",
                f"{r[1]:,}",
                f"{r[4]:,}",  # 0 as 0: a blank reads as unknown
            )
            for r in shown
        ],
        title=f"{report['root']} by {by}" + (f" at depth {depth}" if by == "parent" else ""),
    )
    more = len(rows) - len(shown)
    click.echo(
        f"total: {human_bytes(totals['bytes'])} in {counted(totals['files'], 'file')}, "
        f"{counted(totals['entries'], 'entry', 'entries')}"
        + (f", {totals['errors']:,} errors" if totals["errors"] else "")
        + (f" ({more:,} more groups not shown; --limit 0 shows all)" if more > 0 else "")
    )


def du_rows(
    target: str,
    by: str,
    depth: int | None,
    where: str | None,
    *,
    client: Client | None = None,
    cluster: ClusterOptions | None = None,
    threads: int | None = None,
    progress: Reporter | None = None,
) -> dict[str, Any]:
    """``pfs du``'s groups and totals: ``{"root", "rows", "totals"}`` (run where the target is seen)."""
    tmp = None
    if not has_marker(target) and not (os.path.isdir(target) and _looks_like_manifest(target)):
        from dask_pfs.scan.api import scan

        tmp = tempfile.TemporaryDirectory(prefix="pfs-du-")
        scan(target, os.path.join(tmp.name, "m"), client, cluster=cluster, threads=threads, progress=progress)
        target = os.path.join(tmp.name, "m")
    try:
        m = open_manifest(target)
        rows_sql, total_sql = du_sql(m, by, depth if by == "parent" else None, where), du_sql(m, "type", None, where)
        if where:
            probe_manifest(m, rows_sql)
        con = connect(m)
        rows = fetch_all(con, rows_sql)[1]
        total = fetch_all(con, total_sql)[1]
    finally:
        if tmp is not None:
            tmp.cleanup()
    totals = {
        "entries": sum(r[1] for r in total),
        "files": sum(r[2] for r in total),
        "bytes": sum(r[3] for r in total),
        "errors": sum(r[4] for r in total),
    }
    return {"root": m.root, "rows": rows, "totals": totals}


def _looks_like_manifest(path: str) -> bool:
    return any(n.startswith("part-") and n.endswith(".parquet") for n in os.listdir(path))


@cli.command("info")
@click.argument("manifest")
@click.option("--json", "as_json", is_flag=True)
@reader_options
def info_cmd(manifest, as_json, cluster) -> None:
    """Show a manifest's completion marker: root, counts, errors, timings."""
    from dask_pfs.remote.client import run_job
    from dask_pfs.remote.driver import JobSpec

    url, i = run_job(JobSpec(f"{__name__}:marker", (manifest,)), cluster, NullProgress(), inputs=[manifest])
    if as_json:
        echo_json(i)
        return
    c = i.get("counts", {})
    click.echo(f"manifest  {url}  (schema v{i['schema_version']}, pfs {i.get('pfs_version')})")
    click.echo(f"root      {i['root']}")
    click.echo(
        f"entries   {c.get('entries', 0):,}: {c.get('files', 0):,} files, {c.get('directories', 0):,} "
        f"directories, {c.get('symlinks', 0):,} symlinks, {c.get('other', 0):,} other"
    )
    click.echo(f"bytes     {human_bytes(c.get('bytes', 0))} ({c.get('bytes', 0):,})")
    click.echo(f"errors    {c.get('errors', 0):,}")
    for e in i.get("errors", [])[:5]:
        click.echo(f"          {e}")
    prune = (i.get("options") or {}).get("prune")
    if prune:
        rules = ", ".join(f"{k} {v}" for k, v in prune.items() if v)
        click.echo(f"pruned    {c.get('pruned', 0):,} entries left out ({rules})")
    click.echo(
        f"scanned   {i.get('started')} .. {i.get('finished')} ({i.get('seconds')} s, {i.get('tasks')} tasks, "
        f"{i.get('parts')} parts)"
    )
