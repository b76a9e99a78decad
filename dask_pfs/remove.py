"""The ``pfs rm`` driver: remove a live tree, or exactly the rows of a (filtered) manifest.

Tree mode streams: tasks list a bounded slice of directories, unlink what they list at once and
hand back unlisted subdirectories as frontier (as the scan driver does); directories whose
subtree a task finished are removed inside it, the rest by the driver at the end, deepest level
first.  Manifest mode streams the DuckDB selection in Arrow batches: every selected row is
checked (relative, no symlinked ancestor) before the first unlink, then non-directories go in
chunks, then directories level by level, deepest first.  The driver holds counters, a bounded
frontier and the directories left for the last pass; problems go straight to a Parquet log.

Every finished chunk is journaled (``dask_pfs.rm_journal``): ``resume=True`` after a killed
driver skips the manifest chunks an earlier run finished; in tree mode what was removed is
simply gone, so the resumed walk finds only what is left.
"""

from __future__ import annotations

import itertools
import os
import stat as st
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from distributed import Client, as_completed

from operators.journal import Journal
from operators.names import decode
from operators.prune import Prune
from operators.remove import (
    RemoveSpec,
    RmCounts,
    TreeChunkResult,
    remove_tree_chunk,
    rmdir_entries,
    unlink_entries,
)
from operators.safety import check_paths
from operators.walk import DirItem

from . import rm_journal
from . import sql as pfs_sql
from .caps import Cap
from .cluster import ClusterOptions, connect, total_task_slots
from .errors import PfsError
from .frames import takes_selection
from .frontier import WalkTuning, next_slice
from .limits import Limits, concurrency_report, job_limits
from .manifest import open_manifest, sql_str
from .progress import NullProgress, Reporter, human_bytes
from .urls import Location, pruned_at, resolve

CHUNK = 2000  # manifest rows per unlink / rmdir task
CHECK_CHUNK = 20_000  # manifest rows per safety-check task (cheap: one lstat per distinct directory)
FAILURE_LOG = "_rm-failures.parquet"  # next to the manifest; does not match part-*.parquet
LOG_SCHEMA = pa.schema(
    [("path", pa.string()), ("path_raw", pa.binary()), ("status", pa.string()), ("error", pa.string())]
)


@dataclass
class RemoveResult:
    target: str  # the tree, or the manifest's root
    mode: str  # "tree" or "manifest"
    dry_run: bool
    removed_files: int = 0  # non-directories: files, symlinks, others
    removed_dirs: int = 0
    bytes: int = 0
    failed: int = 0
    skipped_changed: int = 0
    skipped_missing: int = 0
    skipped_nonempty: int = 0
    skipped_error: int = 0  # manifest rows whose scan recorded an error
    seconds: float = 0.0
    tasks: int = 0
    log: str | None = None  # Parquet log of failed and skipped entries, when there were any
    problems: list[str] = field(default_factory=list)  # first few "path: status: error"
    would_remove: list[str] = field(default_factory=list)  # dry run: first paths
    concurrency: dict = field(default_factory=dict)  # I/O concurrency per worker: fixed, or where auto-tuning settled
    resumed: int = 0  # chunks an interrupted run had finished (manifest mode: skipped, not redone)
    selected: int | None = None  # manifest mode: rows the where-clause selected (what max_entries caps)
    journal: str | None = None  # kept when the run had failures: resume=True retries only those chunks

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def summary(self) -> dict:
        return {**asdict(self), "exit_code": self.exit_code}

    def take(self, counts: RmCounts) -> None:
        for name in RmCounts.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(counts, name))

    def progress(self) -> dict:
        return {"entries": self.removed_files + self.removed_dirs, "bytes": self.bytes, "errors": self.failed}


RemoveTuning = WalkTuning  # tree-mode rm walks like a scan


@takes_selection("manifest")
def remove(
    url: str | os.PathLike | None = None,
    *,
    manifest: str | os.PathLike | None = None,
    where: str | pfs_sql.Filter | None = None,
    max_entries: int | str | None = None,
    client: Client | None = None,
    cluster: ClusterOptions | None = None,
    dry_run: bool = False,
    force: bool = False,
    ignore_changes: bool = False,
    threads: int | None = None,
    progress: Reporter | None = None,
    log: str | os.PathLike | None = None,
    confirm: Callable[[str], bool] | None = None,
    storage_options: dict | None = None,
    show: int = 20,
    tuning: RemoveTuning | None = None,
    limits: Limits | None = None,
    resume: bool = False,
    journal: str | os.PathLike | bool | None = None,
    chunk_files: int = CHUNK,
    prune: Prune | None = None,
) -> RemoveResult:
    """Remove the tree ``url``, or the rows of ``manifest`` selected by ``where`` and/or ``selection``
    (a frame of manifest rows: Dask, pandas, pyarrow, DuckDB, or a saved Parquet path; ``dask_pfs.frames``).

    Raises :class:`PfsError` (nothing removed) for a missing target, a refused target (``/``,
    the home directory, a mount point, a bucket, unless ``force``), an unsafe manifest row, or
    when ``confirm(message)`` returns false.  ``confirm`` is called after every check and
    before the first unlink.  ``show`` bounds the paths a dry run lists.

    ``where`` is one SQL condition over the manifest's columns (``dask_pfs.sql``: never a
    statement or a subquery).  ``max_entries`` (a count, or ``"5%"`` of the manifest's rows)
    refuses a larger selection, dry runs included, before anything is removed or written.

    ``journal``: where finished chunks are recorded (default: see ``dask_pfs.rm_journal``;
    False: nowhere; dry runs keep none); ``resume`` goes on with the interrupted run it describes,
    with that run's ``chunk_files`` (rows per unlink or rmdir task), so chunk ids match.

    ``prune`` (tree mode; ``operators.prune``) leaves entries in place: excluded ones, those below
    ``max_depth`` or on another file system are not listed or unlinked, and their directories stay.
    """
    if (url is None) == (manifest is None):
        raise PfsError("give either a URL or --manifest, not both")
    if where and manifest is None:
        raise PfsError("--where needs --manifest")
    cap = Cap.parse(max_entries, "--max-entries")
    if cap is not None and manifest is None:
        raise PfsError("--max-entries needs --manifest")
    selection = pfs_sql.where_filter(where)
    if prune is not None and manifest is not None:
        raise PfsError("--exclude/--include/--max-depth/--one-file-system prune a tree walk; with --manifest, --where")
    t0 = time.monotonic()
    job = _Job(
        dry_run=dry_run,
        force=force,
        ignore_changes=ignore_changes,
        threads=threads,
        progress=progress or NullProgress(),
        confirm=confirm,
        show=show,
        tuning=tuning or RemoveTuning(),
        resume=resume,
        journal_opt=journal,
        chunk=max(1, chunk_files),
        prune=prune,
    )
    if manifest is not None:
        prepared = job.prepare_manifest(os.fspath(manifest), selection, cap, log, storage_options)
    else:
        prepared = job.prepare_tree(os.fspath(url), log, storage_options)
    if prepared is not None:  # done without a cluster (a single file or link)
        prepared.seconds = time.monotonic() - t0
        return prepared
    limits = limits or (cluster.limits if cluster else None)
    try:
        if client is None:
            with connect(cluster or ClusterOptions.from_env(threads=threads)) as own, job_limits(own, limits):
                job.run(own)
                job.result.concurrency = concurrency_report(own, threads)
        else:
            with job_limits(client, limits):
                job.run(client)
            job.result.concurrency = concurrency_report(client, threads)
    except PfsError:
        if job.fresh_journal:
            job.jr.remove()  # refused or not confirmed: nothing was removed, nothing to resume
        raise
    finally:
        job.close_log()
    job.finish_journal()
    job.result.seconds = time.monotonic() - t0
    return job.result


class _Log:
    """Problems (failed, changed, non-empty) appended to a Parquet file, opened on first use."""

    def __init__(self, url: str | None, storage_options: dict | None = None) -> None:
        self.url = url
        self.storage_options = storage_options or {}
        self.writer: pq.ParquetWriter | None = None
        self.file = None
        self.rows = 0

    def write(self, problems: list[tuple[bytes, str, str]]) -> None:
        if not problems or self.url is None:
            return
        if self.writer is None:
            self.file = fsspec.open(self.url, "wb", **self.storage_options).open()
            self.writer = pq.ParquetWriter(self.file, LOG_SCHEMA, compression="zstd")
        texts = [decode(rel) for rel, _, _ in problems]
        self.writer.write_table(
            pa.table(
                [
                    [t for t, _ in texts],
                    [r for _, r in texts],
                    [s for _, s, _ in problems],
                    [e for _, _, e in problems],
                ],
                schema=LOG_SCHEMA,
            )
        )
        self.rows += len(problems)

    def close(self) -> str | None:
        if self.writer is None:
            return None
        self.writer.close()
        self.file.close()
        self.writer = None
        return self.url


@dataclass
class _Job:
    dry_run: bool
    force: bool
    ignore_changes: bool
    threads: int | None
    progress: Reporter
    confirm: Callable[[str], bool] | None
    show: int
    tuning: RemoveTuning
    spec: RemoveSpec | None = None
    result: RemoveResult | None = None
    log: _Log | None = None
    selection: tuple | None = None  # manifest mode: (con, relation sql, condition)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    resume: bool = False
    journal_opt: str | os.PathLike | bool | None = None
    jr: Journal | None = None
    fresh_journal: bool = False  # this run started the journal (an earlier one is not being resumed)
    done: dict = field(default_factory=dict)  # chunk ids an earlier run finished (manifest mode)
    chunk: int = CHUNK  # rows per unlink / rmdir task
    prune: Prune | None = None  # tree mode: what the walk leaves in place

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
        )

    def _ask(self, message: str) -> None:
        if self.confirm is not None and not self.dry_run and not self.confirm(message):
            raise PfsError("not confirmed: nothing removed")

    def prepare_tree(self, url: str, log: str | os.PathLike | None, storage_options: dict | None):
        loc = resolve(url, storage_options)
        jr = None if self.dry_run else rm_journal.tree_journal(loc, self.journal_opt)
        try:
            kind, size = _probe(loc)
        except PfsError:
            if self.resume and jr is not None and jr.exists:  # killed after its last rmdir: done
                self.result = RemoveResult(loc.url, "tree", False, resumed=len(jr.done()))
                jr.remove()
                return self.result
            raise
        if kind != "link":
            refuse_target(loc, self.force)
        self.result = RemoveResult(loc.url, "tree", self.dry_run)
        default_log = os.path.join(tempfile.gettempdir(), f"pfs-rm-failures-{self.run_id}.parquet")
        self.log = _Log(None if self.dry_run else os.fspath(log) if log else default_log)
        if kind == "directory":
            self.spec = self._spec(loc)
            self._ask(f"Remove {loc.url} and everything below it?")
            if jr is not None:
                job = {"job": "rm", "mode": "tree", "target": loc.url}
                if self.prune is not None:
                    job["prune"] = self.prune.describe()
                if self.resume and _same_job(jr, job):
                    self.result.resumed = len(jr.done())
                else:
                    jr.start(job)
                    self.fresh_journal = True
                self.jr = jr
            return None
        # a file, a symlink (never followed) or another non-directory: no cluster needed
        self._ask(f"Remove {loc.url}?")
        parent, _, name = loc.path.rstrip("/").rpartition("/")
        spec = replace(
            self._spec(Location(loc.url, loc.protocol, parent or "/", loc.storage_options)), ignore_changes=True
        )
        raw = os.fsencode(name) if loc.is_local else name.encode()
        counts = unlink_entries(spec, [(decode(raw)[0], raw, kind, size, None)])
        self._collect(counts)
        self.result.log = self.log.close()
        return self.result

    def prepare_manifest(self, url: str, where: pfs_sql.Filter | None, cap: Cap | None, log, storage_options):
        m = open_manifest(url, storage_options=storage_options)
        loc = resolve(m.root, storage_options)
        try:
            kind, _ = _probe(loc)
        except PfsError:
            raise PfsError(f"{m.root} (root of manifest {url}): no such file or directory") from None
        if not where:
            refuse_target(loc, self.force)  # the whole manifest is the whole tree
        if kind != "directory":
            raise PfsError(f"{m.root} (root of manifest {url}) is not a directory")
        self.spec = self._spec(loc)
        self.result = RemoveResult(m.root, "manifest", self.dry_run)
        con = pfs_sql.connect(m, reads=where.reads if where else ())
        cond = f"({where})" if where else "TRUE"
        self.selection = (con, m.relation_sql(), cond)
        try:
            total, n_error, n_files, n_bytes, n_dirs = con.execute(
                f"SELECT count(*), count(*) FILTER (WHERE {cond} AND error IS NOT NULL), "
                f"count(*) FILTER (WHERE {cond} AND error IS NULL AND type <> 'directory'), "
                f"coalesce(sum(size) FILTER (WHERE {cond} AND error IS NULL AND type <> 'directory'), 0), "
                f"count(*) FILTER (WHERE {cond} AND error IS NULL AND type = 'directory') "
                f"FROM {m.relation_sql()} AS m"
            ).fetchall()[0]
        except Exception as exc:  # duckdb.Error: a bad --where
            raise PfsError(f"--where: {str(exc).splitlines()[0]}") from None
        self.result.skipped_error = n_error
        self.result.selected = n_error + n_files + n_dirs
        self.totals = (n_files, n_bytes, n_dirs)
        if cap is not None:  # before the stale log goes and a journal starts: refused means untouched
            cap.check(self.result.selected, total, "the selection has")
        default_log = f"{url.rstrip('/')}/{FAILURE_LOG}"
        log_options = None if m.is_local or log else m.storage_options  # the default log is beside the manifest
        if not self.dry_run and not log:
            fs, path = fsspec.core.url_to_fs(default_log, **(log_options or {}))
            if fs.exists(path):
                fs.rm(path)  # a stale log from an earlier run would be misread as this run's
        self.log = _Log(None if self.dry_run else os.fspath(log) if log else default_log, log_options)
        if not self.dry_run:
            self._journal_manifest(url, str(where) if where else None, m.root)
        return None

    def _journal_manifest(self, url: str, where: str | None, root: str) -> None:
        """Freeze the selection into the journal (or take the one an interrupted run froze)."""
        jr = rm_journal.manifest_journal(url, where, self.journal_opt)
        if jr is None:
            return
        job = {"job": "rm", "mode": "manifest", "manifest": url, "where": where, "root": root}
        con, relation, cond = self.selection
        sel = rm_journal.frozen(jr) if self.resume and _same_job(jr, job) else None
        if sel is not None:
            self.done = jr.done()
            self.chunk = int(jr.job().get("chunk_files") or self.chunk)  # the same cuts, the same ids
        else:
            jr.start({**job, "chunk_files": self.chunk})
            self.fresh_journal = True
            sel = rm_journal.freeze(con, relation, cond, jr)
        self.jr = jr
        con = pfs_sql.connect(reads=[sel])
        self.selection = (con, f"read_parquet({sql_str(sel)})", "TRUE")
        n_files, n_bytes, n_dirs = con.execute(
            f"SELECT count(*) FILTER (WHERE type <> 'directory'), "
            f"coalesce(sum(size) FILTER (WHERE type <> 'directory'), 0), "
            f"count(*) FILTER (WHERE type = 'directory') FROM read_parquet({sql_str(sel)})"
        ).fetchall()[0]
        self.totals = (n_files, n_bytes, n_dirs)

    # ------------------------------------------------------------ running

    def run(self, client: Client) -> None:
        slots = total_task_slots(client)
        self.max_inflight = slots * self.tuning.inflight_per_slot
        self.slots = slots
        self.client = client
        self.progress.start(f"rm {self.result.target}" + (" (dry run)" if self.dry_run else ""))
        try:
            if self.result.mode == "tree":
                self._run_tree()
            else:
                self._run_manifest()
        finally:
            self.progress.stop()

    def _submit(self, func, *args):
        self.result.tasks += 1
        return self.client.submit(
            func, *args, key=f"pfs-rm-{self.run_id}-{self.result.tasks:07d}", pure=False, retries=1
        )

    def _collect(self, counts: RmCounts) -> None:
        r = self.result
        r.take(counts)
        self.log.write(counts.problems)
        for rel, status, error in counts.problems:
            if len(r.problems) >= 10:
                break
            r.problems.append(f"{decode(rel)[0]}: {status}: {error}")
        room = self.show - len(r.would_remove)
        r.would_remove.extend(decode(rel)[0] for rel in counts.samples[: max(room, 0)])
        self.progress.update(r.progress())

    def _chunks(self, func, chunks: Iterable[tuple[str | None, object]], on_result=None) -> None:
        """Run ``func(spec, chunk)`` for every ``(id, chunk)`` with a bounded number in flight.

        A chunk the journal lists as finished is skipped; one that finishes without failures is
        journaled (``id`` None: neither).  A directory left because it was not empty is not
        finished: a retried chunk of its files may empty it.
        """
        on_result = on_result or self._collect
        pending = as_completed(loop=self.client.loop)
        ids: dict[str, str | None] = {}
        inflight = 0

        def take(fut) -> None:
            res = fut.result()
            cid = ids.pop(fut.key)
            if cid is not None and self.jr is not None and res.failed == 0 and res.skipped_nonempty == 0:
                self.jr.record(cid, **res.as_dict())
            on_result(res)
            fut.release()

        try:
            for cid, chunk in chunks:
                if cid is not None and cid in self.done:
                    self.result.resumed += 1
                    continue
                while inflight >= self.max_inflight:
                    take(next(pending))
                    inflight -= 1
                fut = self._submit(func, self.spec, chunk)
                ids[fut.key] = cid
                pending.add(fut)
                inflight += 1
            for fut in pending:
                take(fut)
        except BaseException:
            pending.clear()
            raise

    def _rmdir_levels(self, chunks: Iterable[tuple[int, list]], prefix: str = "d") -> None:
        """Directories level by level, from ``(depth, rels)`` chunks in depth-descending order.

        A level starts only when the deeper one is done; chunk ids are ``<prefix><depth>.<n>``.
        """
        for depth, level in itertools.groupby(chunks, key=lambda c: c[0]):
            self._chunks(rmdir_entries, ((f"{prefix}{depth}.{n}", rels) for n, (_, rels) in enumerate(level)))

    def _run_tree(self) -> None:
        spec, tuning = self.spec, self.tuning
        frontier: deque[DirItem] = deque([(b"" if spec.is_local else "", None)])
        left: dict[int, list] = {0: [b""]}
        kept: set[bytes] = set()  # hold what the prune left in place: never removed
        pending = as_completed(loop=self.client.loop)
        inflight = 0

        def submit() -> None:
            nonlocal inflight
            while frontier and inflight < self.max_inflight:
                items, budget = next_slice(frontier, inflight, self.max_inflight, self.slots, tuning)
                pending.add(self._submit(remove_tree_chunk, spec, items, budget))
                inflight += 1

        try:
            submit()
            for fut in pending:
                res: TreeChunkResult = fut.result()
                fut.release()
                inflight -= 1
                if self.jr is not None and res.counts.failed == 0:
                    self.jr.record(f"t-{self.run_id}-{fut.key.rpartition('-')[2]}", **res.counts.as_dict())
                self._collect(res.counts)
                kept.update(res.kept_dirs)
                for rel in res.left_dirs:
                    left.setdefault(rel.count(b"/") + 1, []).append(rel)
                frontier.extend(res.frontier)
                submit()
        except BaseException:
            pending.clear()
            raise
        # ids of tree chunks name this run: a resumed run walks what is left, it skips nothing
        self._rmdir_levels(
            (
                (d, rels[i : i + self.chunk])
                for d, rels in ((d, [r for r in left[d] if r not in kept]) for d in sorted(left, reverse=True))
                for i in range(0, len(rels), self.chunk)
            ),
            prefix=f"d-{self.run_id}-",
        )

    def _run_manifest(self) -> None:
        con, relation, cond = self.selection
        n_files, n_bytes, n_dirs = self.totals
        base = f"FROM {relation} AS m WHERE {cond} AND error IS NULL"
        # 1. every selected row is checked before anything is removed
        refused = 0
        samples: list[str] = []

        def on_check(res) -> None:
            nonlocal refused
            refused += res[0]
            samples.extend(f"{decode(rel)[0]!r}: {why}" for rel, why in res[1][: 5 - len(samples)])

        reader = con.cursor().sql(f"SELECT path, path_raw {base}").to_arrow_reader(CHECK_CHUNK)
        self._chunks(check_batch, ((None, batch) for batch in reader), on_check)
        if refused:
            raise PfsError(
                f"refusing: {refused:,} selected manifest rows could act outside {self.result.target} "
                f"(nothing removed), e.g. " + "; ".join(samples)
            )
        self._ask(
            f"Remove {n_files:,} entries ({human_bytes(n_bytes)}) and {n_dirs:,} directories "
            f"under {self.result.target}?"
        )
        # 2. non-directories, in chunks all over the cluster (the frozen selection's order: chunk ids are stable)
        sql = f"SELECT path, path_raw, type, size, epoch_ns(mtime) AS mtime {base} AND type <> 'directory'"
        batches = _exact(con.cursor().sql(sql).to_arrow_reader(self.chunk), self.chunk)
        self._chunks(unlink_batch, ((f"f{n}", batch) for n, batch in enumerate(batches)))
        # 3. directories, deepest level first
        sql = f"SELECT depth, path, path_raw {base} AND type = 'directory' ORDER BY depth DESC, path, path_raw"
        self._rmdir_levels(_levels(con.cursor().sql(sql).to_arrow_reader(self.chunk), self.chunk))

    def close_log(self) -> None:
        if self.log is not None and self.result is not None:
            self.result.log = self.log.close()
        if self.jr is not None:
            self.jr.close()

    def finish_journal(self) -> None:
        """Delete the journal after a run without failures; else keep it for ``resume``."""
        if self.jr is None:
            return
        if self.result.failed:
            self.result.journal = self.jr.path
        else:
            self.jr.remove()


def _same_job(jr: Journal, job: dict) -> bool:
    """The journal describes ``job`` (an explicit ``journal=`` path may hold another's)."""
    prior = jr.job()
    if prior and any(prior.get(k) != v for k, v in job.items()):
        raise PfsError(f"{jr.path}: the journal of another job ({prior}); not resuming it")
    return bool(prior)


def _exact(reader, n: int) -> Iterator[pa.Table]:
    """Re-cut a stream of record batches into tables of exactly ``n`` rows (the last may be short)."""
    buf: list[pa.RecordBatch] = []
    size = 0
    for batch in reader:
        while batch.num_rows:
            take = min(n - size, batch.num_rows)
            buf.append(batch.slice(0, take))
            size += take
            batch = batch.slice(take)
            if size == n:
                yield pa.Table.from_batches(buf)
                buf, size = [], 0
    if size:
        yield pa.Table.from_batches(buf)


def _levels(reader, n: int) -> Iterator[tuple[int, list[bytes]]]:
    """Cut a depth-descending stream of directory rows into ``(depth, rels)`` chunks.

    Each chunk holds at most ``n`` rows of one depth, cut at the same rows whatever the
    reader's batch sizes (chunk ids must not depend on them).
    """
    depth, rels = None, []
    for batch in reader:
        for d, rel in zip(batch.column("depth").to_pylist(), _rels(batch), strict=True):
            if rels and (d != depth or len(rels) >= n):
                yield depth, rels
                rels = []
            depth = d
            rels.append(rel)
    if rels:
        yield depth, rels


def _rels(batch: pa.RecordBatch | pa.Table) -> list[bytes]:
    """Exact path bytes of an Arrow batch (or table) with ``path`` and ``path_raw`` columns."""
    paths, raws = batch.column("path").to_pylist(), batch.column("path_raw").to_pylist()
    return [raw if raw is not None else path.encode("utf-8") for path, raw in zip(paths, raws, strict=True)]


def check_batch(spec: RemoveSpec, batch: pa.RecordBatch) -> tuple[int, list[tuple[bytes, str]]]:
    """Worker side of the safety pass over one Arrow batch of (path, path_raw)."""
    return check_paths(spec.root_bytes, _rels(batch), spec.is_local)


def unlink_batch(spec: RemoveSpec, batch: pa.RecordBatch | pa.Table) -> RmCounts:
    """Worker side of the unlink pass over one Arrow batch of manifest rows."""
    cols = [batch.column(n).to_pylist() for n in ("path", "path_raw", "type", "size", "mtime")]
    return unlink_entries(spec, list(zip(*cols, strict=True)))


def _probe(loc: Location) -> tuple[str, int | None]:
    """("directory" | "link" | "file", size); "file" is any other non-directory; PfsError when missing."""
    if loc.is_local:
        try:
            s = os.lstat(loc.path)
        except FileNotFoundError:
            raise PfsError(f"{loc.url}: no such file or directory") from None
        except OSError as exc:
            raise PfsError(f"{loc.url}: {exc.strerror}") from None
        if st.S_ISLNK(s.st_mode):
            return "link", s.st_size
        return ("directory" if st.S_ISDIR(s.st_mode) else "file"), s.st_size
    fs = loc.filesystem()
    try:
        info = fs.info(loc.path)
    except FileNotFoundError:
        raise PfsError(f"{loc.url}: no such file or directory") from None
    except OSError as exc:
        raise PfsError(f"{loc.url}: {exc}") from None
    return ("directory" if info.get("type") == "directory" else "file"), info.get("size")


def refuse_target(loc: Location, force: bool) -> None:
    """PfsError unless ``force`` when the target is ``/``, holds the home directory, or is a mount point / bucket."""
    if force:
        return
    reason = None
    if loc.is_local:
        path = os.path.realpath(loc.path)
        home = os.path.realpath(os.path.expanduser("~"))
        if path == "/":
            reason = "it is the root directory"
        elif home == path or home.startswith(path.rstrip("/") + "/"):
            reason = "it is (or holds) your home directory"
        elif os.path.ismount(path):
            reason = "it is a mount point"
    else:
        bare = loc.path.strip("/")
        if not bare or "/" not in bare:
            reason = "it is a whole bucket or file system root"
    if reason:
        raise PfsError(f"refusing to remove {loc.url}: {reason} (pass --force to remove it anyway)")


__all__ = ["RemoveResult", "RemoveTuning", "refuse_target", "remove"]
