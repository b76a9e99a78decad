"""Turning a user's URL or path into an fsspec file system, with clear errors.

Local paths (and ``file://`` URLs) are what NFS, Lustre, CephFS and GlusterFS mounts look like;
they get the scandir fast path.  Everything else goes through fsspec, and a protocol whose
package is missing names the pfs extra that installs it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import fsspec
from fsspec.registry import available_protocols

from operators.prune import Prune

from .errors import PfsError

EXTRAS = {
    "s3": "s3",
    "s3a": "s3",
    "sftp": "sftp",
    "ssh": "sftp",
}


@dataclass(frozen=True)
class Location:
    """A resolved URL: protocol, path within the file system and the options to open it."""

    url: str
    protocol: str
    path: str
    storage_options: dict = field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        return self.protocol in ("file", "local")

    def filesystem(self) -> fsspec.AbstractFileSystem:
        return fsspec.filesystem(self.protocol, **self.storage_options)

    def child(self, rel: str) -> str:
        """The URL of ``rel`` below this location."""
        return f"{self.url.rstrip('/')}/{rel}" if rel else self.url


def resolve(url: str | os.PathLike, storage_options: dict | None = None) -> Location:
    """Resolve ``url``; raise :class:`PfsError` naming the extra to install if a backend is missing."""
    url = os.fspath(url)
    protocol = fsspec.utils.get_protocol(url)
    if protocol in ("file", "local"):
        path = os.path.abspath(fsspec.utils.stringify_path(url.removeprefix("file://")))
        return Location(path, "file", path, dict(storage_options or {}))
    if protocol not in available_protocols():
        raise PfsError(f"unknown protocol {protocol!r} in {url!r}; known: file, s3, sftp, gs, az, http, ...")
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        extra = EXTRAS.get(protocol)
        hint = f"pip install 'pfs[{extra}]'" if extra else f"install the fsspec backend for {protocol!r}"
        raise PfsError(f"protocol {protocol!r} needs a package that is not installed: {hint} ({exc})") from None
    options = dict(storage_options or {})
    # sftp://user@host:port/path carries its connection in the URL
    options = {**cls._get_kwargs_from_urls(url), **options}
    path = cls._strip_protocol(url)
    return Location(url.rstrip("/") if url.endswith("/") and len(url) > 1 else url, protocol, path, options)


def pruned_at(loc: Location, prune: Prune | None) -> Prune | None:
    """``prune`` with the root's device filled in for ``one_file_system`` (local trees; object stores have none)."""
    if prune is None or not prune.one_file_system or not loc.is_local:
        return prune
    try:
        return replace(prune, device=os.stat(loc.path).st_dev)
    except OSError as exc:
        raise PfsError(f"{loc.url}: {exc.strerror}") from None
