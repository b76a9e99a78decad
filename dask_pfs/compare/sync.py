"""``sync``: make DST a mirror of the contents of SRC, from two manifests and a plan.

A job of jobs: it plans, then runs the ``remove`` and ``copy`` drivers on its own client (the
only driver that imports others; ``.importlinter`` keeps it the only one).

1. Scan both sides at once on one cluster (or take manifests from earlier scans);
2. plan (``dask_pfs.compare.plan``): join them on exact path bytes in DuckDB, one action per path;
3. remove destination entries whose type changed (and what is below them) through the remove
   engine, which re-checks every entry against the destination manifest first;
4. with ``delete``, remove the extras through the remove engine (before the copy, whose last
   pass sets the times of the directories it touched, and of changed ones, from the source);
5. copy new, changed and type-changed entries through the copy engine (from the source
   manifest, filtered by the plan; journaled, so ``resume`` goes on after a crash).

Deleting is switched off (with a warning) when the source scan reported errors: an unreadable
source directory must never look like "deleted at the source".  ``max_delete`` refuses a plan
that would delete more than N entries (or P% of the destination) before anything is changed.

``update_dst_manifest`` rewrites the destination manifest from the plan instead of rescanning
it, so the next sync of a tree with few changes costs one scan of the source.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dask_pfs.clusters.client import ClusterOptions
from dask_pfs.compare.plan import (
    COPY_ACTIONS,
    COPY_CONDITION,
    Plan,
    check_plan,
    count,
    count_new_bytes,
    emptied_dirs,
    extras_removed_first,
    read_plan,
    update_manifest,
    write_plan,
)
from dask_pfs.compare.sides import Side, manifest_side, scan_sides, with_checksums
from dask_pfs.copy import MiB, copy
from dask_pfs.copy.owners import parse_chown
from dask_pfs.errors import PfsError
from dask_pfs.guard import LATER, check_target
from dask_pfs.manifests.caps import Cap
from dask_pfs.manifests.manifest import (
    has_marker,
    prepare_output,
    write_marker,
)
from dask_pfs.options import job_options, named
from dask_pfs.remove.api import remove
from dask_pfs.runtime.journals import ident, private_cache
from dask_pfs.runtime.locking import writer_lock
from dask_pfs.runtime.progress import Reporter, default_reporter
from dask_pfs.runtime.results import JobResult
from dask_pfs.runtime.submitter import job_client
from dask_pfs.scan.engine import check_checksum
from dask_pfs.urls import Location, is_dir, resolve, root_times_from
from operators.checksum import DEFAULT
from operators.copy.spec import may_chown
from operators.scan.prune import Prune
from operators.xattrs import readable

if TYPE_CHECKING:
    from distributed import Client

    from operators.ratelimit import Limits


@dataclass(kw_only=True)
class SyncResult(JobResult):
    """``counts``: the plan's actions (new, changed, type-changed, unchanged, extra, error) and what
    was done (copied_files, copied_bytes, deleted); ``failed``: entries that failed, and entries
    that could not be read at either side (so they were not synced)."""

    source: str
    destination: str
    plan: str
    dry_run: bool
    delete: bool  # extras were (or, for a dry run, would be) deleted
    delete_suppressed: str | None = None  # why --delete was switched off
    copy: dict | None = None  # the copy engine's summary
    removed: dict | None = None  # remove engine summaries: "first" (type-changed), "extras"
    dst_manifest: str | None = None
    src_manifest: str | None = None

    @property
    def failure_samples(self) -> list[tuple[str, str]]:
        """``samples``, by their name in sync's first API."""
        return self.samples


def default_work_dir(src_url: str, dst_url: str) -> str:
    """Where manifests and the plan of a sync go unless told: one stable place per (SRC, DST)."""
    return private_cache(f"sync-{ident(src_url, dst_url)}")


@job_options("exclude", "include", "max_depth", "one_file_system", "max_ops_per_second", "max_bandwidth")
def sync(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    client: Client | None = None,
    *,
    src_manifest: str | os.PathLike | None = None,
    dst_manifest: str | os.PathLike | None = None,
    plan: str | os.PathLike | None = None,
    checksum: str | bool | None = None,
    delete: bool = False,
    max_delete: str | int | None = None,
    dry_run: bool = False,
    update_dst_manifest: bool = False,
    ignore_existing: bool = False,
    resume: bool = False,
    confirm: Callable[[str], bool] | None = None,
    cluster: ClusterOptions | None = None,
    threads: int | None = None,
    limits: Limits | None = None,
    progress: Reporter | None = None,
    storage_options: dict | None = None,
    dst_storage_options: dict | None = None,
    chunk_files: int = 500,
    chunk_bytes: int = 256 * MiB,
    split_size: int | None = None,
    prune: Prune | None = None,
    allow_other_root: bool = False,
    xattrs: bool = True,
    owner: bool | None = None,
    chown: str | None = None,
    numeric_ids: bool = False,
) -> SyncResult:
    """Make ``dst`` hold exactly the contents of ``src`` (see the module docstring).

    ``checksum`` (True or an algorithm) compares content hashes instead of size and mtime.
    ``confirm(message)`` is asked before anything is deleted (not for a dry run).  Raises
    :class:`PfsError` (exit code 2, nothing changed) for refused requests, ``max_delete``
    exceeded and a declined confirmation.  ``prune`` applies to both scans (``operators.scan.prune``):
    what it leaves out is neither copied nor deleted.  ``ignore_existing`` copies only new entries:
    changed and type-changed destination entries are left as they are.  ``allow_other_root``: act
    with manifests whose roots are not the trees they were scanned from (``dask_pfs.manifests.root``).
    ``limits``: job-wide caps on operations and bytes per second (else the cluster's).
    ``xattrs``, ``owner``, ``chown``, ``numeric_ids``: what the copy keeps (``dask_pfs.copy.copy``); ``xattrs``
    also compares attributes and ACL presence (local, mounted, S3 metadata; manifests without them: logged).

    After a run (not a dry run) without failures only the plan stays in the default work directory
    (``~/.cache/pfs/sync-<id>/``): the manifests scanned there are removed (the destination's is
    kept with ``update_dst_manifest``, which the next sync reads instead of rescanning).
    """
    t0 = time.monotonic()
    progress = default_reporter(progress)
    s_loc = resolve(os.fspath(src), storage_options)
    d_loc = resolve(os.fspath(dst), dst_storage_options)
    # what --delete removes is weighed row by row when it is removed (dask_pfs.remove): here, the trees
    check_target(d_loc, action="sync", deletes=delete, sources=(s_loc,), reach=LATER)
    algorithm = check_checksum(DEFAULT if checksum is True else str(checksum)) if checksum else None
    xattrs = xattrs and readable(s_loc.protocol) and readable(d_loc.protocol)  # S3: metadata (operators.objmeta)
    cap = Cap.parse(max_delete, named("max_delete"))
    work = default_work_dir(s_loc.url, d_loc.url)
    src_m = os.fspath(src_manifest) if src_manifest else os.path.join(work, "src-manifest")
    dst_m = os.fspath(dst_manifest) if dst_manifest else os.path.join(work, "dst-manifest")
    plan_dir = (
        os.fspath(plan) if plan else (f"{dst_m.rstrip('/')}.plan" if dst_manifest else os.path.join(work, "plan"))
    )
    with writer_lock(d_loc, "sync into"), job_client(client, cluster, threads, limits, here=(s_loc, d_loc)) as client:
        p = read_plan(plan_dir) if resume else None
        if p is not None:
            asked = {"algorithm": algorithm, "prune": _pruned(prune), "preserve_xattrs": xattrs}
            check_plan(p, s_loc, d_loc, src_m, dst_m, asked)
            sides = [manifest_side(p.info["src_manifest"], s_loc.url, storage_options)]
            sides.append(manifest_side(p.info["dst_manifest"], d_loc.url, dst_storage_options))
            sides[0].scanned_errors = int(p.info.get("src_errors", 0))
        else:
            sides = _sides(
                client,
                s_loc,
                d_loc,
                src_m,
                dst_m,
                bool(src_manifest),
                bool(dst_manifest),
                algorithm,
                threads,
                progress,
                storage_options,
                dst_storage_options,
                prune,
                xattrs,
            )
            if algorithm:
                sides = [
                    with_checksums(client, side, None, algorithm, f"{m.rstrip('/')}-sums", progress, allow_other_root)
                    for side, m in zip(sides, (src_m, dst_m), strict=True)
                ]
            info = {
                "src": s_loc.url,
                "dst": d_loc.url,
                "src_manifest": sides[0].manifest.url,
                "dst_manifest": sides[1].manifest.url,
                "src_errors": sides[0].scanned_errors,
                "algorithm": algorithm,
                "prune": _pruned(prune),
                "preserve_xattrs": xattrs,
            }
            p = write_plan(
                sides[0].manifest,
                sides[1].manifest,
                plan_dir,
                checksum=bool(algorithm),
                compare_mtime=not sides[1].flat,
                info=info,
                xattrs=xattrs and _attributes_known(sides),
                owners=_owners(owner, chown),
            )
        result = _act(
            client, p, sides, s_loc, d_loc, delete=delete, cap=cap, dry_run=dry_run,
            update=update_dst_manifest, resume=resume, confirm=confirm, threads=threads, progress=progress,
            limits=(chunk_files, chunk_bytes, split_size), t0=t0, other_root=allow_other_root,
            ignore_existing=ignore_existing,
            keep={"xattrs": xattrs, "owner": owner, "chown": chown, "numeric_ids": numeric_ids},
        )  # fmt: skip
    if not result.failed and not dry_run:  # a dry run's plan stays resumable (--resume reads its manifests)
        _drop_scans(result, None if src_manifest else src_m, None if dst_manifest or update_dst_manifest else dst_m)
    return result


def _owners(owner: bool | None, chown: str | None) -> tuple[int | None, int | None] | None:
    """The owner and group the copy gives every entry, for the plan to compare (``plan.plan_sql``): None
    when it keeps no owners (not root, ``--no-owner``); a None part: the source entry's own, else ``--chown``'s."""
    if not (owner if owner is not None else may_chown()):
        return None
    return parse_chown(chown)


def _drop_scans(result: SyncResult, src_m: str | None, dst_m: str | None) -> None:
    """Remove the manifests a clean run scanned into its work directory (and their checksum passes):
    the plan is what stays; the summary stops naming them."""
    for m, attr in ((src_m, "src_manifest"), (dst_m, "dst_manifest")):
        if m is None or "://" in m:
            continue
        for path in (m, f"{m.rstrip('/')}-sums"):
            shutil.rmtree(path, ignore_errors=True)
        setattr(result, attr, None)


def _sides(
    client: Client,
    s_loc: Location,
    d_loc: Location,
    src_m: str,
    dst_m: str,
    src_given: bool,
    dst_given: bool,
    algorithm: str | None,
    threads: int | None,
    progress: Reporter,
    so: dict | None,
    dso: dict | None,
    prune: Prune | None = None,
    xattrs: bool = False,
) -> list[Side]:
    """Both manifests: complete ones given by the user are used as they are, the rest are scanned
    (with their attributes when ``xattrs``)."""
    if not is_dir(s_loc):
        raise PfsError(f"{s_loc.url}: no such directory")
    sides: list[Side | None] = [None, None]
    jobs: list[tuple[str, str, dict | None] | None] = [None, None]
    for i, (loc, m, given, opts) in enumerate(((s_loc, src_m, src_given, so), (d_loc, dst_m, dst_given, dso))):
        if given and has_marker(m):
            sides[i] = manifest_side(m, loc.url, opts)
        elif i == 1 and not is_dir(loc):
            prepare_output(m, True)  # no destination yet: an empty manifest
            write_marker(m, {"root": loc.url, "counts": {"entries": 0, "errors": 0}})
            sides[i] = manifest_side(m, loc.url, opts)
        else:
            jobs[i] = (loc.url, m, opts)
    return scan_sides(client, sides, jobs, algorithm, threads, prune=prune, xattrs=xattrs)


# the copy engine keeps attributes (issue 31's preservation): only then are the copied rows' attributes the
# destination's, for an updated destination manifest
_COPY_KEEPS_XATTRS = "xattrs" in inspect.signature(copy).parameters


def _attributes_known(sides: list[Side]) -> bool:
    """Whether both sides recorded attributes (an empty destination has none to compare)."""
    unknown = [
        s.manifest.url
        for s in sides
        if not s.manifest.has_xattrs and (s.manifest.info.get("counts") or {}).get("entries")
    ]
    if unknown:
        logging.getLogger("pfs").warning(
            "%s: scanned without %s: attributes not compared", ", ".join(unknown), named("xattrs", True)
        )
    return not unknown


def _act(client, p: Plan, sides, s_loc, d_loc, *, delete, cap, dry_run, update, resume, confirm, threads, progress,
         limits, t0, other_root, ignore_existing=False, keep=None) -> SyncResult:  # fmt: skip
    """``keep``: what the copy keeps besides contents (``xattrs``, ``owner``, ... of ``dask_pfs.copy.copy``)."""
    c = dict(p.counts)
    if ignore_existing:  # changed and type-changed entries stay as they are
        c["remove_first"] = 0  # a type-changed directory stays, with what is below it
        c["copy_bytes"] = count_new_bytes(p)
    result = SyncResult(
        source=s_loc.url,
        destination=d_loc.url,
        plan=p.path,
        counts=c,
        failed=c.get("error", 0),
        dry_run=dry_run,
        delete=delete,
        src_manifest=sides[0].manifest.url,
        dst_manifest=sides[1].manifest.url,
    )
    if delete and sides[0].scanned_errors:
        result.delete = False
        result.delete_suppressed = (
            f"the source scan reported {sides[0].scanned_errors} errors: unreadable entries must not "
            "look deleted at the source; nothing is deleted (fix the errors and sync again)"
        )
        warnings.warn(f"{named('delete', True)} switched off: {result.delete_suppressed}", stacklevel=3)
    extras = c["extra"] - extras_removed_first(p)
    if result.delete and extras and cap is not None:
        total = c["extra"] + c["unchanged"] + c["changed"] + c["type-changed"]
        cap.check(extras, total, "the sync would delete", "destination entries")
    to_remove = c["remove_first"] + (extras if result.delete else 0)
    if dry_run:
        result.seconds = round(time.monotonic() - t0, 3)
        return result
    if to_remove and confirm is not None and not confirm(f"Delete {to_remove:,} entries under {d_loc.url}?"):
        raise PfsError("not confirmed: nothing changed")
    dst_m = sides[1].manifest.url
    removed: dict = {}

    def removal(key: str, condition: str):
        """The destination manifest's rows the plan marks (``condition``) removed by the remove driver."""
        r = remove(
            manifest=dst_m,
            where=p.where(condition),
            client=client,
            threads=threads,
            progress=progress,
            storage_options=sides[1].storage_options or None,
            allow_other_root=other_root,
        )
        removed[key] = r.summary()
        result.failed += r.failed
        result.resumed += r.resumed
        return r

    if c["remove_first"]:
        removal("first", "remove_first")
    if result.delete and extras:
        r = removal("extras", "action = 'extra' AND NOT remove_first")
        c["deleted"] = r.counts["removed_files"] + r.counts["removed_dirs"]
    copied = None
    actions: tuple[str, ...] = ("new",) if ignore_existing else COPY_ACTIONS
    condition = "action = 'new'" if ignore_existing else COPY_CONDITION
    if removed:  # directories that lost entries get their source mtime back
        emptied = emptied_dirs(p, result.delete)
        if count(p, emptied):
            condition = f"{condition} OR {emptied}"
            actions = ()
    if not actions or any(c[a] for a in actions):
        files, nbytes, split = limits
        copied = copy(
            sides[0].root,
            d_loc.url,
            manifest=sides[0].manifest.url,
            where=p.where(condition),
            client=client,
            overwrite=not ignore_existing,
            ignore_existing=ignore_existing,
            threads=threads,
            progress=progress,
            chunk_files=files,
            chunk_bytes=nbytes,
            split_size=split,
            storage_options=sides[0].storage_options or None,
            dst_storage_options=sides[1].storage_options or None,
            resume=resume,
            allow_other_root=other_root,
            **(keep or {}),
        )
        result.copy = copied.summary()
        result.failed += copied.failed
        result.resumed += copied.resumed
        result.samples.extend(copied.samples[:10])
        c["copied_files"] = copied.counts["files"]
        c["copied_bytes"] = copied.counts["bytes"]
    result.removed = removed or None
    failures = result.failed - c.get("error", 0)
    if not failures:
        root_times_from(s_loc, d_loc)  # the root is not a row: its time moved with what changed in it
    if update:
        if failures:
            warnings.warn("the destination manifest was not updated: the sync had failures", stacklevel=3)
        else:
            update_manifest(
                p,
                sides[0].manifest.url,
                dst_m,
                d_loc.url,
                deleted=result.delete,
                xattrs=bool(p.info.get("xattrs")) and _COPY_KEEPS_XATTRS,
            )
            c["dst_manifest_updated"] = True
    result.seconds = round(time.monotonic() - t0, 3)
    return result


def _pruned(prune: Prune | None) -> dict | None:
    return prune.describe() if prune is not None else None


__all__ = ["SyncResult", "default_work_dir", "sync"]
