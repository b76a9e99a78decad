"""``pfs verify SRC DST``: compare two trees (or manifests) by content checksums."""

from __future__ import annotations

import sys

import click

from dask_pfs.cli import cli, cluster_options, echo_json
from dask_pfs.errors import PfsError
from dask_pfs.runtime.progress import make_reporter
from dask_pfs.runtime.results import shown


@cli.command("verify")
@click.argument("paths", nargs=-1)
@click.option("--src-manifest", help="Manifest of the source (its rows are read below SRC, or its root).")
@click.option("--dst-manifest", help="Manifest of the destination (its rows are read below DST, or its root).")
@click.option("--where", help="One SQL condition over the manifest columns selecting the rows compared on both sides.")
@click.option(
    "--checksum",
    type=click.Choice(["xxh3", "sha256", "md5"]),
    default="xxh3",
    show_default=True,
    help="Content hash; manifests without it get a checksum pass.",
)
@click.option(
    "--xattrs",
    is_flag=True,
    help="Also compare extended attributes (names, value digests) and ACL presence: status 'xattrs'.",
)
@click.option("--log", "--report", "log", help="Parquet file listing missing, extra and different entries.")
@click.option("--show", type=click.IntRange(0), default=20, show_default=True, help="Differences to print.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@cluster_options
def verify_cmd(
    paths, src_manifest, dst_manifest, where, checksum, xattrs, log, show, as_json, cluster, threads, progress
) -> None:
    """Compare SRC and DST by content (checksums, never size and mtime alone).

    \b
      pfs verify /data /backup/data
      pfs verify --src-manifest M1 --dst-manifest M2      (manifests from pfs scan [--checksum])
      pfs verify --src-manifest M --where "name LIKE '%.jpg'" /scratch/images
    Missing (only in SRC), extra (only in DST) and different entries are listed as a table and
    written to a Parquet report (--log, default a pfs-verify-*.parquet in the temp dir), only
    when something differs: the summary names it (--json: "report", null when all are the same).
    Exit codes: 0 identical; 1 differences found; 2 refused; 130 interrupted.
    """
    if len(paths) > 2:
        raise PfsError("usage: pfs verify SRC DST")
    want = 2 - bool(src_manifest) - bool(dst_manifest)
    if len(paths) < want:
        raise PfsError("give SRC and DST, or --src-manifest / --dst-manifest for the missing side")
    src = dst = None
    if len(paths) == 2:
        src, dst = paths
    elif len(paths) == 1:
        if src_manifest and not dst_manifest:
            dst = paths[0]
        elif dst_manifest and not src_manifest:
            src = paths[0]
        else:
            raise PfsError("with both manifests, give no paths (or both SRC and DST)")
    from dask_pfs.remote.client import run_job
    from dask_pfs.remote.driver import JobSpec

    spec = JobSpec(
        "verify",
        (src, dst),
        {
            "src_manifest": src_manifest,
            "dst_manifest": dst_manifest,
            "where": where,
            "checksum": checksum,
            "log": log,
            "threads": threads,
            "samples": show,
            "xattrs": xattrs,
        },
    )
    inputs = [src, dst, src_manifest, dst_manifest]
    result = run_job(spec, cluster, make_reporter(progress), inputs=inputs, outputs=[log])
    c = result.counts
    if as_json:
        echo_json(result.summary())
    else:
        if result.samples and not sys.stdout.isatty():  # a pipe gets plain lines, as pfs query's tsv
            for path, status in result.samples:
                click.echo(f"{status}\t{shown(path)}")
        elif result.samples:  # rich only when there is a table to show (~40 ms of imports)
            from rich.console import Console
            from rich.table import Table

            table = Table(title="differences")
            table.add_column("status")
            table.add_column("path", overflow="fold")
            for path, status in result.samples:
                table.add_row(status, shown(path))
            Console().print(table)
        click.echo(
            f"verified {result.source} against {result.destination}: {c['same']:,} same, {c['missing']:,} missing, "
            f"{c['extra']:,} extra, {c['different']:,} different, "
            + (f"{c['xattrs']:,} with other attributes, " if xattrs else "")
            + f"{c['error']:,} unreadable "
            f"({c['files']:,} source files) in {result.seconds:.1f} s"
            + (f"; report: {result.log}" if result.log else "")
        )
    sys.exit(result.exit_code)
