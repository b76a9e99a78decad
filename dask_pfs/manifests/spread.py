"""The order cp and rm hand out manifest rows in: a few files of every directory at a time.

Creating or unlinking a name takes its directory's lock for the whole request (the Linux VFS holds the
directory inode's lock exclusively across ``create``/``unlinkat``, lookup included; NFS and FUSE servers
queue them the same way), so on a network mount a directory takes one such request per round trip however
many threads wait on it.  Chunks cut from rows in path order hold one or two directories each: with a few
chunks in flight, a tree of large directories moves a few requests per round trip.  Dealing the rows out
``PER_DIR`` from each directory at a time makes every chunk span many directories (the rate is directories in
flight / RTT), while a directory's files still come in path order, ``PER_DIR`` together (its descriptor is
opened once per chunk, ``native/core/src/parents.rs``).  A tree whose directories hold fewer than
``PER_DIR`` files keeps plain path order.
"""

from __future__ import annotations

PER_DIR = 32  # consecutive files of one directory in a chunk: a core slice's worth, a few round trips


def spread_order(per_dir: int = PER_DIR) -> str:
    """ORDER BY terms over a manifest relation (columns ``parent``, ``path``, ``path_raw``): deterministic,
    so a resumed job cuts the same chunks."""
    n = int(per_dir)
    return f"(row_number() OVER (PARTITION BY parent ORDER BY path, path_raw) - 1) // {n}, parent, path, path_raw"
