"""``pfs diff OLD NEW``: added, removed and changed entries between two manifests (or a manifest and the tree)."""

from __future__ import annotations

import sys

import click

from dask_pfs.cli import cli, cluster_options, echo_json
from dask_pfs.runtime.progress import human_bytes, make_reporter
from dask_pfs.runtime.results import shown


@cli.command("diff")
@click.argument("old")
@click.argument("new")
@click.option("-o", "--output", "out", help="Parquet file for the entries that differ (sorted by path).")
@click.option("--ignore-mtime", is_flag=True, help="Files differ by size or checksum only (copies that reset mtime).")
@click.option(
    "--checksum",
    type=click.Choice(["xxh3", "sha256", "md5"]),
    help="Scan a live side with this checksum (default: the algorithm of the other side's manifest, if any).",
)
@click.option(
    "--xattrs",
    is_flag=True,
    help="Also compare extended attributes and ACL presence (a live side is scanned with them): change 'xattrs'.",
)
@click.option("--show", type=click.IntRange(0), default=20, show_default=True, help="Differences to print.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@cluster_options
def diff_cmd(old, new, out, ignore_mtime, checksum, xattrs, show, as_json, cluster, threads, progress) -> None:
    """What changed from OLD to NEW: two manifests of a tree, or a manifest and the live tree.

    \b
      pfs diff /m/project-monday /m/project-tuesday -o changes.parquet
      pfs diff /m/project-monday /lustre/project       (the tree is scanned first)
    Added, removed and changed entries (a file's size, mtime, or checksum when both sides have
    one; a symlink's target; a type) are counted, with their bytes, and written to -o as Parquet.
    A live side is scanned like the manifest on the other side was (checksum, --exclude...);
    --checksum ALG against a manifest without ALG checksums is refused (it would compare size and
    mtime only). -o must go into an existing directory. --json names the sides as given.

    Exit codes (like diff): 0 the same; 1 different; 2 trouble (bad input, or entries that
    either side could not read: those are listed as "error", never as removed or added).
    """
    from dask_pfs.remote.client import run_job
    from dask_pfs.remote.driver import JobSpec

    spec = JobSpec(
        "diff",
        (old, new, out),
        {
            "compare_mtime": not ignore_mtime,
            "checksum": checksum,
            "threads": threads,
            "samples": show,
            "xattrs": xattrs,
        },
    )
    result = run_job(spec, cluster, make_reporter(progress), inputs=[old, new], outputs=[out])
    c, b = result.counts, result.bytes
    if as_json:
        echo_json(result.summary())
    else:
        for path, change in result.samples:
            click.echo(f"{change:>8}  {shown(path)}")
        click.echo(
            f"{c['added']:,} added ({human_bytes(b['added'])}), {c['removed']:,} removed "
            f"({human_bytes(b['removed'])}), {c['changed']:,} changed ({human_bytes(b['changed'])}), "
            + (f"{c['xattrs']:,} with other attributes, " if xattrs else "")
            + f"{c['unchanged']:,} unchanged, {c['error']:,} unreadable; files {human_bytes(b['old'])} -> "
            f"{human_bytes(b['new'])}" + (f"; differences: {result.output}" if result.output else "")
        )
    sys.exit(result.exit_code)
