"""The driver's own walk of a fresh local scan: before, and for most local trees instead of, a cluster.

On a local or directly attached file system the compiled core lists and stats without the
interpreter lock on its own threads, so the driver's one process already keeps the host's cores
busy, and an embedded cluster (a scheduler and worker processes that each import the stack, ~1-2 s
of CPU per process here) only adds cost: a 2,011,110-entry local tree cost 11.6 s of CPU with the
cluster taking over after the first second, 9.4 s walked here (2 cores, benchmarks/RESULTS.md).

The walk goes in slices of :data:`SLICE`, each journaled as a task exactly as a worker's would be
(``scan_journal``: ``--resume`` after a kill keeps them), for up to :data:`DRIVER_SECONDS`; a tree
that takes longer hands its frontier to the cluster, which by then costs little next to the job.
Never on network or FUSE mounts (``TreeScan.start_here``): a process with files open on hung
storage cannot even exit, so there only the workers touch the tree.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

from dask_pfs.clusters.stall import in_thread_within_stall, storage_gone
from dask_pfs.runtime.progress import Reporter
from dask_pfs.scan import journal as sj
from operators.journal import Journal
from operators.root_identity import RootChangedError
from operators.scan.task import ScanSpec, scan_chunk
from operators.scan.walk import Budget, DirItem, Tally

# One slice: the unit of journaling and of a stall check (a slice stuck on storage ends the job).
SLICE = Budget(max_entries=400_000, max_seconds=1.0, lone_seconds=1.0)
# How long the driver walks before a cluster takes over the frontier: ~3-5 million entries of a
# warm local tree here; past it a cluster's start-up is small beside what is left.
DRIVER_SECONDS = 10.0


@dataclass
class HereResult:
    """What the driver walked: its slices' counts and parts, the directories left, and how many slices."""

    tally: Tally = field(default_factory=Tally)
    parts: list[str] = field(default_factory=list)
    frontier: list[DirItem] = field(default_factory=list)
    tasks: int = 0


def walk_here(
    spec: ScanSpec,
    root: DirItem,
    journal: Journal | None,
    progress: Reporter,
    seconds: float | None = None,
    budget: Budget | None = None,
) -> HereResult:
    """Walk from ``root`` in slices (tasks ``0000000``, ``0000001``...) until the tree is done or
    ``seconds`` (:data:`DRIVER_SECONDS`) have passed; each slice (:data:`SLICE`) is journaled
    before the next starts from its frontier."""
    seconds = DRIVER_SECONDS if seconds is None else seconds
    budget = budget or SLICE
    done = HereResult(frontier=[root])
    t0 = time.monotonic()
    while done.frontier and (done.tasks == 0 or time.monotonic() - t0 < seconds):
        items, tid = done.frontier, sj.task_id(0, done.tasks)
        try:
            # no worker to lose here: hung storage must still end the job within the stall timeout
            res = in_thread_within_stall(functools.partial(scan_chunk, spec, items, tid, budget))
        except RootChangedError as exc:  # unmounted under the driver's walk
            raise storage_gone(exc) from exc
        if journal is not None:
            sj.record(journal, res.task_id, [i[0] for i in items], res)  # durable before its frontier is used
        done.tally.add(res.tally)
        done.parts.extend(res.parts)
        done.frontier = res.frontier
        done.tasks += 1
        progress.update(done.tally.as_dict())
    return done
