"""The copy job: its phases, each streamed out of DuckDB in record batches, and its counters.

1. check every selected path stays below the root (nothing is written before this passes);
2. directories (owner-writable for now; stale temp files of interrupted runs removed);
3. files in chunks by count and bytes; big files as byte ranges (``copy.bigfiles``);
4. hard links to files copied in 3 (POSIX destinations);
5. directory modes and times, after their contents, then the destination root's (by the last part
   of a group still running: ``copy.group``).

Every finished file chunk and byte range is journaled; a resumed run skips what the journal
lists.  Chunk ids follow the plan order, so one manifest always gives the same ids.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from dask_pfs.copy.bigfiles import BigFiles
from dask_pfs.copy.group import Ledger
from dask_pfs.copy.rows import CopyRows
from dask_pfs.copy.target import Target
from dask_pfs.manifests.manifest import Manifest
from dask_pfs.manifests.sql import Filter
from dask_pfs.runtime.journals import ident
from dask_pfs.runtime.locking import Held
from dask_pfs.runtime.progress import Reporter
from dask_pfs.runtime.results import ProblemLog
from dask_pfs.runtime.submitter import Submitter
from dask_pfs.urls import make_root
from operators.copy.multipart import has_multipart
from operators.copy.pinned import PinnedRoot
from operators.copy.plan import BigFile, Chunk, ChunkLimits, Planner, entries_from_batch, link_firsts
from operators.copy.tasks import CopySpec, Entry, Outcome, copy_files, link_files, make_dirs, set_dir_meta
from operators.journal import Journal

if TYPE_CHECKING:
    import duckdb
    from distributed import Client

DIR_CHUNK = 1_000  # directories per task


class CopyJob:
    """One copy run on a client: the tasks it submits and what came back."""

    def __init__(
        self,
        client: Client,
        spec: CopySpec,
        target: Target,
        where: Filter | None,
        limits: ChunkLimits,
        progress: Reporter,
        journal: Journal | None,
        done: dict[str, dict],
        failure_log: str,
        group: Held | None = None,
    ) -> None:
        self.spec, self.target, self.where, self.limits, self.progress = spec, target, where, limits, progress
        self.journal = journal
        self.done = done  # chunk ids a journal lists as finished
        # Dask keys: unique even for a resumed run (same token)
        self.sub = Submitter(client, "cp", run=f"{spec.token}-{uuid.uuid4().hex[:6]}")
        self.total = Outcome()
        self.failed = 0
        self.problems = ProblemLog(failure_log)
        self.totals = {"total_files": 0, "total_bytes": 0}
        self.phases: dict[str, float] = {}
        self.resumed = 0
        self.planned = 0  # non-directory entries the plan holds (files, symlinks, big files, streamed)
        self.accounted = 0  # of those: run now, or skipped as journaled with the same entries
        self.seq = 0  # file items in plan order: the chunk ids (deterministic for one manifest)
        self.big = BigFiles(self)
        self.streamed_parts: list[str] = []  # manifest parts whose streamable rows were copied during the scan
        self.streamed_files = 0
        self.streaming = False  # the scan reports progress meanwhile
        self.streamed_on: duckdb.DuckDBPyConnection | None = None  # the streamed copy's connection
        self.rows: CopyRows | None = None
        self.group = group  # the shared lock of a part of a group (``copy.group``), else None
        self.dirs_failed: set[str] = set()

    # submitting -----------------------------------------------------------

    def submit(
        self,
        fn: Callable,
        *args,
        entries: list[Entry],
        cid: str | None = None,
        weight: int = 1,
        kind: str = "files",
        spec: CopySpec | None = None,
    ) -> None:
        """``fn(spec, *args)`` for ``entries``; a task lost after its retries fails each of them."""
        sig = chunk_sig(entries) if cid is not None else None
        self.sub.poll()  # fold in (and journal) every chunk that finished meanwhile, not only one that frees a slot
        self.sub.submit(
            fn,
            spec or self.spec,
            *args,
            then=lambda out: self.took(out, cid, sig, kind),
            failed=lambda exc: self.took(_lost(entries, exc), cid, sig, kind),
            weight=weight,
            kind=kind,
        )

    def took(self, out: Outcome, cid: str | None, sig: str | None = None, kind: str = "files") -> None:
        if kind == "cleanup":  # the last part's pass over every part's directories: counted by their parts
            out.dirs = 0
            out.failures = [f for f in out.failures if f[0] not in self.dirs_failed]  # ours failed once already
        if kind in (
            "dirs",
            "cleanup",
        ):  # a directory not made (a planted link there) fails once, not again for its metadata
            self.dirs_failed.update(path for path, _ in out.failures)
        elif kind == "dirmeta":
            out.failures = [f for f in out.failures if f[0] not in self.dirs_failed]
        if cid is not None:
            self.big.settle(cid, out)
            if self.journal is not None and not out.failures:
                self.journal.record(cid, files=out.files, bytes=out.bytes, sig=sig)
        failures, out.failures = out.failures, []
        self.total.add(out)
        self.fail([(os.fsencode(path), "failed", error) for path, error in failures])  # exact bytes back
        if not self.streaming:
            self.progress.update({**self.counts(), **self.totals})

    def fail(self, problems: list[tuple[bytes | str, str, str]]) -> None:
        self.failed += len(problems)
        self.problems.add(problems)

    def counts(self) -> dict[str, int]:
        return {**self.total.counts(), "failed": self.failed}

    def skip(self, cid: str, entries: list[Entry] | None = None) -> bool:
        """True (and counted) when the journal lists ``cid`` as done, with the same entries when
        ``entries`` is given (a chunk is known by what it holds, not only by its number)."""
        rec = self.done.get(cid)
        if rec is None or (entries is not None and rec.get("sig") != chunk_sig(entries)):
            return False
        self.resumed += 1
        if entries is not None:
            self.accounted += len(entries)
        return True

    # streaming (copy while the scan walks) ---------------------------------

    def start_streaming(self, con: duckdb.DuckDBPyConnection) -> None:
        """Chunks come in while the scan walks (and reports progress): :meth:`stream_part`.  ``con``: the
        streamer's connection, locked to the manifest's directory; the phases select there too."""
        self.streaming = True
        self.streamed_on = con

    def stream_part(self, name: str, chunks: Iterator[Chunk]) -> None:
        """Copy a part's streamable rows: chunks named after the part and their place in it, so a resumed
        run (same manifest) makes the same chunks and skips the ones its journal lists."""
        self.sub.poll()
        for i, chunk in enumerate(chunks):
            cid = f"p{name}.{i}"
            self.planned += len(chunk.entries)
            if not self.skip(cid, chunk.entries):
                self.accounted += len(chunk.entries)
                self.submit(copy_files, chunk.entries, entries=chunk.entries, cid=cid, kind="stream")
        self.streamed_parts.append(name)

    def end_streaming(self) -> None:
        self.sub.drain()
        self.streamed_files = self.total.files + self.total.symlinks
        self.streaming = False

    # phases ---------------------------------------------------------------

    def close(self) -> None:
        """Free the selection's connection (``dask_pfs.manifests.manifest.Selection.close``)."""
        if self.rows is not None:
            self.rows.close()

    def run(self, m: Manifest, begin_journal: Callable[[], None]) -> None:
        links = self.spec.dst_local
        parts = tuple(self.streamed_parts)
        self.rows = rows = CopyRows(m, self.where, self.limits.split_size, links, parts, on=self.streamed_on)
        self.timed("check", rows.check_paths)  # with the totals and the census the phases consult: one query
        self.totals.update(rows.totals())
        begin_journal()
        self.progress.start(f"copy {self.target.src.url} -> {self.target.dst.url}")
        try:
            with self.sub:
                if self.target.make_root and self.spec.dst_has_dirs:
                    make_root(self.target.dst)
                self.timed("check", self.record_scan_errors)
                self.timed("dirs", self.phase_dirs)
                self.timed("files", self.phase_files)
                if links:
                    self.timed("links", self.phase_links)
                self.timed("meta", self.phase_dir_meta)
        finally:
            self.big.abort_open()
            self.progress.stop()

    def timed(self, name: str, step: Callable[[], None]) -> None:
        t0 = time.monotonic()
        step()
        self.phases[name] = round(self.phases.get(name, 0.0) + time.monotonic() - t0, 3)

    def batches(self, sql: str) -> Iterator[pa.RecordBatch]:
        assert self.rows is not None
        return self.rows.batches(sql)

    def record_scan_errors(self) -> None:
        assert self.rows is not None
        if not self.rows.has_scan_errors():
            return
        for batch in self.batches(self.rows.scan_errors_sql()):
            paths, errors = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            self.fail([(path, "failed", f"scan: {error}") for path, error in zip(paths, errors, strict=True)])

    def in_chunks(
        self, kind: str, fn: Callable, sql: str, size: int, rows: CopyRows | None = None, spec: CopySpec | None = None
    ) -> None:
        """``fn(spec, entries)`` over the rows of ``sql`` (of ``rows``, else the job's) in chunks of
        ``size``; wait for all of them."""
        buf: list[Entry] = []
        last = None
        for batch in (rows or self.rows).batches(sql):  # type: ignore[union-attr]
            for e in entries_from_batch(batch):
                if e.out_rel == last:  # a repeated row (in path order: adjacent): made and counted once
                    continue
                last = e.out_rel
                buf.append(e)
                if len(buf) >= size:
                    self.submit(fn, buf, entries=buf, kind=kind, spec=spec)
                    buf = []
        if buf:
            self.submit(fn, buf, entries=buf, kind=kind, spec=spec)
        self.sub.drain()

    def phase_dirs(self) -> None:
        if self.group is not None:  # before anything is written: the last part settles (and cleans) its directories
            Ledger(self.group).add(self.where)
        assert self.rows is not None
        if self.spec.dst_has_dirs and self.rows.has_dirs():
            self.in_chunks("dirs", make_dirs, self.rows.dirs_sql(), DIR_CHUNK)

    def phase_files(self) -> None:
        assert self.rows is not None
        if not self.rows.has_files():
            return
        planner = Planner(self.limits, split=self.spec.dst_local or has_multipart(self.spec))
        for batch in self.batches(self.rows.files_sql()):
            for e in entries_from_batch(batch, self.target.rename):
                for item in planner.add(e):
                    self.submit_item(item)
        for item in planner.finish():
            self.submit_item(item)
        self.sub.drain()

    def submit_item(self, item: Chunk | BigFile) -> None:
        # a streamed run numbers only what the scan left: its ids must never match a resumed run's full plan
        cid = f"{'s' if self.streamed_parts else ''}{'c' if isinstance(item, Chunk) else 'b'}{self.seq}"
        self.seq += 1
        entries = item.entries if isinstance(item, Chunk) else [item.entry]
        self.planned += len(entries)
        if self.skip(cid, entries):
            return
        self.accounted += len(entries)
        if isinstance(item, Chunk):
            self.submit(copy_files, item.entries, entries=item.entries, cid=cid)
        else:
            self.big.submit(item, cid)

    def phase_links(self) -> None:
        assert self.rows is not None
        if not self.rows.has_links():
            return
        buf: list[tuple[Entry, bytes]] = []
        for batch in self.batches(self.rows.links_sql()):
            for e, first in zip(entries_from_batch(batch), link_firsts(batch), strict=True):
                buf.append((e, first))
                self.planned += 1  # never journaled: always linked again
                self.accounted += 1
                if len(buf) >= self.limits.files:
                    self.submit(link_files, buf, entries=[p[0] for p in buf], kind="links")
                    buf = []
        if buf:
            self.submit(link_files, buf, entries=[p[0] for p in buf], kind="links")
        self.sub.drain()

    def unaccounted(self) -> int:
        """Selected non-directory entries that no chunk of the plan holds, or that were neither run
        now nor skipped as journaled with the same entries (a resume checks this before it deletes
        its journal)."""
        return max(self.totals["total_files"] - self.planned, 0) + (self.planned - self.accounted)

    def phase_dir_meta(self) -> None:
        if not self.spec.dst_local:
            return
        if self.group is None:
            self.settle(self.rows)
            return
        # a part of a group: the last one still running settles every part's directories, holding
        # the gate meanwhile so that no part joins (and writes) while they turn read-only
        with self.group.alone() as alone:
            if not alone:
                return  # other parts still write below these directories: the last one settles them
            ledger = Ledger(self.group)
            settled, union = ledger.union()
            assert self.rows is not None
            where = union if settled else self.where  # (our own record is there, unless removed by hand)
            rows = CopyRows(self.rows.m, where, self.limits.split_size, self.spec.dst_local, ())
            try:
                # no part of this job is left running: its temp files there are stale (a killed
                # part's); another job's, or a user's file named like one, are not ours to remove
                cleanup = replace(self.spec, sweep_temps=True, check_existing=True)
                if rows.has_dirs():
                    self.in_chunks("cleanup", make_dirs, rows.dirs_sql(), DIR_CHUNK, rows, cleanup)
                pinned = PinnedRoot(self.spec.dst_root)  # and in the root itself (no manifest row)
                try:
                    pinned.remove_stale_temps(b"", self.spec.token)
                finally:
                    pinned.close()
                self.settle(rows)
            finally:
                rows.close()
            ledger.clear(settled)

    def settle(self, rows: CopyRows | None) -> None:
        """Modes and times of the directories of ``rows`` (deepest first), then the destination root's."""
        assert rows is not None
        if rows.has_dirs():
            self.in_chunks("dirmeta", set_dir_meta, rows.dirs_sql(descending=True), DIR_CHUNK, rows)
        if self.target.make_root and self.spec.src_local and os.path.isdir(self.target.src.path):
            s = os.stat(self.target.src.path)
            root = Entry(b"", "directory", 0, s.st_mtime_ns, s.st_atime_ns, s.st_mode, s.st_uid, s.st_gid)
            self.took(set_dir_meta(self.spec, [root]), None)


def chunk_sig(entries: list[Entry]) -> str:
    """What a chunk holds, in a few bytes: its size and its first and last destination names."""
    first, last = entries[0], entries[-1]
    return ident(str(len(entries)), first.out_rel.hex(), last.out_rel.hex())


def _lost(entries: list[Entry], exc: BaseException) -> Outcome:
    """The task itself failed after its retries (e.g. workers kept dying): each of its entries failed."""
    out = Outcome()
    for e in entries:
        out.fail(e.out_rel, exc)
    return out
