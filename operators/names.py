"""Exact, reversible encoding of file names and paths in manifests.

POSIX names are bytes; Parquet and DuckDB string columns must be valid UTF-8.  pfs keeps
both properties: ``path`` (and ``link_target``) is the UTF-8 text of the name, with any
byte that is not valid UTF-8 shown as ``\\xNN`` (Python's ``backslashreplace``), and the
sibling column ``path_raw`` (``link_target_raw``) holds the exact bytes *only* for such
names and is null otherwise.  Acting on a manifest always goes through :func:`to_bytes`,
so non-UTF-8 names reach the very same bytes they were scanned from.
"""

from __future__ import annotations

import posixpath


def decode(raw: bytes) -> tuple[str, bytes | None]:
    """Return ``(text, raw_or_None)``: raw bytes are kept only when text cannot represent them."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace"), raw


def to_bytes(text: str, raw: bytes | None) -> bytes:
    """The exact bytes of a manifest path: ``raw`` when present, else the UTF-8 text."""
    return raw if raw is not None else text.encode("utf-8")


def join(rel_dir: bytes, name: bytes) -> bytes:
    """Join a relative directory (``b""`` for the root) and an entry name."""
    return rel_dir + b"/" + name if rel_dir else name


def split_parent(path: str) -> tuple[str, str]:
    """``("a/b", "c")`` for ``"a/b/c"``; the parent of a top-level entry is ``""``."""
    parent, _, name = path.rpartition("/")
    return parent, name


def depth(path: str) -> int:
    """Number of components: 1 for a direct child of the root."""
    return path.count("/") + 1 if path else 0


class UnsafePathError(ValueError):
    """A manifest path that could escape the root it is relative to."""


def check_relative(path: bytes) -> bytes:
    """Refuse absolute paths, ``..`` components and empty components; return ``path`` unchanged.

    Destructive actions call this on every row before touching anything, so a tampered or
    hand-made manifest cannot reach outside its root.
    """
    if not path:
        raise UnsafePathError("empty path")
    if path.startswith(b"/"):
        raise UnsafePathError(f"absolute path {path!r}")
    for part in path.split(b"/"):
        if part in (b"", b".", b".."):
            raise UnsafePathError(f"path component {part!r} in {path!r}")
    if b"\0" in path:
        raise UnsafePathError(f"NUL byte in {path!r}")
    return path


def normalize_rel(path: str) -> str:
    """Canonical ``/``-separated relative path (no leading ``./``, no trailing ``/``)."""
    norm = posixpath.normpath(path)
    return "" if norm == "." else norm
