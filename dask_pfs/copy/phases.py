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
from typing import TYPE_CHECKING

import pyarrow as pa

from operators.copy import CopySpec, Entry, Outcome, copy_files, link_files, make_dirs, set_dir_meta
from operators.copy_multipart import has_multipart
from operators.copy_plan import BigFile, Chunk, ChunkLimits, Planner, entries_from_batch, link_firsts
from operators.journal import Journal

from ..locking import Held
from ..manifest import Manifest
from ..progress import Reporter
from ..results import ProblemLog
from ..runtime import Submitter
from ..sql import Filter
from ..urls import make_root
from .bigfiles import BigFiles
from .group import Ledger
from .rows import CopyRows
from .target import Target

if TYPE_CHECKING:
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
        self.seq = 0  # file items in plan order: the chunk ids (deterministic for one manifest)
        self.big = BigFiles(self)
        self.streamed_parts: list[str] = []  # manifest parts whose streamable rows were copied during the scan
        self.streamed_files = 0
        self.streaming = False  # the scan reports progress meanwhile
        self.rows: CopyRows | None = None
        self.group = group  # the shared lock of a part of a group (``copy.group``), else None

    # submitting -----------------------------------------------------------

    def submit(
        self, fn: Callable, *args, entries: list[Entry], cid: str | None = None, weight: int = 1, kind: str = "files"
    ) -> None:
        """``fn(spec, *args)`` for ``entries``; a task lost after its retries fails each of them."""
        self.sub.submit(
            fn,
            self.spec,
            *args,
            then=lambda out: self.took(out, cid),
            failed=lambda exc: self.took(_lost(entries, exc), cid),
            weight=weight,
            kind=kind,
        )

    def took(self, out: Outcome, cid: str | None) -> None:
        if cid is not None:
            self.big.settle(cid, out)
            if self.journal is not None and not out.failures:
                self.journal.record(cid, files=out.files, bytes=out.bytes)
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

    def skip(self, cid: str) -> bool:
        """True (and counted) when the journal lists ``cid`` as done."""
        if cid in self.done:
            self.resumed += 1
            return True
        return False

    # streaming (copy while the scan walks) ---------------------------------

    def start_streaming(self) -> None:
        """Chunks come in while the scan walks (and reports progress): :meth:`stream_part`."""
        self.streaming = True

    def stream_part(self, name: str, chunks: Iterator[Chunk]) -> None:
        """Copy a part's streamable rows: chunks named after the part and their place in it, so a resumed
        run (same manifest) makes the same chunks and skips the ones its journal lists."""
        self.sub.poll()
        for i, chunk in enumerate(chunks):
            cid = f"p{name}.{i}"
            if not self.skip(cid):
                self.submit(copy_files, chunk.entries, entries=chunk.entries, cid=cid, kind="stream")
        self.streamed_parts.append(name)

    def end_streaming(self) -> None:
        self.sub.drain()
        self.streamed_files = self.total.files + self.total.symlinks
        self.streaming = False

    # phases ---------------------------------------------------------------

    def run(self, m: Manifest, begin_journal: Callable[[], None]) -> None:
        links = self.spec.dst_local
        self.rows = rows = CopyRows(m, self.where, self.limits.split_size, links, tuple(self.streamed_parts))
        self.timed("check", rows.check_paths)
        self.timed("check", lambda: self.totals.update(rows.totals()))
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
        for batch in self.batches(self.rows.scan_errors_sql()):
            paths, errors = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            self.fail([(path, "failed", f"scan: {error}") for path, error in zip(paths, errors, strict=True)])

    def in_chunks(self, kind: str, fn: Callable, sql: str, size: int) -> None:
        """``fn(spec, entries)`` over the rows of ``sql`` in chunks of ``size``; wait for all of them."""
        buf: list[Entry] = []
        for batch in self.batches(sql):
            for e in entries_from_batch(batch):
                buf.append(e)
                if len(buf) >= size:
                    self.submit(fn, buf, entries=buf, kind=kind)
                    buf = []
        if buf:
            self.submit(fn, buf, entries=buf, kind=kind)
        self.sub.drain()

    def phase_dirs(self) -> None:
        if self.spec.dst_has_dirs:
            assert self.rows is not None
            self.in_chunks("dirs", make_dirs, self.rows.dirs_sql(), DIR_CHUNK)

    def phase_files(self) -> None:
        assert self.rows is not None
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
        if self.skip(cid):
            return
        if isinstance(item, Chunk):
            self.submit(copy_files, item.entries, entries=item.entries, cid=cid)
        else:
            self.big.submit(item, cid)

    def phase_links(self) -> None:
        assert self.rows is not None
        buf: list[tuple[Entry, bytes]] = []
        for batch in self.batches(self.rows.links_sql()):
            for e, first in zip(entries_from_batch(batch), link_firsts(batch), strict=True):
                buf.append((e, first))
                if len(buf) >= self.limits.files:
                    self.submit(link_files, buf, entries=[p[0] for p in buf], kind="links")
                    buf = []
        if buf:
            self.submit(link_files, buf, entries=[p[0] for p in buf], kind="links")
        self.sub.drain()

    def phase_dir_meta(self) -> None:
        if not self.spec.dst_local:
            return
        assert self.rows is not None
        rows, ledger = self.rows, None
        settled: list[str] = []
        if self.group is not None:
            ledger = Ledger(self.group)
            ledger.add(self.where)
            if not self.group.sole():
                return  # other parts still write below these directories: the last one settles them
            settled, union = ledger.union()
            if settled:
                rows = CopyRows(rows.m, union, self.limits.split_size, self.spec.dst_local, ())
        self.in_chunks("dirmeta", set_dir_meta, rows.dirs_sql(descending=True), DIR_CHUNK)
        if self.target.make_root and self.spec.src_local and os.path.isdir(self.target.src.path):
            s = os.stat(self.target.src.path)
            root = Entry(b"", "directory", 0, s.st_mtime_ns, s.st_atime_ns, s.st_mode, s.st_uid, s.st_gid)
            self.took(set_dir_meta(self.spec, [root]), None)
        if ledger is not None:
            ledger.clear(settled)


def _lost(entries: list[Entry], exc: BaseException) -> Outcome:
    """The task itself failed after its retries (e.g. workers kept dying): each of its entries failed."""
    out = Outcome()
    for e in entries:
        out.fail(e.out_rel, exc)
    return out
