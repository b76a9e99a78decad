"""A local path's file system without importing fsspec: the few calls pfs makes on a manifest or an output.

Importing fsspec (asyncio, importlib.metadata, its compression registry) was ~0.1 s of every small
command's start-up (issue 43), although a local path never needs it: :func:`url_to_fs` is
``fsspec.core.url_to_fs`` for every URL, except an absolute local path (plain, ``file://`` or
``local://``, no ``::`` chain, no options), which gets :class:`LocalFiles`: the calls pfs makes, with
``LocalFileSystem``'s meaning (paths as fsspec reads them: the trailing ``/`` dropped).
"""

from __future__ import annotations

import os
import shutil
from typing import IO, Any

LOCAL_PREFIXES = ("file://", "local://")


def plain_local(url: str) -> str | None:
    """The path fsspec's local file system reads in ``url`` when that reading is plain (an absolute path,
    maybe behind ``file://`` or ``local://``, nothing fsspec reads specially), else None."""
    for prefix in LOCAL_PREFIXES:
        if url.startswith(prefix):
            url = url[len(prefix) :]
            break
    if not url.startswith("/") or "::" in url or "://" in url:
        return None
    return url.rstrip("/") or "/"


class LocalFiles:
    """The calls pfs makes on a local fsspec file system (``protocol`` as ``LocalFileSystem``'s, so
    ``operators.core.outputs.is_local`` knows it), each as ``LocalFileSystem`` does it."""

    protocol = ("file", "local")

    def exists(self, path: str) -> bool:
        return os.path.exists(path)  # a symlink counts by its target, any error is "no", as fsspec's

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def ls(self, path: str, detail: bool = False) -> list[str]:
        """The entries' paths of a directory (unsorted), or ``[path]`` for anything else; FileNotFoundError."""
        if detail:
            raise NotImplementedError("LocalFiles.ls lists names only")
        path = path.rstrip("/") or "/"
        if not os.path.isdir(path):
            os.stat(path)  # FileNotFoundError for nothing there, as fsspec's info
            return [path]
        with os.scandir(path) as entries:
            return [e.path for e in entries]

    def rm(self, path: str, recursive: bool = False) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            if not recursive:
                raise ValueError("Cannot delete directory, set recursive=True")
            if os.path.abspath(path) == os.getcwd():
                raise ValueError("Cannot delete current working directory")
            shutil.rmtree(path)
        else:
            os.remove(path)

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> IO:
        if any(c in mode for c in "wax+"):
            raise ValueError("LocalFiles opens files to read them (outputs: operators.core.outputs)")
        return open(path, mode, **kwargs)


def url_to_fs(url: str, **options: Any) -> tuple[Any, str]:
    """``fsspec.core.url_to_fs(url, **options)``, with fsspec not imported for a plain local path."""
    path = plain_local(url) if not options else None
    if path is not None:
        return LocalFiles(), path
    import fsspec.core

    return fsspec.core.url_to_fs(url, **options)
