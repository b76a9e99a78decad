"""``pfs cp SRC DST`` and ``pfs cp --manifest DIR [--where SQL] DST``."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from dask_pfs.cli import cli, cluster_options, echo_json, job_cli_options, prune_options
from dask_pfs.compare.itemize import HELP as ITEMIZE_HELP
from dask_pfs.copy import CopyResult, on_exist_of
from dask_pfs.errors import PfsError
from dask_pfs.remote.client import run_job
from dask_pfs.remote.driver import JobSpec
from dask_pfs.runtime.progress import NullProgress, Reporter, describe, human_bytes, make_reporter
from dask_pfs.runtime.results import counted, shown
from dask_pfs.runtime.verbosity import verbosity

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress


class CopyProgress:
    """A bar over bytes with files, MB/s and ETA; while the source is scanned, the scan's counters."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console  # only for a terminal: rich costs ~40 ms to import

        self.console = console or Console(stderr=True)
        self.progress: Progress | None = None

    def start(self, title: str) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.stop()
        self.t0 = time.monotonic()
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
            refresh_per_second=4,
        )
        self.progress.start()
        self.task = self.progress.add_task(title, total=None, status="starting")

    def update(self, c: dict) -> None:
        if self.progress is None:
            return
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        if "total_files" not in c:  # the scan before the copy
            self.progress.update(self.task, status=describe(c, elapsed))
            return
        status = (
            f"{c.get('files', 0) + c.get('symlinks', 0) + c.get('hardlinks', 0) + c.get('skipped', 0):,}"
            f"/{c['total_files']:,} files, {human_bytes(c.get('bytes', 0))}/{human_bytes(c['total_bytes'])}, "
            f"{c.get('bytes', 0) / elapsed / 1e6:,.1f} MB/s" + (f", {c['failed']:,} failed" if c.get("failed") else "")
        )
        self.progress.update(self.task, total=max(c["total_bytes"], 1), completed=c.get("bytes", 0), status=status)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def make_copy_reporter(enabled: bool | None) -> Reporter:
    if verbosity() != 0 or enabled is False:
        return make_reporter(enabled)  # -q: none, -v: a line per chunk
    if enabled is None and not sys.stderr.isatty():
        return NullProgress()
    return CopyProgress()


@cli.command("cp")
@click.argument("paths", nargs=-1, required=True)
@job_cli_options("copy")  # every option of the copy engine (dask_pfs.options), passed on as ``options``
@click.option("--skip-existing", is_flag=True, hidden=True, help="Deprecated: --update.")
@click.option("-n", "--dry-run", is_flag=True, help="Copy nothing: scan both sides and say what would be copied.")
@click.option("-i", "--itemize", is_flag=True, help=ITEMIZE_HELP + " Plans first (scans DST too).")
@click.option("--show", type=click.IntRange(0), default=20, show_default=True, help="Changes a dry run prints.")
@click.option("-r", "--recursive", is_flag=True, help="Accepted as cp's; pfs cp always copies whole trees.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@prune_options
@cluster_options
def cp_cmd(
    paths, options, skip_existing, dry_run, itemize, show, recursive, as_json, cluster, threads, progress, prune
) -> None:
    """Copy a tree: pfs cp SRC DST, or pfs cp --manifest DIR [--where SQL] DST.

    \b
    Like cp -r, with rsync's trailing slash:
      pfs cp a b     b is an existing directory: copies to b/a; else b becomes the copy of a
      pfs cp a/ b    copies the contents of a into b (created if missing)
      pfs cp f b     one file: into b when b is a directory, else to the name b
      pfs cp --manifest M --where "size > 1e6" b   the selected rows, below b
    SRC is scanned (pfs scan) and the copy runs from that manifest; into a new local
    destination, files are copied as the scan lists them (--no-stream, and by default when SRC or DST
    is a network or FUSE mount: after it). Files land under a
    temporary name (.NAME.pfs-tmp-<job token>) and are renamed when complete; a resumed run
    goes on with its own; pfs never removes temp files of another job (nor a user's file so named).
    Symlinks stay symlinks (-L copies what they point at), hard links within the tree stay
    linked (of files, symlinks, FIFOs and sockets), FIFOs and sockets are made again, sparse
    files stay sparse, mode and mtime are kept, and so are extended attributes
    and ACLs (--no-xattrs: not) and, as root, ownership (--no-owner: not; --chown sets it).
    Existing files: identical ones (size and mtime) are skipped; one that differs is an
    error unless --update (replace it), --ignore-existing (leave every existing file alone)
    or --overwrite (rewrite all). -n shows what would happen; -i lists each change.
    Object stores: no symlinks (skipped), big files are uploaded whole by one task.
    --where may only filter: one SQL condition over the manifest's columns, run on a DuckDB
    connection that reads nothing but the manifest; --max-entries N (or N%) caps the selection.

    Resume: finished chunks (and byte ranges of big files) are journaled in
    DST/.pfs-journal-<id>/ with the scan's manifest; after a crash, Ctrl-C or a killed
    client, the same command with --resume copies only what is left. The journal is
    deleted when a run ends without failures (see docs/journal.md); delete it by hand to
    drop an interrupted run.

    Differs from cp -a (README, "Where pfs differs"): with -L, two symlinks to one file give
    two copies (cp -aL links them) and a symlink to a directory fails that entry (cp -L copies
    the directory). Depth and path length are bounded only by the file system: a tree 1,000
    levels deep and paths past 4,096 bytes copy whole (every entry reached relative to its open
    parent directory), where cp -a itself fails past 4,096 bytes.

    Exit codes: 0 done; 1 some files failed (see the failure log); 2 refused, nothing copied;
    130 interrupted (the journal is kept for --resume).
    """
    if skip_existing:
        click.echo("pfs: warning: --skip-existing is deprecated, use --update (same meaning)", err=True)
        options["update"] = True
    manifest, where, max_entries = options["manifest"], options["where"], options["max_entries"]
    if manifest:
        if len(paths) != 1:
            raise PfsError("with --manifest give only DST")
        src, dst = None, paths[0]
    else:
        if len(paths) != 2:
            raise PfsError("usage: pfs cp SRC DST (or pfs cp --manifest DIR DST)")
        src, dst = paths
    on_exist = on_exist_of(options["overwrite"], options["update"], options["ignore_existing"])
    if dry_run or itemize:
        _preview(src, dst, manifest, where, max_entries, on_exist, None if itemize else show, prune,
                 cluster, threads, progress, as_json and dry_run, dry_run)  # fmt: skip
        if dry_run:
            return
    if options["split_size"]:
        options["split_size"] = max(options["split_size"], 1024)
    spec = JobSpec("copy", (src, dst), {**options, "threads": threads, "prune": prune})
    outputs = [dst, options["manifest_out"], options["log"]]
    result: CopyResult = run_job(spec, cluster, make_copy_reporter(progress), inputs=[src, manifest], outputs=outputs)
    c = result.counts
    if as_json:
        echo_json(result.summary())
    else:
        click.echo(
            f"copied {result.source} -> {result.destination}: {counted(c['files'], 'file')}, "
            f"{human_bytes(c['bytes'])}, "
            f"{counted(c['dirs'], 'directory', 'directories')} made"
            + (f" ({c['dirs_existing']:,} there already)" if c.get("dirs_existing") else "")
            + f", {counted(c['symlinks'], 'symlink')}, "
            f"{counted(c['hardlinks'], 'hard link')}, "
            f"{c['skipped']:,} skipped in {result.seconds:.1f} s "
            f"({c['bytes'] / max(result.seconds, 1e-9) / 1e6:,.1f} MB/s, {result.tasks} tasks"
            + (f", {result.resumed} chunks done before" if result.resumed else "")
            + ")"
        )
    if result.failed:
        click.echo(f"pfs: {result.failed:,} entries failed (log: {result.log}), e.g.:", err=True)
        for path, error in result.samples[:5]:
            click.echo(f"  {shown(path)}: {shown(error)}", err=True)
        sys.exit(1)


WHAT_CHANGED_DOES = {
    "error": "would fail: exists and differs, --update replaces",
    "skip": "would be replaced",
    "overwrite": "would be replaced",
    "ignore": "left alone: --ignore-existing",
}


def _preview(src, dst, manifest, where, max_entries, on_exist, show, prune, cluster, threads, progress, as_json,
             summary):  # fmt: skip
    """``--dry-run``/``--itemize``: the plan of the copy (``dask_pfs.compare.preview``): change lines, then
    the counts."""
    spec = JobSpec(
        "dask_pfs.compare.preview:preview_copy",
        (src, dst),
        {"on_exist": on_exist, "manifest": manifest, "where": where, "max_entries": max_entries, "show": show,
         "prune": prune, "threads": threads},
    )  # fmt: skip
    p = run_job(spec, cluster, make_copy_reporter(progress), inputs=[src, manifest], outputs=[dst])
    if as_json:
        echo_json(p)
        return
    for line in p["lines"]:
        click.echo(line)
    if p["more"]:
        click.echo(f"... and {p['more']:,} more (--itemize lists all)")
    c = p["counts"]
    if "selected" in c and summary:
        click.echo(f"would copy {c['selected']:,} selected rows of {p['source']} below {p['destination']}")
        return
    if summary:
        click.echo(
            f"would copy {p['source']} -> {p['destination']}: {c['new']:,} new, {c['changed']:,} changed "
            f"({WHAT_CHANGED_DOES[on_exist]}), {c['type-changed']:,} type-changed, {c['unchanged']:,} identical "
            + ("(rewritten: --overwrite)" if on_exist == "overwrite" else "(skipped)")
            + (
                f", {counted(c['dirs-changed'], 'directory', 'directories')} whose times or mode are set"
                if c.get("dirs-changed")
                else ""
            )
            + f", {c['error']:,} unreadable; {human_bytes(c['copy_bytes'])} in new and changed files"
        )
