"""``pfs rm URL`` and ``pfs rm --manifest DIR [--where SQL]``: a thin layer over :func:`dask_pfs.remove`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from dask_pfs.cli import cli, cluster_options, echo_json, prune_options
from dask_pfs.errors import PfsError
from dask_pfs.runtime.progress import ask, human_bytes, make_reporter
from dask_pfs.runtime.results import shown

if TYPE_CHECKING:
    from dask_pfs.remove.api import RemoveResult


@cli.command("rm")
@click.argument("url", required=False)
@click.option("--manifest", help="Remove exactly the entries of this manifest (directory or URL).")
@click.option(
    "--where",
    help="With --manifest: one SQL condition over the manifest's columns selecting the rows, "
    "e.g. \"name LIKE '%.tmp'\" (no statements, no subqueries).",
)
@click.option(
    "--max-entries",
    metavar="N|P%",
    help="With --manifest: refuse (exit 2, nothing removed) when the selection has more rows than this.",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation (asked only on a terminal).")
@click.option(
    "--force",
    is_flag=True,
    help="Allow removing /, your home directory (or entries in it), a whole mount point or bucket, whatever --where.",
)
@click.option("-n", "--dry-run", is_flag=True, help="Remove nothing; print what would go and the totals.")
@click.option("--show", type=click.IntRange(0), default=20, show_default=True, help="Paths a dry run prints.")
@click.option(
    "--ignore-changes",
    is_flag=True,
    help="Remove manifest entries even if they changed since the scan (type, size, mtime, inode, ctime or ETag).",
)
@click.option("--log", help="Parquet log of failed and skipped entries (default: MANIFEST/_rm-failures.parquet).")
@click.option("--chunk-files", type=click.IntRange(1), default=2000, show_default=True, help="Manifest rows per task.")
@click.option("--resume", is_flag=True, help="Go on with an interrupted run: skip the chunks its journal lists.")
@click.option("--journal", help="Directory for the journal (default: MANIFEST/.pfs-journal-<id>, or the cache).")
@click.option(
    "--allow-other-root",
    is_flag=True,
    help="Use a manifest whose root is not the tree it was scanned from (device, inode or file system id "
    "differ, or its marker records none).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@prune_options
@cluster_options
def rm_cmd(
    url,
    manifest,
    where,
    max_entries,
    yes,
    force,
    dry_run,
    show,
    ignore_changes,
    log,
    chunk_files,
    resume,
    journal,
    as_json,
    allow_other_root,
    cluster,
    threads,
    progress,
    prune,
) -> None:
    """Remove a tree (URL), or the entries of a manifest selected by --where.

    Symlinks are never followed; nothing outside the tree (or the manifest's root) is touched.
    A manifest entry is removed only if it is still the one the scan saw (same type, size,
    mtime, inode and ctime; on S3, GCS and Azure the size and last-modified time, to the
    second; else skipped as changed), and a manifest whose rows disagree with
    their own paths (name, parent, depth) is refused as damaged.
    --where may only filter: it is parsed as one SQL condition over the manifest's columns
    and runs on a DuckDB connection that reads nothing but the manifest. --max-entries N (or
    N% of the manifest's rows) refuses a bigger selection, dry runs included.

    \b
    Resume: finished chunks are journaled (with --manifest: in MANIFEST/.pfs-journal-<id>/,
    with the selected rows frozen at the start; a tree: in ~/.cache/pfs/journals/<id>/).
    After a crash, Ctrl-C or a killed client, the same command with --resume skips what is
    done. The journal is deleted when a run ends without failures (docs/journal.md).

    Exit codes: 0 done, 1 some entries could not be removed, 2 refused (nothing removed).
    """
    if url is None and manifest is None:
        raise PfsError("give a URL to remove, or --manifest DIR")
    reporter = make_reporter(progress)
    confirm = None
    if not yes and sys.stdin.isatty():

        def confirm(message: str) -> bool:
            return ask(reporter, message)

    from dask_pfs.remote.client import run_job
    from dask_pfs.remote.driver import JobSpec

    spec = JobSpec(
        "remove",
        (url,),
        {
            "manifest": manifest,
            "where": where,
            "max_entries": max_entries,
            "dry_run": dry_run,
            "force": force,
            "ignore_changes": ignore_changes,
            "threads": threads,
            "log": log,
            "show": show,
            "resume": resume,
            "journal": journal,
            "chunk_files": chunk_files,
            "prune": prune,
            "allow_other_root": allow_other_root,
        },
    )
    result: RemoveResult = run_job(
        spec, cluster, reporter, inputs=[url, manifest], outputs=[log, journal], confirm=confirm
    )
    if as_json:
        echo_json(result.summary())
    else:
        _print(result)
    if result.exit_code:
        sys.exit(result.exit_code)


def _print(r: RemoveResult) -> None:
    c = r.counts
    if r.dry_run:
        for path in r.would_remove:
            click.echo(path)
        more = c["removed_files"] + c["removed_dirs"] - len(r.would_remove)
        if more > 0:
            click.echo(f"... and {more:,} more")
    verb = "would remove" if r.dry_run else "removed"
    skipped = []
    for label, n in (
        ("changed", c["skipped_changed"]),
        ("missing", c["skipped_missing"]),
        ("non-empty directories", c["skipped_nonempty"]),
        ("rows with scan errors", c["skipped_error"]),
    ):
        if n:
            skipped.append(f"{n:,} {label}")
    click.echo(
        f"{verb} {c['removed_files']:,} entries and {c['removed_dirs']:,} directories ({human_bytes(c['bytes'])}) "
        f"under {r.target} in {r.seconds:.1f} s"
        + (f"; skipped {', '.join(skipped)}" if skipped else "")
        + (f"; {r.failed:,} failed" if r.failed else "")
        + (f"; {r.resumed:,} chunks done before" if r.resumed else "")
    )
    for path, problem in r.samples[:5]:
        click.echo(f"  {shown(path)}: {shown(problem)}", err=True)
    if r.log:
        click.echo(f"log of failed and skipped entries: {r.log}", err=True)
    if r.journal:
        click.echo(f"journal kept for --resume: {r.journal}", err=True)
