"""New data lands in an instrument's drop directory: archive it in parallel parts.

Two DAGs share one fan-out pattern: ``PfsManifest(manifest).partitions(...)`` splits the rows a
where-clause selects into path ranges (small dicts ``{"manifest", "where"}``), and
``PfsCopyOperator.partial(...).expand_kwargs(parts)`` maps one copy over each.  The XCom holds
those few dicts; file lists stay in the Parquet manifest.

* ``pfs_archive_landed`` is scheduled by an ``AssetWatcher``: ``PfsTreeChangedTrigger`` stats the
  landing tree's directories against the last manifest every ``PFS_WATCH_SECONDS`` and fires
  when entries appear or go (no listing, no scan).  The DAG rescans the landing tree (the new
  manifest becomes the watcher's baseline), copies the files in parts of at most ``max_entries``,
  then verifies the archive against the manifest by checksums.
* ``pfs_wait_for_manifest`` takes a manifest written outside Airflow (a Slurm scan job, another
  team's pipeline): the deferrable ``PfsManifestSensor`` waits in the triggerer until it is
  complete and its ``where`` selects at least ``min_count`` rows, then the same fan-out in
  ``parts`` parts.

Places come from the environment (and the DAG params): PFS_LANDING, PFS_LANDING_MANIFEST,
PFS_ARCHIVE.  Run by hand (``airflow db migrate`` once first, which makes Airflow's metadata database):
  airflow dags test pfs_wait_for_manifest -c '{"manifest": "/lustre/manifests/run42", "min_count": 1000}'
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher, Param, task

from airflow_pfs.data_triggers import PfsTreeChangedTrigger
from airflow_pfs.manifests import PfsManifest
from airflow_pfs.operators import PfsCopyOperator, PfsScanOperator, PfsVerifyOperator
from airflow_pfs.sensors import PfsManifestSensor

LANDING = os.environ.get("PFS_LANDING", "/data/landing")
MANIFEST = os.environ.get("PFS_LANDING_MANIFEST", "/data/pfs-manifests/landing")
ARCHIVE = os.environ.get("PFS_ARCHIVE", "/archive/landing")
WATCH_SECONDS = float(os.environ.get("PFS_WATCH_SECONDS", "60"))
POKE_SECONDS = float(os.environ.get("PFS_POKE_SECONDS", "60"))
FILES = "type = 'file'"
# What a run may touch.  A run's conf fills the paths below, so the DAG author pins where they may point:
# every pfs task gets allowed_roots (a path, after resolving '..' and symbolic links, must be one of them or
# lie below one, or the task fails before any I/O), and each path Param must be absolute, without '.' or '..'
# parts.  PFS_EXAMPLE_ROOTS (paths separated by ':') replaces the roots, to try the example elsewhere.
ROOTS = os.environ.get("PFS_EXAMPLE_ROOTS", ":".join([LANDING, os.path.dirname(MANIFEST), ARCHIVE])).split(":")
PATH = r"^/(?!(.*/)?[.]{1,2}(/|$)).*$"  # an absolute path without '.' or '..' parts (a Param's pattern)

LANDED = Asset(
    name="pfs_landing",
    uri=f"file://{LANDING}",
    watchers=[AssetWatcher(name="pfs_landing_tree", trigger=PfsTreeChangedTrigger(MANIFEST, WATCH_SECONDS))],
)
ARCHIVED = Asset(name="pfs_archive", uri=f"file://{ARCHIVE}")
START = pendulum.datetime(2026, 1, 1, tz="UTC")


@task
def split(manifest: dict, where: str | None = None, n: int | str | None = None, max_entries: int | str | None = None):
    """Path ranges of the selected rows for ``expand_kwargs``: ``n`` parts, or parts of at most
    ``max_entries`` rows (either may come from a template, hence the int())."""
    parts = PfsManifest(manifest, ROOTS).partitions(
        where=where or None,
        n=int(n) if n not in (None, "") else None,
        max_entries=int(max_entries) if max_entries not in (None, "") else None,
    )
    print(f"{len(parts)} parts: {[p['where'] for p in parts]}")
    return parts


with DAG(
    "pfs_archive_landed",
    schedule=[LANDED],
    start_date=START,
    catchup=False,
    params={
        "landing": Param(LANDING, type="string", pattern=PATH, description="the watched tree"),
        "manifest": Param(MANIFEST, type="string", pattern=PATH, description="its manifest (the watcher's baseline)"),
        "archive": Param(ARCHIVE, type="string", pattern=PATH, description="where landed files are archived"),
        "max_entries": Param(50_000, type="integer", minimum=1, description="files per copy task"),
    },
    tags=["pfs", "example"],
) as archive_landed:
    scan = PfsScanOperator(
        task_id="scan_landing",
        src="{{ params.landing }}",
        manifest="{{ params.manifest }}",
        overwrite=True,
        allowed_roots=ROOTS,
    )
    parts = split(scan.output, FILES, max_entries="{{ params.max_entries }}")
    copies = PfsCopyOperator.partial(
        task_id="archive_part",
        dst="{{ params.archive }}",
        update=True,  # identical files archived by an earlier run are skipped; a changed one is replaced
        allowed_roots=ROOTS,
    ).expand_kwargs(parts)
    verify = PfsVerifyOperator(
        task_id="verify_archive",
        src_manifest=scan.output,
        dst="{{ params.archive }}",
        where=FILES,
        outlets=[ARCHIVED],
        allowed_roots=ROOTS,
    )
    copies >> verify


with DAG(
    "pfs_wait_for_manifest",
    schedule=None,
    start_date=START,
    catchup=False,
    params={
        "manifest": Param(MANIFEST, type="string", pattern=PATH, description="a manifest another system writes"),
        "where": Param(FILES, type="string", description="rows to wait for and to copy"),
        "min_count": Param(1, type="integer", minimum=0, description="wait until where selects this many rows"),
        "archive": Param(ARCHIVE, type="string", pattern=PATH),
        "parts": Param(4, type="integer", minimum=1, maximum=1024, description="copy tasks (core.max_map_length caps)"),
    },
    tags=["pfs", "example"],
) as wait_for_manifest:
    ready = PfsManifestSensor(
        task_id="wait_for_manifest",
        manifest="{{ params.manifest }}",
        where="{{ params.where }}",
        min_count="{{ params.min_count }}",
        deferrable=True,  # the wait runs in the triggerer, not in a worker slot
        poke_interval=POKE_SECONDS,
        timeout=24 * 3600,
        allowed_roots=ROOTS,
    )
    selected = split.override(task_id="split_selection")(ready.output, "{{ params.where }}", n="{{ params.parts }}")
    # update: identical files already archived are skipped, changed ones replaced
    PfsCopyOperator.partial(
        task_id="copy_part", dst="{{ params.archive }}", update=True, allowed_roots=ROOTS
    ).expand_kwargs(selected)
