"""Reading a place argument: the one function that says whether a path or URL is local, and where.

Paths, ``file://`` and ``local://`` URLs name the local file system (and the NFS, Lustre, CephFS
mounts on it); everything else is for fsspec (``dask_pfs.urls.resolve``).  Every reading of a
place goes through :func:`local_path` (``resolve``, manifests' roots and directories, the remote
driver's inputs, a plan's manifests, the Airflow operators' arguments): a ``local:///tmp/x`` read
by its own ``removeprefix("file://")`` became ``<cwd>/local:/tmp/x``.
"""

from __future__ import annotations

import os
import re

LOCAL_PROTOCOLS = ("file", "local")
# fsspec's reading of a URL's protocol (``fsspec.utils.get_protocol``: what precedes the first ``::`` or
# ``://``), here without importing fsspec, which a local command never needs (~0.1 s of its start-up)
_PROTOCOL = re.compile(r"(\:\:|\://)")


def protocol_of(text: str) -> str:
    """The protocol fsspec reads in ``text`` (``file`` for a plain path)."""
    parts = _PROTOCOL.split(text, maxsplit=1)
    return parts[0] if len(parts) > 1 else "file"


def local_text(place: str | os.PathLike) -> str | None:
    """The local path ``place`` names as written (a path, ``file://`` or ``local://`` URL; relative if it
    is), or None for a place on another file system."""
    text = os.fspath(place)
    if protocol_of(text) not in LOCAL_PROTOCOLS:
        return None
    for scheme in LOCAL_PROTOCOLS:
        text = text.removeprefix(f"{scheme}://")
    return text or "."


def local_path(place: str | os.PathLike) -> str | None:
    """The absolute local path ``place`` names (a path, ``file://`` or ``local://`` URL), or None
    for a place on another file system."""
    text = local_text(place)
    return None if text is None else os.path.abspath(text)
