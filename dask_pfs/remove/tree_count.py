"""A bounded count of a local tree, for the question ``pfs rm TREE`` asks before removing it.

Never the job itself (the removal streams its walk on the cluster): a look of at most ``seconds``
so the prompt can say how much goes, and "at least" when the tree is bigger than the look.
"""

from __future__ import annotations

import os
import time

from dask_pfs.runtime.progress import human_bytes
from dask_pfs.urls import Location


def describe_tree(loc: Location, seconds: float = 1.0) -> str:
    """``" (1,234 files and links, 56 directories, 7.8 MiB)"`` below ``loc`` (``at least ...`` when the look
    ran out of time); ``""`` for a tree that is not local."""
    if not loc.is_local:
        return ""
    files = dirs = size = 0
    stack, deadline = [loc.path], time.monotonic() + seconds
    while stack:
        if time.monotonic() > deadline:
            break
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        dirs += 1
                        stack.append(e.path)
                    else:
                        files += 1
                        size += e.stat(follow_symlinks=False).st_size if e.is_file(follow_symlinks=False) else 0
        except OSError:
            continue
    text = f"{files:,} files and links, {dirs:,} directories, {human_bytes(size)}"
    return f" (at least {text}: counting stopped)" if stack else f" ({text})"
