"""``pfs sync SRC DST``: mirror the contents of SRC into DST from two manifests and a Parquet plan."""

from __future__ import annotations

import sys
import warnings

import click

from dask_pfs.cli import cli, cluster_options, echo_json, job_cli_options, prune_options
from dask_pfs.compare.itemize import HELP as ITEMIZE_HELP
from dask_pfs.runtime.progress import ask, human_bytes, make_reporter
from dask_pfs.runtime.results import shown

SYNC_WORDS = {  # sync's own words for options it shares with copy
    "ignore_existing": "Copy only entries DST lacks: changed and type-changed ones are left as they are.",
    "resume": "Go on with an interrupted sync: its plan, and only unfinished chunks.",
}


@cli.command("sync")
@click.argument("src")
@click.argument("dst")
@click.option("--src-manifest", help="Manifest of SRC from an earlier scan (scanned into it if missing).")
@click.option("--dst-manifest", help="Manifest of DST from an earlier scan (scanned into it if missing).")
@click.option("--plan", "plan", help="Directory for the plan (default: DST_MANIFEST.plan, or a cache directory).")
@click.option(
    "--checksum",
    type=click.Choice(["xxh3", "sha256", "md5"]),
    help="Compare content hashes instead of size and mtime (reads every file on both sides).",
)
@click.option("--delete", is_flag=True, help="Remove entries of DST that are not in SRC.")
@click.option("--max-delete", metavar="N|P%", help="Refuse (exit 2) when --delete would remove more than this.")
@click.option("-n", "--dry-run", is_flag=True, help="Write and summarize the plan; change nothing.")
@click.option("--show", type=click.IntRange(0), default=20, show_default=True, help="Changes a dry run prints.")
@click.option("-i", "--itemize", is_flag=True, help=ITEMIZE_HELP)
@click.option("-y", "--yes", is_flag=True, help="Do not ask before deleting (asked only on a terminal).")
@click.option("--update-dst-manifest", is_flag=True, help="Rewrite the DST manifest from the plan (no rescan).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@job_cli_options("sync", help=SYNC_WORDS)  # the options sync shares with copy (dask_pfs.options)
@prune_options
@cluster_options
def sync_cmd(
    src,
    dst,
    src_manifest,
    dst_manifest,
    plan,
    checksum,
    delete,
    max_delete,
    dry_run,
    show,
    itemize,
    yes,
    update_dst_manifest,
    as_json,
    options,
    cluster,
    threads,
    progress,
    prune,
) -> None:
    """Make DST a mirror of the contents of SRC (like rsync -a SRC/ DST/).

    \b
    Both trees are scanned at once (or --src-manifest/--dst-manifest are used), joined on
    exact path bytes into a Parquet plan (actions: new, changed, unchanged, extra,
    type-changed, error), then new and changed entries are copied by the copy engine.
    Changed means size or mtime differ (--checksum: content); on object stores, size only;
    on POSIX destinations also a mode, an owner (as root, or --chown) or the mtime of a
    symlink or special file (rsync -a sets such metadata in place; pfs copies the entry again).
    A destination entry whose type changed (file <-> directory) is removed before the copy.
    --delete removes extras; it is switched off, with a warning, when the source scan
    reported errors (an unreadable directory is not a deleted one). --max-delete caps it.
    --exclude/--include/--max-depth/-x apply to both scans: what they leave out is neither
    copied nor deleted.

    \b
    Resume: the plan and the copy's journal (DST/.pfs-journal-<id>/, see docs/journal.md)
    survive a crash or a kill; `pfs sync SRC DST --resume` reuses the plan and copies only
    the chunks the journal lacks. A journal is deleted when its run ends without failures.

    -n lists the first --show changes (-i all of them, with or without -n) as rsync -i does.
    After a clean run only the plan stays in ~/.cache/pfs/sync-<id>/ (the default work directory).

    Differs from rsync -aHAX (README, "Where pfs differs"): times are compared in microseconds
    (a change of nanoseconds only is not seen); a destination entry named like pfs's temp or
    journal files (.*.pfs-tmp-*, .pfs-journal-*) is never deleted. Files that became hard
    links in the source are linked in the destination (rsync -aH); trees 1,000 levels deep
    and paths past 4,096 bytes are mirrored whole.

    Exit codes: 0 in sync; 1 some entries failed; 2 refused (nothing changed); 130 interrupted.
    """
    reporter = make_reporter(progress)
    confirm = None
    if not yes and sys.stdin.isatty():

        def confirm(message: str) -> bool:
            return ask(reporter, message)

    from dask_pfs.remote.client import run_job
    from dask_pfs.remote.driver import JobSpec

    spec = JobSpec(
        "sync",
        (src, dst),
        {
            "src_manifest": src_manifest,
            "dst_manifest": dst_manifest,
            "plan": plan,
            "checksum": checksum,
            "delete": delete,
            "max_delete": max_delete,
            "dry_run": dry_run,
            "update_dst_manifest": update_dst_manifest,
            "threads": threads,
            "prune": prune,
            **options,
        },
    )
    paths = [dst, src_manifest, dst_manifest, plan]
    warnings.filterwarnings("ignore", message="--delete switched off")  # said below, from the result
    result = run_job(spec, cluster, reporter, inputs=[src], outputs=paths, confirm=confirm)
    c = result.counts
    if as_json:
        echo_json(result.summary())
    else:
        if itemize or result.dry_run:
            _changes(result, None if itemize else show, not options["ignore_existing"])
        verb = "would sync" if result.dry_run else "synced"
        extra = "kept"
        if result.delete:
            extra = f"would delete {c['extra']:,}" if result.dry_run else f"deleted {c.get('deleted', 0):,}"
        click.echo(
            f"{verb} {result.source} -> {result.destination}: {c['new']:,} new, {c['changed']:,} changed"
            + (" (left: --ignore-existing)" if options["ignore_existing"] else "")
            + f", {c['type-changed']:,} type-changed, {c['unchanged']:,} unchanged, {c['extra']:,} extra ({extra})"
            + f", {c['error']:,} unreadable; {human_bytes(c['copy_bytes'])} to copy in {result.seconds:.1f} s; "
            f"plan: {result.plan}"
        )
    if result.delete_suppressed:
        click.echo(f"pfs: warning: --delete switched off: {result.delete_suppressed}", err=True)
    for path, error in result.samples[:5]:
        click.echo(f"  {shown(path)}: {shown(error)}", err=True)
    sys.exit(result.exit_code)


def _changes(result, show: int | None, replace_changed: bool) -> None:
    """The plan's change lines (``dask_pfs.compare.itemize``): the first ``show``, or all (None)."""
    import os
    from itertools import islice

    from dask_pfs.compare.itemize import itemize

    plan = os.path.join(result.plan, "plan.parquet")
    if not os.path.exists(plan):
        click.echo(f"pfs: the plan is not here to list ({plan}: written by the driver on the cluster)", err=True)
        return
    lines = itemize(plan, delete=result.delete, replace_changed=replace_changed)
    for line in lines if show is None else islice(lines, show):
        click.echo(line)
    more = sum(1 for _ in lines)
    if more:
        click.echo(f"... and {more:,} more (--itemize lists all)")
