"""Streamed copy: a live tree copied into a new local destination while the scan still walks it.

Each scan task's rows are copied as soon as the task is back (``scanning``'s ``on_parts``);
files create their missing directories.  The phases after the scan then do only what needs the
whole manifest: hard links, big files in ranges, directories, and every row a streamed part left
(``rows.streamable``).  The first files land while the walk still lists, and listing and reading
can load different servers at once (a metadata server and data servers); docs/performance.md has
the measurements.  The driver waits only when the copy tasks in flight fill the cluster (the copy
is then the slower side, and the walk may as well wait for it).
"""

from __future__ import annotations

import os

from dask_pfs.copy.phases import CopyJob
from dask_pfs.copy.rows import META, streamable
from dask_pfs.manifests.manifest import BATCH_ROWS, Manifest
from dask_pfs.manifests.spread import spread_order
from dask_pfs.manifests.sql import connect, literal
from operators.copy.plan import Chunk, Planner, entries_from_batch


class Streamer:
    """Feeds the parts of a scan's manifest directory to a :class:`CopyJob` as the scan writes them."""

    def __init__(self, job: CopyJob, manifest_dir: str) -> None:
        self.job = job
        self.manifest_dir = manifest_dir
        self.con = connect(dirs=[manifest_dir])  # pfs's own SQL over parts of a manifest still being written
        job.start_streaming(self.con)

    def close(self) -> None:
        """Free the connection (``Selection.close`` says why not to leave it to the collector)."""
        self.con.close()

    def on_parts(self, parts: list[str]) -> None:
        """``parts``: names of part files in the manifest directory."""
        for name in parts:
            sql = (  # one file (a parameter): a few rows of every directory at a time (manifests.spread)
                f"SELECT {META}, link_target, link_target_raw FROM read_parquet(?) "
                f"WHERE {streamable(self.job.limits.split_size)} ORDER BY {spread_order()}"
            )
            planner = Planner(self.job.limits, split=False)
            cur = self.con.cursor()
            batches = cur.sql(sql, params=[literal(os.path.join(self.manifest_dir, name))]).to_arrow_reader(BATCH_ROWS)
            items = [c for batch in batches for e in entries_from_batch(batch) for c in planner.add(e)]
            chunks = [c for c in [*items, *planner.finish()] if isinstance(c, Chunk)]  # no ranges: split=False
            self.job.stream_part(name, iter(chunks))

    def finish(self, m: Manifest) -> None:
        """Copy the parts not streamed yet (an interrupted run's scan), wait for the copies still running; the
        phases after the scan leave out what they copied."""
        seen = set(self.job.streamed_parts)
        self.on_parts([name for name in (os.path.basename(p) for p in m.part_files()) if name not in seen])
        self.job.end_streaming()
