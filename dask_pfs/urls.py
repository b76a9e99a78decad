"""Locations: a user's URL or path as a file system and a path, and what is there.

Local paths (and ``file://`` URLs) are what NFS, Lustre, CephFS and GlusterFS mounts look like;
they get the scandir fast path.  Everything else goes through fsspec, and a protocol whose
package is missing names the pfs extra that installs it.  Every driver asks "a file, a directory
or nothing?" through :func:`probe`, and compares, creates and dates roots through the helpers
below.
"""

from __future__ import annotations

import os
import stat as st
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

from dask_pfs.errors import PfsError
from dask_pfs.places import LOCAL_PROTOCOLS, local_path, protocol_of

if TYPE_CHECKING:
    import fsspec
from operators.scan.prune import Prune
from operators.stores import is_store, store_at

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
        return self.protocol in LOCAL_PROTOCOLS

    def filesystem(self) -> fsspec.AbstractFileSystem:
        import fsspec  # not for a local path: ~0.1 s of a small command's start-up

        try:
            return fsspec.filesystem(self.protocol, **self.storage_options)
        except (ImportError, ValueError) as exc:  # gs/az: scan reaches them on obstore, other jobs through fsspec
            raise PfsError(f"{self.url}: this command reaches {self.protocol}:// through fsspec: {exc}") from None

    def child(self, rel: str) -> str:
        """The URL of ``rel`` below this location."""
        return f"{self.url.rstrip('/')}/{rel}" if rel else self.url


def resolve(url: str | os.PathLike, storage_options: dict | None = None) -> Location:
    """Resolve ``url``; raise :class:`PfsError` naming the extra to install if a backend is missing."""
    url = os.fspath(url)
    path = local_path(url)
    if path is not None:
        return Location(path, "file", path, dict(storage_options or {}))
    protocol = protocol_of(url)
    if is_store(protocol):  # S3, GCS, Azure: obstore (operators.stores) whatever fsspec backend is installed
        path = url.split("://", 1)[1].strip("/")
        if not path:
            raise PfsError(f"no bucket in {url!r}")
        return Location(url.rstrip("/"), protocol, path, dict(storage_options or {}))
    import fsspec
    from fsspec.registry import available_protocols

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


class Probe(NamedTuple):
    """What is at a location: ``kind`` is ``missing``, ``directory``, ``link`` (a symlink, not
    followed) or ``file`` (any other non-directory); ``size`` as the file system reports it."""

    kind: str
    size: int | None = None

    @property
    def exists(self) -> bool:
        return self.kind != "missing"


def probe(loc: Location, follow: bool = False) -> Probe:
    """Look at ``loc`` without following a final symlink (``follow``: through it, as ``stat``);
    PfsError when it cannot be looked at (permissions, a file where a directory should be)."""
    if loc.is_local:
        try:
            s = os.stat(loc.path, follow_symlinks=follow)
        except FileNotFoundError:
            return Probe("missing")
        except OSError as exc:
            raise PfsError(f"{loc.url}: {exc.strerror}") from None
        kind = "link" if st.S_ISLNK(s.st_mode) else "directory" if st.S_ISDIR(s.st_mode) else "file"
        return Probe(kind, s.st_size)
    if is_store(loc.protocol):
        return _probe_store(loc)
    try:
        info = loc.filesystem().info(loc.path)
    except FileNotFoundError:
        return Probe("missing")
    except OSError as exc:
        raise PfsError(f"{loc.url}: {exc}") from None
    return Probe("directory" if info.get("type") == "directory" else "file", info.get("size"))


def _probe_store(loc: Location) -> Probe:
    """An object (HEAD), a prefix with keys below it (a one-key listing) or a bucket: a directory."""
    import obstore

    try:
        store, key = store_at(loc.protocol, loc.path, loc.storage_options)
        if not key:
            obstore.list_with_delimiter(store, None)
            return Probe("directory", 0)
        try:
            return Probe("file", obstore.head(store, key)["size"])
        except FileNotFoundError:
            pass
        for page in obstore.list(store, key, chunk_size=1):
            return Probe("directory", 0) if page else Probe("missing")
        return Probe("missing")
    except FileNotFoundError:
        return Probe("missing")
    except Exception as exc:
        raise PfsError(f"{loc.url}: {exc}".splitlines()[0]) from None


def is_dir(loc: Location) -> bool:
    """A directory, or a symlink to one."""
    return probe(loc, follow=True).kind == "directory"


def is_inside(inner: Location, outer: Location) -> bool:
    """``inner`` is ``outer`` or below it (local paths compared after resolving symlinks)."""
    if not (inner.is_local and outer.is_local):
        same_fs = inner.protocol == outer.protocol
        return same_fs and (inner.path + "/").startswith(outer.path.rstrip("/") + "/")
    ri, ro = os.path.realpath(inner.path), os.path.realpath(outer.path)
    return ri == ro or ri.startswith(ro.rstrip("/") + "/")


def make_root(loc: Location) -> None:
    """Create the directory ``loc`` (and its parents) if missing."""
    if loc.is_local:
        os.makedirs(loc.path, exist_ok=True)
    elif is_store(loc.protocol):
        return  # keys have no directories to make
    else:
        loc.filesystem().makedirs(loc.path, exist_ok=True)


def root_times_from(src: Location, dst: Location) -> None:
    """Give the destination root the source root's times (local trees; others keep none)."""
    if src.is_local and dst.is_local and os.path.isdir(src.path) and os.path.isdir(dst.path):
        s = os.stat(src.path)
        os.utime(dst.path, ns=(s.st_atime_ns, s.st_mtime_ns))


def pruned_at(loc: Location, prune: Prune | None) -> Prune | None:
    """``prune`` with the root's device filled in for ``one_file_system`` (local trees; object stores have none)."""
    if prune is None or not prune.one_file_system or not loc.is_local:
        return prune
    try:
        return replace(prune, device=os.stat(loc.path).st_dev)
    except OSError as exc:
        raise PfsError(f"{loc.url}: {exc.strerror}") from None
