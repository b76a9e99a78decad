"""Allowed roots: the places a job may touch, pinned by whoever wrote the job (a DAG author, an admin's
connection), not by whoever fills in its arguments (an Airflow run's conf, a template).

One check, :func:`check_allowed`, called by the Airflow operators before any I/O and again by the engine
(:meth:`dask_pfs.remote.driver.JobSpec.call`, on the host that does the I/O, so symbolic links are resolved
where they point).  A place is allowed when, after resolving ``..`` and (for local paths) symbolic links,
it is one of the roots or lies below one.  Several sets of roots (the operator's and the connection's) must
each allow it.  Object-store URLs compare by protocol, bucket or host and the normalised key, never by the
credentials a URL may carry.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from dask_pfs.errors import PfsError
from dask_pfs.redact import redact

LOCAL = ("", "file", "local")


def place_key(place: str) -> str:
    """A comparable form of a path or URL: a local path with ``..`` and links resolved, a URL as
    ``protocol://host/normalised/path`` (user info dropped: it is no part of the place)."""
    text = os.fspath(place).strip()
    protocol = text.split("://", 1)[0].lower() if "://" in text else ""
    if protocol in LOCAL:
        path = text.split("://", 1)[1] if protocol else text
        if not os.path.isabs(path):
            raise PfsError(f"{path!r} is not an absolute path: allowed roots compare absolute places only")
        return os.path.realpath(path)
    parts = urlsplit(text)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    path = posixpath.normpath("/" + parts.path.lstrip("/")) if parts.path.strip("/") else "/"
    return f"{protocol}://{host}{path.rstrip('/') or '/'}"


def is_under(key: str, root: str) -> bool:
    """``key`` is ``root`` or below it (both from :func:`place_key`)."""
    return key == root or key.startswith(root.rstrip("/") + "/")


def normalise_roots(roots: Iterable[str] | str | None, what: str = "allowed_roots") -> tuple[str, ...]:
    """Roots as given by a user: a list of paths/URLs, or one string of them separated by commas (a
    connection's extra field); ``()`` for none.  A relative path or an empty entry is an error."""
    if roots is None:
        return ()
    items = roots.split(",") if isinstance(roots, str) else list(roots)
    found = []
    for item in items:
        if not isinstance(item, str | os.PathLike) or not os.fspath(item).strip():
            raise PfsError(f"{what}: each root must be a non-empty path or URL, got {item!r}")
        text = os.fspath(item).strip()
        if "://" not in text and not os.path.isabs(text):
            raise PfsError(f"{what}: {text!r} is not an absolute path")
        found.append(text)
    if isinstance(roots, str) and not found:
        raise PfsError(f"{what}: no root in {roots!r}")
    return tuple(found)


def check_allowed(places: Mapping[str, str | None], *root_sets: Sequence[str]) -> None:
    """PfsError naming the first place (``{what: path or URL}``) that is not under one root of every
    non-empty set in ``root_sets``; nothing to check when no set has roots."""
    sets = [tuple(place_key(r) for r in roots) for roots in root_sets if roots]
    if not sets:
        return
    for what, place in places.items():
        if place is None:
            continue
        key = place_key(place)
        for roots in sets:
            if not any(is_under(key, root) for root in roots):
                shown = redact(str(place)) + (f" (resolves to {redact(key)})" if key != str(place).rstrip("/") else "")
                raise PfsError(f"{what}: {shown} is outside the allowed roots {', '.join(map(redact, roots))}")
