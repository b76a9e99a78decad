"""``pfs cp --dry-run`` / ``--itemize``: what a copy would do, planned like a sync, nothing written.

The copy's target (``cp -r`` semantics, ``dask_pfs.copy.target``) is resolved as the copy would,
then both sides are scanned into a temporary directory and joined into a sync plan
(``dask_pfs.compare.plan``): ``new`` entries would be copied, ``unchanged`` ones skipped, and a ``changed``
file would fail (default), be replaced (``--update``, ``--overwrite``) or be left alone
(``--ignore-existing``).  With ``--manifest`` the selected rows are counted (no scan of DST).
"""

from __future__ import annotations

import os
import tempfile
from itertools import islice
from typing import TYPE_CHECKING, Any

from dask_pfs.clusters.client import ClusterOptions
from dask_pfs.compare.itemize import itemize
from dask_pfs.compare.plan import count, read_plan
from dask_pfs.compare.sync import sync
from dask_pfs.copy.target import live_target
from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import Selection, open_manifest, selection_options
from dask_pfs.options import named
from dask_pfs.runtime.progress import Reporter
from dask_pfs.urls import probe
from operators.scan.prune import Prune

if TYPE_CHECKING:
    from distributed import Client


def preview_copy(
    src: str | None,
    dst: str,
    *,
    on_exist: str = "error",
    manifest: str | None = None,
    where: str | None = None,
    max_entries: int | str | None = None,
    show: int | None = 20,
    prune: Prune | None = None,
    client: Client | None = None,
    cluster: ClusterOptions | None = None,
    threads: int | None = None,
    progress: Reporter | None = None,
) -> dict[str, Any]:
    """``{"source", "destination", "counts", "lines", "more"}``: the plan's counts and its first
    ``show`` change lines (None: all), ``more`` the lines left out."""
    if manifest is not None:
        m = open_manifest(manifest)
        selection, cap = selection_options(manifest, where, max_entries)
        with Selection(m, selection) as sel:
            n, total = sel.share()
        if cap is not None:
            cap.check(n, total, "the selection has")
        return {"source": m.root, "destination": dst, "counts": {"selected": n}, "lines": [], "more": 0}
    if src is None:
        raise PfsError("give a source or ", named("manifest"))
    target = live_target(src, dst, None, None)
    if target.rename:
        return _one_file(target.src.url, os.path.join(target.dst.path, os.fsdecode(next(iter(target.rename.values())))),
                         target.src, on_exist)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="pfs-cp-plan-") as work:
        r = sync(
            target.src.url,
            target.dst.url,
            client,
            src_manifest=os.path.join(work, "src"),
            dst_manifest=os.path.join(work, "dst"),
            plan=os.path.join(work, "plan"),
            dry_run=True,
            cluster=cluster,
            threads=threads,
            progress=progress,
            prune=prune,
        )
        plan_file = os.path.join(r.plan, "plan.parquet")
        lines = itemize(plan_file, delete=False, replace_changed=on_exist != "ignore")
        shown = list(lines if show is None else islice(lines, show))
        more = sum(1 for _ in lines)
        plan = read_plan(r.plan)
        dirs = count(plan, "action = 'changed' AND src_type = 'directory'") if plan and r.counts.get("changed") else 0
    counts = {k: r.counts.get(k, 0) for k in ("new", "changed", "type-changed", "unchanged", "error", "copy_bytes")}
    # a directory that differs only in its times or mode is not a file that exists and differs: the copy
    # sets its attributes and never fails on it (no --update needed)
    counts["changed"] -= dirs
    counts["dirs-changed"] = dirs
    return {
        "source": r.source,
        "destination": r.destination,
        "counts": counts,
        "on_exist": on_exist,
        "lines": shown,
        "more": more,
    }


def _one_file(src_url: str, dst_path: str, src, on_exist: str) -> dict[str, Any]:
    """One file to a name: new, or what happens to the file already there (local destinations)."""
    found = probe(src, follow=True)
    counts = {"new": 0, "changed": 0, "type-changed": 0, "unchanged": 0, "error": 0, "copy_bytes": found.size or 0}
    name = os.path.basename(dst_path)
    try:
        there = os.stat(dst_path, follow_symlinks=False)
    except FileNotFoundError:
        counts["new"] = 1
        return {"source": src_url, "destination": dst_path, "counts": counts, "on_exist": on_exist,
                "lines": [f">f+++++++++ {name}"], "more": 0}  # fmt: skip
    s = os.stat(src.path)
    same = there.st_size == s.st_size and there.st_mtime_ns // 1000 == s.st_mtime_ns // 1000
    counts["unchanged" if same else "changed"] = 1
    sz = "s" if there.st_size != s.st_size else "."
    tm = "t" if there.st_mtime_ns // 1000 != s.st_mtime_ns // 1000 else "."
    lines = [] if same or on_exist == "ignore" else [f">f.{sz}{tm}...... {name}"]
    return {"source": src_url, "destination": dst_path, "counts": counts, "on_exist": on_exist, "lines": lines,
            "more": 0}  # fmt: skip


__all__ = ["preview_copy"]
