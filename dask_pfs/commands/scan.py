"""``pfs scan URL -o MANIFEST_DIR``."""

from __future__ import annotations

import sys

import click

from dask_pfs.cli import cli, cluster_options, echo_json, prune_options
from dask_pfs.runtime.progress import human_bytes, make_reporter
from dask_pfs.runtime.results import counted, shown


@cli.command("scan")
@click.argument("url")
@click.option("-o", "--output", "out", required=True, help="Manifest directory to write (local path or URL).")
@click.option("--overwrite", is_flag=True, help="Replace a manifest already in the output directory.")
@click.option(
    "--resume",
    is_flag=True,
    help="Finish an interrupted scan into the output: keep its finished parts, walk only what is left.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--checksum",
    type=click.Choice(["xxh3", "sha256", "md5"]),
    help="Also read every file and store its content hash (xxh3 = xxh3-128, fast) in the checksum column.",
)
@click.option(
    "--xattrs",
    is_flag=True,
    help="Also record every entry's extended attributes (names, digests, small values) and ACL presence "
    "(S3: each object's user metadata as user.<key>).",
)
@prune_options
@cluster_options
def scan_cmd(
    url: str,
    out: str,
    overwrite: bool,
    resume: bool,
    as_json: bool,
    checksum,
    xattrs: bool,
    cluster,
    threads,
    progress,
    prune,
) -> None:
    """Scan URL (a path, a mount, s3://, sftp://...) into a Parquet manifest.

    Every finished task is journaled in OUTPUT/.pfs-journal-<id>/ (its parts and the
    directories it left); after a crash, Ctrl-C or a killed client, the same command with
    --resume scans only what is left. The journal is deleted when the scan completes
    (see docs/journal.md).
    """

    from dask_pfs.remote.client import run_job
    from dask_pfs.remote.driver import JobSpec

    spec = JobSpec(
        "scan",
        (url, out),
        {
            "threads": threads,
            "overwrite": overwrite,
            "checksum": checksum,
            "resume": resume,
            "prune": prune,
            "xattrs": xattrs,
        },
    )
    result = run_job(spec, cluster, make_reporter(progress), inputs=[url], outputs=[out])
    c = result.counts
    if as_json:
        echo_json(result.summary())
    else:
        click.echo(
            f"scanned {result.root}: {counted(c['entries'], 'entry', 'entries')} ({counted(c['files'], 'file')}, "
            f"{counted(c['directories'], 'directory', 'directories')}, {counted(c['symlinks'], 'symlink')}, "
            f"{c['other']:,} other), {human_bytes(c['bytes'])} "
            f"in {result.seconds:.1f} s"
            + (f" ({c['entries'] / result.seconds:,.0f} entries/s), " if result.seconds >= 0.01 else ", ")
            + f"{result.tasks} tasks"
            + (f" ({result.resumed} done before)" if result.resumed else "")
            + f" -> {result.manifest}"
        )
    if result.failed:
        click.echo(f"pfs: {result.failed:,} entries could not be read, e.g.:", err=True)
        for path, error in result.samples[:5]:
            click.echo(f"  {shown(path)}: {shown(error)}", err=True)
        sys.exit(1)
