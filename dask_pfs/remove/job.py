"""One ``rm`` job: prepared (checked, confirmed, journaled) without a cluster, then run on one
(``dask_pfs.remove`` is the driver's API; the module docstring there says how each mode runs)."""

from __future__ import annotations

import functools
import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from dask_pfs.errors import PfsError
from dask_pfs.guard import check_target, selection_reach
from dask_pfs.manifests.caps import Cap
from dask_pfs.manifests.check import check_parts
from dask_pfs.manifests.manifest import Selection, open_manifest
from dask_pfs.manifests.sql import Filter
from dask_pfs.remove import journal as rm_journal
from dask_pfs.remove.journal import ROW_DAMAGE
from dask_pfs.remove.tree_count import describe_tree
from dask_pfs.runtime.job_logs import default_log as job_log
from dask_pfs.runtime.journals import records, same_job
from dask_pfs.runtime.progress import Reporter, human_bytes
from dask_pfs.runtime.results import JobResult, ProblemLog
from dask_pfs.runtime.submitter import Submitter, WalkTuning, walk_frontier
from dask_pfs.urls import Location, probe, pruned_at, resolve
from operators.core import localfs
from operators.journal import Journal
from operators.names import decode
from operators.remove.tasks import (
    CONSISTENT,
    Checked,
    RemoveSpec,
    RmCounts,
    TreeChunkResult,
    check_batch,
    remove_tree_chunk,
    rmdir_entries,
    unlink_batch,
    unlink_entries,
)
from operators.scan.prune import Prune
from operators.scan.walk import Budget, DirItem

if TYPE_CHECKING:
    from distributed import Client

CHUNK = 2000  # manifest rows per unlink / rmdir task
CHECK_CHUNK = 20_000  # manifest rows per safety-check task (cheap: one lstat per distinct directory)
FAILURE_LOG = "_rm-failures.parquet"  # next to the manifest; does not match part-*.parquet
COUNTERS = (*(c for c in RmCounts.COUNTERS if c != "failed"), "skipped_error")
RemoveTuning = WalkTuning  # tree-mode rm walks like a scan


class _Counter:
    """One of ``counts`` read as an attribute (``result.removed_files``), as rm's first API had them."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, result: RemoveResult, owner: type | None = None) -> int:
        return result.counts.get(self.name, 0)


@dataclass(kw_only=True)
class RemoveResult(JobResult):
    """``counts``: removed_files (every non-directory), removed_dirs, bytes, skipped_changed,
    skipped_missing, skipped_nonempty, skipped_error (rows whose scan recorded an error);
    ``log`` lists failed and skipped entries; a dry run removes nothing and lists the first
    paths it would remove in ``would_remove``."""

    target: str  # the tree, or the manifest's root
    mode: str  # "tree" or "manifest"
    dry_run: bool
    would_remove: list[str] = field(default_factory=list)
    selected: int | None = None  # manifest mode: rows the where-clause selected (what max_entries caps)

    removed_files = _Counter()
    removed_dirs = _Counter()
    bytes = _Counter()
    skipped_changed = _Counter()
    skipped_missing = _Counter()
    skipped_nonempty = _Counter()
    skipped_error = _Counter()

    def summary(self) -> dict:
        """As every job's, with the counters also at the top level, where ``rm --json`` always had them."""
        return {**super().summary(), **self.counts}


class Removal:
    """One rm job: prepared (checked, journaled) without a cluster, then run on one."""

    def __init__(
        self,
        *,
        dry_run: bool,
        force: bool,
        ignore_changes: bool,
        threads: int | None,
        progress: Reporter,
        confirm: Callable[[str], bool] | None,
        show: int,
        tuning: RemoveTuning,
        resume: bool,
        journal: str | os.PathLike | bool | None,
        chunk: int,
        prune: Prune | None = None,
    ) -> None:
        self.dry_run, self.force, self.ignore_changes = dry_run, force, ignore_changes
        self.threads, self.progress, self.confirm, self.show = threads, progress, confirm, show
        self.tuning, self.resume, self.journal_opt, self.chunk = tuning, resume, journal, chunk
        self.prune = prune  # tree mode: what the walk leaves in place
        self.target = ""
        self.mode = "tree"
        self.manifest_url = ""
        self.spec: RemoveSpec | None = None
        self.sel: Selection | None = None  # manifest mode: the rows to remove (frozen into the journal)
        self.totals = {"entries": 0, "bytes": 0, "dirs": 0}
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.failed = 0
        self.tasks = 0
        self.resumed = 0
        self.accounted = 0  # manifest mode: rows of the chunks run or skipped as journaled
        self.would_remove: list[str] = []
        self.selected: int | None = None  # manifest mode: rows the where-clause selected (what max_entries caps)
        self.problems = ProblemLog(None)
        self.jr: Journal | None = None
        self.fresh_journal = False  # this run started the journal (an earlier one is not being resumed)
        self.done: dict = {}  # chunk ids an earlier run finished (manifest mode)

    # ------------------------------------------------------------ preparing (no deletion here)

    def _spec(self, loc: Location) -> RemoveSpec:
        return RemoveSpec(
            protocol=loc.protocol,
            root=loc.path,
            storage_options=loc.storage_options,
            threads=self.threads,
            dry_run=self.dry_run,
            ignore_changes=self.ignore_changes,
            sample_limit=self.show,
            prune=pruned_at(loc, self.prune),
        ).pinned()  # a root replaced from now on is refused by the core

    def _ask(self, message: Callable[[], str]) -> None:
        if self.confirm is not None and not self.dry_run and not self.confirm(message()):
            raise PfsError("not confirmed: nothing removed")

    def _log(self, log: str | os.PathLike | None, default: str, storage_options: dict | None = None) -> None:
        self.problems = ProblemLog(None if self.dry_run else os.fspath(log) if log else default, storage_options)

    def prepare_tree(self, url: str, log: str | os.PathLike | None, storage_options: dict | None) -> bool:
        """Check and confirm ``pfs rm URL``; False when it was done here (a single entry) or is done."""
        loc = resolve(url, storage_options)
        self.target = loc.url
        found = probe(loc)
        if found.exists and found.kind != "link":  # before anything else is said or made
            check_target(loc, action="remove", deletes=True, force=self.force)
        jr = None if self.dry_run else rm_journal.tree_journal(loc, self.journal_opt)
        if not found.exists:
            if self.resume and jr is not None and jr.exists:  # killed after its last rmdir: done
                self.resumed = len(records(jr))
                jr.remove()
                return False
            raise PfsError(f"{loc.url}: no such file or directory")
        self._log(log, job_log("rm", loc.url) if not self.dry_run else "")
        if found.kind == "directory":
            self.spec = self._spec(loc)
            self._ask(lambda: f"Remove {loc.url} and everything below it{describe_tree(loc)}?")
            if jr is not None:
                job: dict = {"job": "rm", "mode": "tree", "target": loc.url}
                if self.prune is not None:
                    job["prune"] = self.prune.describe()
                if self.resume and same_job(jr, job):
                    self.resumed = len(records(jr))
                else:
                    jr.start(job)
                    self.fresh_journal = True
                self.jr = jr
            return True
        # a file, a symlink (never followed) or another non-directory: no cluster needed
        self._ask(lambda: f"Remove {loc.url}?")
        parent, _, name = loc.path.rstrip("/").rpartition("/")
        spec = replace(
            self._spec(Location(loc.url, loc.protocol, parent or "/", loc.storage_options)), ignore_changes=True
        )
        raw = os.fsencode(name) if loc.is_local else name.encode()
        self._collect(unlink_entries(spec, [(decode(raw)[0], raw, found.kind, found.size, None)]))
        return False

    def prepare_manifest(
        self,
        url: str,
        where: str | Filter | None,
        cap: Cap | None,
        log: str | os.PathLike | None,
        storage_options: dict | None,
    ) -> bool:
        """Check the manifest's root, count the selection (refused over ``cap``) and freeze it into the journal."""
        m = open_manifest(url, storage_options=storage_options)
        check_parts(m)  # a damaged part: exit 2 before anything is removed
        loc = resolve(m.root, storage_options)
        found = probe(loc)
        if not found.exists:
            raise PfsError(f"{m.root} (root of manifest {url}): no such file or directory")
        if found.kind != "directory":
            raise PfsError(f"{m.root} (root of manifest {url}) is not a directory")
        self.sel = sel = Selection(m, where)

        def under(rel: str) -> int:  # selected rows at or below rel ("": any)
            return sel.count("path = ? OR starts_with(path, ?)", [rel, rel + "/"]) if rel else sel.count()

        # whatever the where-clause: what it selects is what the guard weighs (a home directory inside)
        check_target(loc, action="remove", deletes=True, force=self.force, reach=selection_reach(sel.share(), under))
        damaged = sel.fetch(sel.sql("count(*), min(path)", also=ROW_DAMAGE))[0]
        if damaged[0]:  # a where-clause on a rewritten name must not reach another entry (data/keep.db)
            raise PfsError(
                f"refusing: manifest {m.url} is damaged: {damaged[0]:,} selected rows disagree with their own "
                f"path (name, parent or depth), e.g. {damaged[1]!r} (nothing removed; scan again)"
            )
        self.spec = self._spec(loc)
        self.target, self.mode, self.manifest_url = m.root, "manifest", m.url
        totals = self.sel.totals()
        self.counts["skipped_error"] = totals["errors"]
        self.selected = totals["entries"] + totals["dirs"] + totals["errors"]
        self.totals = totals
        if cap is not None:  # before the stale log goes and a journal starts: refused means untouched
            cap.check(self.selected, self.sel.share()[1], "the selection has")
        default_log = f"{url.rstrip('/')}/{FAILURE_LOG}"
        log_options = None if m.is_local or log else m.storage_options  # the default log is beside the manifest
        if not self.dry_run and not log:
            fs, path = localfs.url_to_fs(default_log, **(log_options or {}))
            if fs.exists(path):
                fs.rm(path)  # a stale log from an earlier run would be misread as this run's
        self._log(log, default_log, log_options)
        if not self.dry_run:
            self._journal_manifest(url, self.sel.where, m.root, cap)
        return True

    def _journal_manifest(self, url: str, where: str | None, root: str, cap: Cap | None) -> None:
        """Freeze the selection into the journal, or take the one an interrupted run froze (checked,
        and capped by ``--max-entries``: ``rm_journal.manifest_job``)."""
        assert self.sel is not None
        job = rm_journal.manifest_job(url, where, root, self.journal_opt, self.resume, self.sel, self.chunk, cap)
        if job is not None:
            if job[1] is not self.sel:  # the frozen rows replace the live selection
                self.sel.close()
            self.jr, self.sel, self.done, self.chunk, self.fresh_journal = job
            self.totals = self.sel.totals()
            self.selected = self.totals["entries"] + self.totals["dirs"] + self.counts["skipped_error"]

    # ------------------------------------------------------------ running

    def run(self, client: Client) -> None:
        self.progress.start(f"rm {self.target}" + (" (dry run)" if self.dry_run else ""))
        sub = Submitter(client, "rm", per_slot=self.tuning.inflight_per_slot)
        try:
            with sub:
                if self.mode == "tree":
                    self._run_tree(sub)
                else:
                    self._run_manifest(sub)
        finally:
            self.tasks += sub.tasks
            self.progress.stop()

    def _collect(self, counts: RmCounts) -> None:
        for name in RmCounts.COUNTERS:
            if name == "failed":
                self.failed += counts.failed
            else:
                self.counts[name] += getattr(counts, name)
        self.problems.add(counts.problems)
        room = self.show - len(self.would_remove)
        self.would_remove.extend(decode(rel)[0] for rel in counts.samples[: max(room, 0)])
        entries = self.counts["removed_files"] + self.counts["removed_dirs"]
        self.progress.update({"entries": entries, "bytes": self.counts["bytes"], "errors": self.failed})

    def _chunks(self, sub: Submitter, func: Callable, chunks: Iterable[tuple[str | None, object]], then=None) -> None:
        """Run ``func(spec, chunk)`` for every ``(id, chunk)``, bounded, and wait for all of them.

        A chunk the journal lists as finished is skipped; one that finishes without failures is
        journaled (``id`` None: neither).  A directory left because it was not empty is not
        finished: a retried chunk of its files may empty it.
        """

        def took(cid: str | None, res: RmCounts) -> None:
            if cid is not None and self.jr is not None and res.failed == 0 and res.skipped_nonempty == 0:
                self.jr.record(cid, **res.as_dict())
            (then or self._collect)(res)

        for cid, chunk in chunks:
            if cid is not None:
                self.accounted += len(chunk)  # type: ignore[arg-type]  # rows of a table, or rels
            if cid is not None and cid in self.done:
                self.resumed += 1
                continue
            sub.submit(func, self.spec, chunk, then=functools.partial(took, cid))
        sub.drain()

    def _rmdir_levels(self, sub: Submitter, chunks: Iterable[tuple[int, list]], prefix: str = "d") -> None:
        """Directories level by level, from ``(depth, rels)`` chunks in depth-descending order.

        A level starts only when the deeper one is done; chunk ids are ``<prefix><depth>.<n>``.
        """
        for depth, level in itertools.groupby(chunks, key=lambda c: c[0]):
            self._chunks(sub, rmdir_entries, ((f"{prefix}{depth}.{n}", rels) for n, (_, rels) in enumerate(level)))

    def _run_tree(self, sub: Submitter) -> None:
        spec = self.spec
        assert spec is not None
        left: dict[int, list] = {0: [b""]}
        kept: set[bytes] = set()  # hold what the prune left in place: never removed

        def task(items: list[DirItem], budget: Budget, n: int) -> tuple[Callable, tuple]:
            return remove_tree_chunk, (spec, items, budget)

        def fold(res: TreeChunkResult, items: list[DirItem], n: int) -> list[DirItem]:
            if self.jr is not None and res.counts.failed == 0:
                self.jr.record(f"t-{sub.run}-{n:07d}", **res.counts.as_dict())
            self._collect(res.counts)
            kept.update(res.kept_dirs)
            for rel in res.left_dirs:
                left.setdefault(rel.count(b"/") + 1, []).append(rel)
            return res.frontier

        walk_frontier(sub, deque([(b"" if spec.is_local else "", None)]), self.tuning, task, fold)
        # ids of tree chunks name this run: a resumed run walks what is left, it skips nothing
        n = self.chunk
        levels = ((d, [r for r in left[d] if r not in kept]) for d in sorted(left, reverse=True))
        cuts = ((d, rels[i : i + n]) for d, rels in levels for i in range(0, len(rels), n))
        self._rmdir_levels(sub, cuts, prefix=f"d-{sub.run}-")

    def _run_manifest(self, sub: Submitter) -> None:
        sel = self.sel
        assert sel is not None
        # 1. every selected row is checked before anything is removed: below the root, and the row
        # agreeing with its own path (a where-clause on a rewritten name must not reach another entry)
        found = Checked()

        def on_check(res: Checked) -> None:
            found.refused += res.refused
            found.damaged += res.damaged
            found.samples.extend(res.samples[: 5 - len(found.samples)])
            found.damage.extend(res.damage[: 1 - len(found.damage)])

        rows = sel.batches(sel.sql(", ".join(CONSISTENT), also="error IS NULL"), CHECK_CHUNK)
        self._chunks(sub, check_batch, ((None, batch) for batch in rows), on_check)
        if found.damaged:
            rel, why = found.damage[0]
            raise PfsError(
                f"refusing: manifest {self.manifest_url} is damaged: {found.damaged:,} selected rows disagree "
                f"with their own path, e.g. {decode(rel)[0]!r}: {why} (nothing removed; scan again)"
            )
        if found.refused:
            samples = [f"{decode(rel)[0]!r}: {why}" for rel, why in found.samples]
            raise PfsError(
                f"refusing: {found.refused:,} selected manifest rows could act outside {self.target} "
                f"(nothing removed), e.g. " + "; ".join(samples)
            )
        t = self.totals
        self._ask(lambda: f"Remove {t['entries']:,} entries ({human_bytes(t['bytes'])}) and {t['dirs']:,} directories "
                  f"under {self.target}?")  # fmt: skip
        # 2. non-directories, in chunks all over the cluster (the frozen selection's order: chunk ids are stable)
        files = sel.batches(rm_journal.files_sql(sel), self.chunk)
        self._chunks(
            sub, unlink_batch, ((f"f{n}", batch) for n, batch in enumerate(rm_journal.exact(files, self.chunk)))
        )
        # 3. directories, deepest level first
        order = "depth DESC, path, path_raw"
        dirs = sel.batches(sel.sql("depth, path, path_raw", "error IS NULL AND type = 'directory'", order), self.chunk)
        self._rmdir_levels(sub, rm_journal.levels(dirs, self.chunk))

    # ------------------------------------------------------------ ending

    def close(self) -> None:
        for held in (self.problems, self.sel, self.jr):
            if held is not None:
                held.close()

    def drop_fresh_journal(self) -> None:
        if self.fresh_journal and self.jr is not None:
            self.jr.remove()

    def finish(self, seconds: float, concurrency: dict) -> RemoveResult:
        """Delete the journal after a run without failures (else keep it for ``resume``); the result."""
        kept = None
        want = self.totals.get("entries", 0) + self.totals.get("dirs", 0)
        if self.mode == "manifest" and self.resumed and self.accounted != want:  # every frozen row, run or journaled
            self.failed += 1
            self.problems.add([("", "failed", f"resume: {want - self.accounted} selected rows were not accounted for")])
        if self.jr is not None:
            if self.failed:
                kept = self.jr.path
            else:
                self.jr.remove()
        return self.result(seconds, concurrency, kept)

    def result(self, seconds: float, concurrency: dict | None = None, journal: str | None = None) -> RemoveResult:
        return RemoveResult(
            target=self.target,
            mode=self.mode,
            dry_run=self.dry_run,
            counts=dict(self.counts),
            failed=self.failed,
            samples=self.problems.samples,
            log=self.problems.close(),
            seconds=seconds,
            tasks=self.tasks,
            resumed=self.resumed,
            journal=journal,
            concurrency=concurrency or {},
            would_remove=self.would_remove,
            selected=self.selected,
        )
