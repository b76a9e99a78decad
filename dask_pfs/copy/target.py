"""Where a copy goes: ``cp -r`` semantics with rsync's trailing slash, and where its journal lives.

* ``copy("a", "b")``: ``b`` is an existing directory -> ``b/a`` is the copy; otherwise ``b`` is
  created as the copy of ``a``.
* ``copy("a/", "b")``: the *contents* of ``a`` go into ``b`` (created if missing).
* A single file: into ``b`` when ``b`` is a directory, else copied to the name ``b``.
* ``copy(None, "b", manifest=M, where=SQL)``: the selected rows of manifest ``M`` go into ``b``
  (contents semantics, relative to the manifest's root or to ``src`` when given).

Everything here runs before a cluster is started or anything is written, and refuses with a
:class:`PfsError` (exit code 2): a missing source, a destination inside the source, a file where
a directory must be.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from dask_pfs.errors import PfsError
from dask_pfs.guard import check_target
from dask_pfs.manifests.manifest import JOURNAL_PREFIX
from dask_pfs.runtime.journals import ident, journal_dir, open_journal, read_job
from dask_pfs.urls import Location, Probe, is_dir, probe, resolve, root_times_from
from operators.journal import Journal
from operators.mounts import is_network


@dataclass(frozen=True)
class Target:
    src: Location
    dst: Location  # the root the manifest's rows are copied below
    fresh: bool  # dst did not exist: nothing to compare against
    rename: dict[bytes, bytes]  # single file copied to a new name
    make_root: bool

    @property
    def named(self) -> str:
        """What a summary calls the destination: the copy's own name for one file (``cp f d/new.h5``
        -> ``d/new.h5``, ``cp f d/`` -> ``d/f``), else the root the rows go below."""
        if self.rename:
            return self.dst.child(os.fsdecode(next(iter(self.rename.values()))))
        if not self.make_root and self.src.path:  # one file into a directory
            return self.dst.child(os.path.basename(self.src.path.rstrip("/")))
        return self.dst.url

    @property
    def streams_by_default(self) -> bool:
        """Stream (copy while scanning) unless either end is a network or FUSE mount: on latfs at 1 ms the whole
        scan then the copy was 16-32 % faster with 12-23 % less CPU, both ways (docs/performance.md)."""
        return not any(loc.is_local and is_network(loc.path) for loc in (self.src, self.dst))

    def streamable(self, manifest_out: str | os.PathLike | None) -> bool:
        """Copy while scanning into a new local destination with a local manifest: nothing there to
        compare against, so no row needs the destination's state first, and nothing there but this
        run's own copies (``operators.copy.tasks._made_parent``)."""
        return self.fresh and not self.rename and self.dst.is_local and "://" not in str(manifest_out or "")

    def journal(self, journal: str | os.PathLike | bool | None, what: tuple[str, ...]) -> Journal | None:
        """``DST/.pfs-journal-<id>`` for a local destination, else one in the cache; None for a single
        file (nothing to resume) or ``journal=False``.  ``what`` names the job (source, manifest,
        selection, destination)."""
        if journal is False or self.rename:
            return None
        if journal is not None and journal is not True:
            return open_journal(journal)
        return open_journal(journal_dir(self.dst, ident(*what)))

    def end_journal(self, jr: Journal | None, failed: int) -> str | None:
        """Keep the journal of a run with failures (its path, for ``resume``); drop a clean run's."""
        if jr is None:
            return None
        if failed:
            return jr.path
        jr.remove()
        if self.make_root:
            root_times_from(self.src, self.dst)  # removing the journal touched the root
        return None


def live_target(src: str, dst: str, so: dict | None, dso: dict | None, resume: bool = False) -> Target:
    """The target of copying the live tree (or file) ``src`` to ``dst``.

    ``resume``: a killed ``cp SRC DST`` that created DST left its journal there; the same command
    goes on into DST (not into ``DST/SRC``, as ``cp -r`` into an existing directory would)."""
    contents = src.endswith("/") and len(src) > 1
    s = resolve(src, so)
    d = resolve(dst, dso)
    source = probe(s, follow=True)
    if not source.exists:
        raise PfsError(f"{src}: no such file or directory")
    d_exists, d_dir = _is(d, probe(d))
    name = os.path.basename(s.path.rstrip("/"))
    if source.kind != "directory":  # one file
        if d_dir:
            return Target(s, d, False, {}, False)
        if d.is_local and dst.endswith("/"):  # as cp: a name with a slash at its end is a directory's
            raise PfsError(f"{dst}: not a directory; not copied (a trailing slash names a directory)")
        parent = os.path.dirname(d.path.rstrip("/")) or "/"
        ploc = resolve(parent if d.is_local else f"{d.protocol}://{parent}", dso)
        if d.is_local and not os.path.isdir(parent):
            raise PfsError(f"{dst}: parent directory does not exist")
        new = os.fsencode(os.path.basename(d.path.rstrip("/")))
        return Target(s, ploc, False, {os.fsencode(name): new}, False)
    if d_exists and not d_dir:
        raise PfsError(f"{dst}: exists and is not a directory")
    if d_dir and not contents and not (resume and _journal_of_copy_into(d)):
        d = resolve(d.child(name), d.storage_options)
        d_exists, d_dir = _is(d, probe(d))
        if d_exists and not d_dir:
            raise PfsError(f"{d.url}: exists and is not a directory")
    _refuse_inside(s, d)
    return Target(s, d, not d_exists, {}, True)


def manifest_target(root: str, dst: str, so: dict | None, dso: dict | None) -> Target:
    """The target of copying a manifest's rows (relative to ``root``) below ``dst``."""
    s = resolve(root, so)
    d = resolve(dst, dso)
    d_exists, d_dir = _is(d, probe(d))
    if d_exists and not d_dir:
        raise PfsError(f"{dst}: exists and is not a directory")
    _refuse_inside(s, d)
    return Target(s, d, not d_exists, {}, True)


def _journal_of_copy_into(d: Location) -> bool:
    """Whether a local ``d`` holds the journal of a copy whose destination root is ``d`` itself."""
    if not d.is_local:
        return False
    for path in glob.glob(os.path.join(glob.escape(d.path), f"{JOURNAL_PREFIX}*")):
        if read_job(open_journal(path)).get("dst") == d.url:
            return True
    return False


def _is(loc: Location, found: Probe) -> tuple[bool, bool]:
    """(exists, is a directory or a symlink to one): a symlink at the end exists even when dangling."""
    return found.exists, found.kind == "directory" or (found.kind == "link" and is_dir(loc))


def _refuse_inside(s: Location, d: Location) -> None:
    check_target(d, action="copy", deletes=False, sources=(s,))  # the one guard (dask_pfs.guard)
