"""Keeping destructive actions inside their root.

A manifest row names a path *relative* to a root.  Before anything is deleted or overwritten,
every selected row goes through :func:`resolve_under`: no absolute path, no ``..``, and no
ancestor (strictly between the root and the entry) that is a symlink on disk *now*, since a
directory swapped for a link after the scan would send the action somewhere else.  Ancestors
are checked with ``lstat`` and cached per directory, so a chunk of sibling rows costs one
``lstat`` per distinct directory, not per row.
"""

from __future__ import annotations

import os
import stat as st
from dataclasses import dataclass, field

from operators.names import UnsafePathError, check_relative, decode, depth, split_parent


def full_path(root: bytes, rel: bytes) -> bytes:
    """``root/rel`` for a checked relative path (``rel == b""`` is the root itself)."""
    if not rel:
        return root
    return root + rel if root.endswith(b"/") else root + b"/" + rel


@dataclass
class AncestorCheck:
    """Refuses paths that pass through a symlinked (or non-directory) ancestor below ``root``.

    One instance per chunk of rows: ``cache`` maps a relative directory to ``None`` (a real
    directory or missing) or the reason it is unsafe.
    """

    root: bytes
    cache: dict[bytes, str | None] = field(default_factory=dict)

    def ancestor_problem(self, rel: bytes) -> str | None:
        """Why ``rel`` is unsafe to act on through its parents, or ``None``."""
        parts = rel.split(b"/")
        prefix = b""
        for part in parts[:-1]:
            prefix = prefix + b"/" + part if prefix else part
            if prefix not in self.cache:
                self.cache[prefix] = self._probe(prefix)
            problem = self.cache[prefix]
            if problem is not None:
                return problem
        return None

    def _probe(self, rel_dir: bytes) -> str | None:
        try:
            s = os.lstat(full_path(self.root, rel_dir))
        except FileNotFoundError:
            return None  # gone: acting below it finds nothing, and cannot escape
        except OSError as exc:
            return f"cannot check ancestor {os.fsdecode(rel_dir)!r}: {exc.strerror}"
        if st.S_ISLNK(s.st_mode):
            return f"ancestor {os.fsdecode(rel_dir)!r} is a symlink"
        return None  # a directory, or a file where one was (nothing below it to reach)


def resolve_under(root: bytes, rel: bytes, ancestors: AncestorCheck | None = None) -> bytes:
    """The absolute path of manifest row ``rel`` under ``root``; :class:`UnsafePathError` if it could escape.

    ``ancestors`` (local file systems only) adds the "no symlinked directory on the way" check.
    """
    check_relative(rel)
    if ancestors is not None:
        problem = ancestors.ancestor_problem(rel)
        if problem is not None:
            raise UnsafePathError(problem)
    return full_path(root, rel)


def check_paths(root: bytes, rels: list[bytes], local: bool, limit: int = 20) -> tuple[int, list[tuple[bytes, str]]]:
    """Check a chunk of relative paths; return (number refused, first ``limit`` (path, reason))."""
    ancestors = AncestorCheck(root) if local else None
    refused = 0
    samples: list[tuple[bytes, str]] = []
    for rel in rels:
        try:
            resolve_under(root, rel, ancestors)
        except UnsafePathError as exc:
            refused += 1
            if len(samples) < limit:
                samples.append((rel, str(exc)))
    return refused, samples


def row_damage(path: str, raw: bytes | None, name: str | None, parent: str | None, level: int | None) -> str | None:
    """Why a manifest row disagrees with its own ``path``, or ``None``.

    A where-clause selects by any column, a removal acts on ``path`` (``path_raw``): a row whose
    ``name``, ``parent``, ``depth`` or raw bytes say something else would let a clause on one entry
    remove another (a rewritten ``name`` sending ``name LIKE '%.tmp'`` to ``data/keep.db``).  The
    scan derives all of them from the path (``operators.rows``); any difference is damage.
    ``None`` for a column the rows do not carry (a frozen selection has no name or parent).
    """
    if raw is not None and decode(raw)[0] != path:
        return "path_raw is not the bytes of path"
    want_parent, want_name = split_parent(path)
    if name is not None and name != want_name:
        return f"name {name!r}, its path says {want_name!r}"
    if parent is not None and parent != want_parent:
        return f"parent {parent!r}, its path says {want_parent!r}"
    if level is not None and level != depth(path):
        return f"depth {level}, its path says {depth(path)}"
    return None
