"""What a walk leaves out: ``--exclude``/``--include`` globs, ``--max-depth``, ``--one-file-system``.

The decision is made per directory entry as a listing comes back, *before* the walk goes below a
directory: an excluded directory is never opened or listed, so pruning a big subtree costs one
``lstat`` instead of a walk (``operators.scan.walk`` applies it; rm's tree removers ask it before they
unlink anything).

Patterns are gitignore-style (the ``pathspec`` library), matched against the path relative to the
walk's root: ``*.tmp`` anywhere, ``/build`` or ``data/cache/`` from the root, ``logs/`` directories
only, ``**`` across directories, ``!pattern`` re-includes in ``--exclude``.

``--include`` keeps only non-directories matching one of its patterns (a directory pattern keeps
everything below it).  Directories are entered only where an include could still match below them:
``--include 'data/2024/**'`` never lists ``other/``; an include without a ``/`` (``*.h5``) may
match anywhere, so every directory is walked.  Directories that are walked are kept as rows.

A directory at ``--max-depth`` or on another file system is kept as a row but not entered (like
``find -maxdepth``/``-xdev``); ``rm`` leaves such directories in place, since it never listed them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pathspec

DROP = "drop"  # left out: no row, never entered
KEEP = "keep"  # a row; a directory is also entered
STOP = "stop"  # a directory's row, but not entered (--max-depth reached, another file system)


@functools.lru_cache(maxsize=32)
def _spec(patterns: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    import pathspec  # only when patterns are given

    return pathspec.GitIgnoreSpec.from_lines(patterns)


def _may_match_below(directory: str, pattern: str) -> bool:
    """Whether a gitignore ``pattern`` could match ``directory`` or something below it."""
    body = pattern.strip().rstrip("/")
    if "/" not in body:
        return True  # unanchored: may match at any depth
    parts = body.lstrip("/").split("/")
    for i, name in enumerate(directory.split("/")):
        if i == len(parts):
            return True  # the pattern matched an ancestor: everything below it is included
        if "**" in parts[i]:
            return True
        if not fnmatchcase(name, parts[i]):
            return False
    return True


@dataclass(frozen=True)
class Prune:
    """Shared by every task of one job (pickled to the workers)."""

    exclude: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    max_depth: int | None = None  # entries deeper than this are left out (1: the root's children)
    one_file_system: bool = False
    device: int | None = None  # the root's st_dev (set by the driver); other devices are not entered

    def __post_init__(self) -> None:
        if any(p.strip().startswith("!") for p in self.include):
            raise ValueError("--include patterns cannot be negated (use --exclude '!PATTERN' to re-include)")
        if self.max_depth is not None and self.max_depth < 1:
            raise ValueError("--max-depth must be at least 1")
        try:
            for patterns in (self.exclude, self.include):
                if patterns:
                    _spec(patterns)
        except ValueError as exc:  # pathspec's GitWildMatchPatternError
            raise ValueError(f"bad pattern: {exc}") from None

    @property
    def active(self) -> bool:
        return bool(self.exclude or self.include or self.max_depth is not None or self.device is not None)

    @property
    def needs_tree_walk(self) -> bool:
        """A flat prefix listing (object stores) lists everything below a prefix: it cannot prune."""
        return bool(self.exclude or self.include or self.max_depth is not None)

    def decide(self, path: str, is_dir: bool, dev: int | None = None) -> str:
        """:data:`DROP`, :data:`KEEP` or :data:`STOP` for the entry at ``path`` (relative, '/'-separated)."""
        if self.exclude and _spec(self.exclude).match_file(path + "/" if is_dir else path):
            return DROP
        depth = path.count("/") + 1
        if self.max_depth is not None and depth > self.max_depth:
            return DROP
        if not is_dir:
            return DROP if self.include and not _spec(self.include).match_file(path) else KEEP
        if self.include and not any(_may_match_below(path, p) for p in self.include):
            return DROP
        if self.device is not None and dev is not None and dev != self.device:
            return STOP
        if self.max_depth is not None and depth >= self.max_depth:
            return STOP
        return KEEP

    @classmethod
    def from_description(cls, described: dict) -> Prune:
        """The prune a manifest's ``options["prune"]`` records (the device is the driver's to fill in)."""
        return cls(
            exclude=tuple(described.get("exclude") or ()),
            include=tuple(described.get("include") or ()),
            max_depth=described.get("max_depth"),
            one_file_system=bool(described.get("one_file_system")),
        )

    def describe(self) -> dict:
        """For a manifest's options (and to scan a live tree the way a manifest was scanned)."""
        return {
            "exclude": list(self.exclude),
            "include": list(self.include),
            "max_depth": self.max_depth,
            "one_file_system": self.one_file_system,
        }
