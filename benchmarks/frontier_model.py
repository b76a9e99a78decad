"""How long the scan driver's frontier gets on a pfs-sim tree, without running a scan.

    frontier_model.py --entries 100000000 --shape mix [--slots 32] [--task-entries 12000] [--newest-first]

Runs the driver's own splitting rule (``dask_pfs.runtime.submitter.next_slice``) over the tree's directory nodes
(``simfs.Tree``: no listings, no rows): each task walks breadth-first from its directories until it has
seen ``--task-entries`` entries (what a 1-s task budget gave on the test host) and hands the rest back;
tasks finish in the order they started.  Prints tasks and the peak frontier (directories the driver holds).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.simfs import Tree, TreeSpec
from dask_pfs.runtime.submitter import WalkTuning, next_slice


def child(rel: str, i: int) -> str:
    return f"{rel}/d{i:04d}" if rel else f"d{i:04d}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=10_000_000)
    p.add_argument("--shape", default="mix")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slots", type=int, default=32, help="Dask task slots (workers x 4)")
    p.add_argument("--task-entries", type=int, default=12_000)
    p.add_argument("--newest-first", action="store_true", help="hand out the newest directories first")
    a = p.parse_args()
    tree = Tree(TreeSpec(entries=a.entries, shape=a.shape, seed=a.seed, fanout=10, files=100))
    tuning = WalkTuning()

    def task(items: list) -> tuple[int, list]:
        pending, seen = deque(rel for rel, _ in items), 0
        while pending and seen < a.task_entries:
            rel = pending.popleft()
            node = tree.node(rel)
            seen += node.files + len(node.children)
            pending.extend(child(rel, i) for i in range(len(node.children)))
        return seen, [(rel, None) for rel in pending]

    frontier: deque = deque([("", None)])
    running: deque = deque()
    max_inflight = a.slots * tuning.inflight_per_slot
    peak = tasks = entries = 0
    t0 = time.process_time()
    while frontier or running:
        while frontier and len(running) < max_inflight:
            if a.newest_first:
                frontier.reverse()  # next_slice takes from the left
            items, _ = next_slice(frontier, len(running), max_inflight, a.slots, tuning)
            if a.newest_first:
                frontier.reverse()
            running.append(items)
            tasks += 1
        seen, back = task(running.popleft())
        entries += seen
        frontier.extend(back)
        peak = max(peak, len(frontier))
    order = "newest first" if a.newest_first else "oldest first"
    print(
        f"{a.shape} {a.entries:,} entries ({order}): {tasks:,} tasks, peak frontier {peak:,} directories "
        f"({entries:,} entries walked, {time.process_time() - t0:.0f} s CPU)"
    )


if __name__ == "__main__":
    main()
