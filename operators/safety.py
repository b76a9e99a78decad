"""Keeping destructive actions inside their root.

A manifest row names a path *relative* to a root.  Before anything is deleted or overwritten,
every selected row goes through :func:`resolve_under`: no absolute path, no ``..``, and no
ancestor (strictly between the root and the entry) that is a symlink on disk *now*, since a
directory swapped for a link after the scan would send the action somewhere else.  Ancestors
are checked with ``lstat`` and cached per directory, so a chunk of sibling rows costs one
``lstat`` per distinct directory, not per row.
"""

from __future__ import annotations

import contextlib
import os
import stat as st

from operators.core.dirfd import OpenDirs
from operators.names import UnsafePathError, check_relative, decode, depth, split_parent


def full_path(root: bytes, rel: bytes) -> bytes:
    """``root/rel`` for a checked relative path (``rel == b""`` is the root itself)."""
    if not rel:
        return root
    return root + rel if root.endswith(b"/") else root + b"/" + rel


class AncestorCheck:
    """Refuses paths that pass through a symlinked (or non-directory) ancestor below ``root``.

    One instance per chunk of rows.  Each directory is probed once, with ``fstatat`` relative to its
    parent's descriptor (``operators.core.dirfd.OpenDirs``: opened down from the root, ``O_NOFOLLOW``),
    never by its full path: a path past ``PATH_MAX`` (4,096 bytes) is checked like a short one, and a
    directory 1,000 levels down costs one probe, not one lookup per level (``cache``: a relative directory
    to ``None``, it and every directory above it real or missing, or the reason one of them is unsafe).
    """

    def __init__(self, root: bytes) -> None:
        self.root = root
        self.cache: dict[bytes, str | None] = {b"": None}
        self._dirs: OpenDirs | None = None

    def close(self) -> None:
        """Release the directories held open (also done when the check is collected)."""
        if self._dirs is not None:
            self._dirs.close()
            self._dirs = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def ancestor_problem(self, rel: bytes) -> str | None:
        """Why ``rel`` is unsafe to act on through its parents, or ``None``."""
        parent = rel.rpartition(b"/")[0]
        if parent in self.cache:
            return self.cache[parent]
        chain = []  # directories not probed yet, deepest first: up to one whose verdict is known
        while parent not in self.cache:
            chain.append(parent)
            parent = parent.rpartition(b"/")[0]
        problem = self.cache[parent]
        for rel_dir in reversed(chain):
            if problem is None:
                problem = self._probe(rel_dir)
            self.cache[rel_dir] = problem
        return problem

    def lstat(self, rel: bytes) -> os.stat_result:
        """``lstat`` of ``rel`` (below the root) relative to its parent's descriptor, opened down with
        ``O_NOFOLLOW`` (a symlinked ancestor: ``ELOOP``/``ENOTDIR``): never a full path, whatever its length."""
        if not rel:
            return os.stat(self.root, follow_symlinks=False)
        parent, _, name = rel.rpartition(b"/")
        if self._dirs is None:
            self._dirs = OpenDirs(self.root, size=32)
        handle = self._dirs.handle(parent)
        try:
            return os.stat(name, dir_fd=handle.fd, follow_symlinks=False)
        finally:
            handle.release()

    def _probe(self, rel_dir: bytes) -> str | None:
        """``rel_dir`` itself, every directory above it being a real one or missing."""
        parent, _, name = rel_dir.rpartition(b"/")
        if self._dirs is None:
            self._dirs = OpenDirs(self.root, size=32)
        try:
            handle = self._dirs.handle(parent)
        except FileNotFoundError:
            return None  # gone: nothing below it to reach
        except OSError as exc:  # a file where a directory was: ENOTDIR, as a full path's lstat said
            return f"cannot check ancestor {os.fsdecode(rel_dir)!r}: {exc.strerror}"
        try:
            s = os.stat(name, dir_fd=handle.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None  # gone: acting below it finds nothing, and cannot escape
        except OSError as exc:
            return f"cannot check ancestor {os.fsdecode(rel_dir)!r}: {exc.strerror}"
        finally:
            handle.release()
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
