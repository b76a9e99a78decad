#!/usr/bin/env python3
"""The ceiling for a parallel remove: raw threads, no Dask, no bookkeeping.

    benchmarks/probe/prm.py DIR [-j 64] [--stat]

Lists every directory on a thread pool and unlinks each file as it is listed (``--stat`` also
lstat()s it first, as pfs does to report bytes), then removes the directories deepest first, each
level in parallel.  Every call is relative to the open directory (``fstatat``, ``unlinkat``), as
``rm -rf`` and ``pfs rm`` do: a full path costs a lookup per component.  What ``pfs rm`` is
compared with to tell its own overhead from the storage's.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("-j", "--jobs", type=int, default=64)
    ap.add_argument("--stat", action="store_true")
    a = ap.parse_args()

    def clear(path: str) -> tuple[list[str], int]:
        dirs, files = [], 0
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            with os.scandir(fd) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        dirs.append(os.path.join(path, e.name))
                        continue
                    if a.stat:
                        os.stat(e.name, dir_fd=fd, follow_symlinks=False)
                    os.unlink(e.name, dir_fd=fd)
                    files += 1
        finally:
            os.close(fd)
        return dirs, files

    t0 = time.monotonic()
    all_dirs, files = [a.dir], 0
    with ThreadPoolExecutor(a.jobs) as pool:
        pending = {pool.submit(clear, a.dir)}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                dirs, n = f.result()
                files += n
                all_dirs += dirs
                pending |= {pool.submit(clear, d) for d in dirs}
        by_depth: dict[int, list[str]] = {}
        for d in all_dirs:
            by_depth.setdefault(d.count("/"), []).append(d)
        for depth in sorted(by_depth, reverse=True):
            list(pool.map(os.rmdir, by_depth[depth]))
    s = time.monotonic() - t0
    print(f"{files} files, {len(all_dirs)} dirs in {s:.2f} s: {files / s:,.0f} files/s")


if __name__ == "__main__":
    main()
