"""A bounded, concurrent directory walk: the engine-free heart of a scan task.

A task is handed a few directories (``DirItem``s) and walks below them breadth-first on the
process's thread pool: listing jobs feed stat jobs, stat jobs feed new directories.  It stops
*starting* directories once its budget of entries or seconds is spent and hands the rest back
as its frontier, so the driver can spread that work over idle workers.  Backends only say how
to list one directory (:class:`Lister`); the scheduling here is shared by all of them.
"""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from operators.rows import Row, RowBuffer, with_error
from operators.scan.prune import DROP, KEEP, Prune
from operators.schema import ROW_COLUMNS

if TYPE_CHECKING:
    from operators.core.dirfd import DirFd, OpenDirs

_TYPE, _SIZE, _ERROR, _DEV = (ROW_COLUMNS.index(c) for c in ("type", "size", "error", "dev"))

# (path relative to the scan root, the directory's own row as its parent saw it; None for the root)
DirItem = tuple[bytes | str, Row | None]


@dataclass
class Listing:
    """What listing one directory (or one step of it) produced.

    ``pending`` holds jobs still running: each returns ``(rows, subdirs)`` or a further
    ``Listing``.  ``more`` is the next step of a big directory, which the walk submits only after
    it has taken this step's rows (and written a part if they filled the buffer): a step that
    submitted its successor itself would let a directory's listing run ahead of slow part writes,
    its rows piling up in the lister's sink (a 1,000,000-entry directory held 655,360 rows at once
    behind a 6 s write).  ``counts`` are tallies of rows a lister wrote to its sink itself (the
    compiled core), as ``((entries, files, symlinks, other, bytes, errors, pruned, directories),
    samples)``.  Only the ``final`` step of a directory brings the directory's own row.
    """

    item: DirItem
    vanished: bool = False
    error: BaseException | None = None
    rows: list[Row] = field(default_factory=list)
    subdirs: list[DirItem] = field(default_factory=list)
    pending: list[Future] = field(default_factory=list)
    more: Callable[[], Listing] | None = None
    counts: list[tuple[tuple[int, ...], list[str]]] = field(default_factory=list)
    final: bool = True


class Lister(Protocol):
    def list_dir(self, item: DirItem, pool: Executor) -> Listing: ...

    def root_error_row(self, error: BaseException) -> Row: ...

    def close(self) -> None: ...


@dataclass
class Tally:
    entries: int = 0
    files: int = 0
    directories: int = 0
    symlinks: int = 0
    other: int = 0
    bytes: int = 0
    errors: int = 0
    pruned: int = 0  # entries --exclude/--include/--max-depth left out (a directory: with all below it)
    error_samples: list[str] = field(default_factory=list)

    def count(self, row: Row) -> None:
        kind = row[_TYPE]
        self.entries += 1
        if kind == "file":
            self.files += 1
            self.bytes += row[_SIZE] or 0
        elif kind == "directory":
            self.directories += 1
        elif kind == "symlink":
            self.symlinks += 1
        else:
            self.other += 1
        err = row[_ERROR]
        if err is not None:
            self.errors += 1
            if len(self.error_samples) < 5:
                self.error_samples.append(f"{row[0]}: {err}")

    def add_counts(self, counts: tuple[int, ...], samples: list[str]) -> None:
        """Rows counted where they were made (the core): ``(entries, files, symlinks, other, bytes,
        errors, pruned, directories)`` and error samples."""
        entries, files, symlinks, other, nbytes, errors, pruned, directories = counts
        self.directories += directories
        self.entries += entries
        self.files += files
        self.symlinks += symlinks
        self.other += other
        self.bytes += nbytes
        self.errors += errors
        self.pruned += pruned
        room = 5 - len(self.error_samples)
        if room > 0 and samples:
            self.error_samples.extend(samples[:room])

    def add(self, other: Tally) -> None:
        for name in ("entries", "files", "directories", "symlinks", "other", "bytes", "errors", "pruned"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        room = 20 - len(self.error_samples)
        if room > 0:
            self.error_samples.extend(other.error_samples[:room])

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "error_samples"}


@dataclass
class Budget:
    """When a walk stops starting directories and hands the rest back as its frontier.

    A spent budget hands back only a frontier worth sharing: with one directory left and
    nothing in flight (a deep chain), the walk goes on, up to ``lone_seconds``, since a new
    task would cost a round trip to the scheduler and re-opening a deep path from the root.

    ``share_dirs`` (0: never) is for a cluster with idle workers: once the walk has started every directory
    it was handed and holds at least this many (waiting, or being listed: their subdirectories will wait),
    it starts no more and hands back what waits as soon as the listings in flight are in, whatever is
    left of its budget, so the driver can spread them over the idle workers.
    """

    max_entries: int = 50_000
    max_seconds: float = 1.0
    lone_seconds: float = 10.0
    share_dirs: int = 0


def walk(
    lister: Lister,
    items: list[DirItem],
    pool: Executor,
    concurrency: int | Callable[[], int],
    budget: Budget,
    emit: Callable[[RowBuffer], None],
    flush_rows: int = 200_000,
    prune: Prune | None = None,
    on_pruned: Callable[[Row, str], None] | None = None,
) -> tuple[Tally, list[DirItem]]:
    """Walk below ``items`` until the budget is spent; return the tally and the unstarted frontier.

    ``emit`` is called with the row buffer whenever it holds ``flush_rows`` rows and once at
    the end, so a task's memory is bounded by ``flush_rows`` and the rows of the jobs in flight
    (a step of a big directory: at most ``operators.scan.local.STEP_ENTRIES``), whatever the
    directory sizes.
    ``concurrency`` caps the listings in flight: a number, or a callable asked each round
    (the process's auto-tuned limit, ``operators.core.concurrency.in_flight_cap``).
    ``prune`` decides, for each listed entry, whether it is kept and whether a directory is entered
    (``operators.scan.prune``); ``on_pruned(row, decision)`` hears of every entry left out or not entered.
    """
    tally = Tally()
    buf = RowBuffer(getattr(lister, "sink", None))  # a lister on the core writes its rows there
    pending: deque[DirItem] = deque(items)
    handed, started = len(items), 0
    inflight: set[Future] = set()
    finished: queue.SimpleQueue[Future] = queue.SimpleQueue()  # O(1) per completion, unlike wait() on the set
    start = time.monotonic()

    def submit(fut: Future) -> None:
        inflight.add(fut)
        fut.add_done_callback(finished.put)

    def stop() -> bool:
        if budget.share_dirs and started >= handed and len(pending) + len(inflight) >= budget.share_dirs:
            return True
        elapsed = time.monotonic() - start
        if tally.entries < budget.max_entries and elapsed < budget.max_seconds:
            return False
        return len(pending) > 1 or bool(inflight) or elapsed >= budget.lone_seconds

    def sift(rows: list[Row], subdirs: list[DirItem]) -> tuple[list[Row], list[DirItem]]:
        """The rows to keep and the directories to enter, as ``prune`` decides."""
        if prune is None or not prune.active:
            return rows, subdirs
        kept = []
        for row in rows:
            decision = prune.decide(row[0], row[_TYPE] == "directory", row[_DEV])
            if decision == DROP:
                tally.pruned += 1
                if on_pruned is not None:
                    on_pruned(row, decision)
            else:
                kept.append(row)
        enter = []
        for item in subdirs:
            seen = item[1]
            if seen is None or (decision := prune.decide(seen[0], True, seen[_DEV])) == KEEP:  # None: the root
                enter.append(item)
                continue
            if decision == DROP:
                tally.pruned += 1
            else:
                kept.append(seen)  # STOP: its row, not its contents
            if on_pruned is not None:
                on_pruned(seen, decision)
        return kept, enter

    def take(rows: list[Row]) -> None:
        for row in rows:
            tally.count(row)
        buf.extend(rows)
        if len(buf) >= flush_rows:
            emit(buf)

    def fold(listing: Listing, own: bool) -> None:
        """A listing's (or a step's) rows, counts and directories; ``own``: its directory's row too."""
        own_row = None
        if own:
            _, own_row = listing.item
            if listing.vanished:
                own_row = None
            elif listing.error is not None:
                own_row = (
                    with_error(own_row, listing.error) if own_row is not None else lister.root_error_row(listing.error)
                )
        for counts, samples in listing.counts:
            tally.add_counts(counts, samples)
        rows, subdirs = sift(listing.rows, listing.subdirs)
        take(rows + ([own_row] if own_row is not None else []))
        pending.extend(subdirs)
        for fut in listing.pending:
            submit(fut)
        if listing.more is not None:  # after take(): the buffer is below flush_rows again
            submit(pool.submit(listing.more))

    while True:
        cap = concurrency() if callable(concurrency) else concurrency
        while pending and len(inflight) < cap and not stop():
            item = pending.popleft()
            started += 1
            submit(pool.submit(lister.list_dir, item, pool))
        if not inflight:
            break
        done = [finished.get()]
        while not finished.empty():
            done.append(finished.get())
        for fut in done:
            inflight.discard(fut)
            result = fut.result()
            if isinstance(result, Listing):  # a listing, or the next step of a big directory
                fold(result, own=result.final)
            else:  # a batch job: its rows, and directories it found to walk
                rows, subdirs = sift(*result)
                take(rows)
                pending.extend(subdirs)
    emit(buf)
    return tally, list(pending)


def open_listing(
    dirs: OpenDirs, item: DirItem, failed: Callable[[bytes, OSError, Listing], None]
) -> tuple[Listing, bytes, DirFd | None]:
    """The listing of a local directory, its path and its descriptor (``OpenDirs``: opened relative to its
    open parent; the caller releases it), or no descriptor when it could not be opened: ``failed(rel,
    error, listing)`` then says on the listing what that means to the job (scan and rm read it differently)."""
    rel = item[0]
    assert isinstance(rel, bytes)
    listing = Listing(item)
    try:
        return listing, rel, dirs.open(rel)
    except OSError as exc:
        failed(rel, exc, listing)
        return listing, rel, None
