"""A local (or mounted) destination: every write relative to a directory held open below a pinned root.

Files from a local source go to the native core in one call per chunk (``operators._native.cp_files``,
``native/src/copy.rs``), which opens every parent down from the root with ``O_NOFOLLOW``; everything
else here (directories, their metadata, symlinks, special files, files from fsspec, byte ranges of
big files, hard links) goes through :class:`operators.copy.pinned.PinnedRoot`: created, chmod'ed, timed
and renamed relative to the parent's descriptor, so a symlink planted in the destination fails
that entry and is never followed.  Every file is written under a temporary name in its directory
(``copy_spec.temp_name``) and renamed into place once data and metadata are complete.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat as st
from collections.abc import Callable
from concurrent.futures import Executor

import operators._native as _native
from operators.copy.attrs import MetadataRefused, chown, copy_xattrs, refusals
from operators.copy.destination import Destination
from operators.copy.pinned import PinnedRoot
from operators.copy.sources import LocalSource, Source
from operators.copy.spec import CopySpec, Entry, local_path, temp_name
from operators.core.concurrency import fanned
from operators.names import check_relative
from operators.ratelimit import bytes_capped, ops_capped, take_bytes, take_ops
from operators.root_identity import host_pin
from operators.safety import AncestorCheck
from operators.schema import micros

CORE_BATCH = 64  # files per native call when a cap paces them (else a whole chunk per call)
CP_COPIED, CP_SKIP, CP_ERROR, CP_DIFFERS, CP_NO_PARENT = range(5)  # cp_files status codes (native/src/copy.rs)
_NO_PARENT = FileNotFoundError("the destination directory does not exist yet")  # a streamed copy makes it


class LocalDestination(Destination):
    """A local or mounted tree: temp names, renames, metadata on open files, hard links."""

    local = True
    has_dirs = True

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec
        self._root: PinnedRoot | None = None

    @property
    def root(self) -> PinnedRoot:
        """The destination root, opened on first use and held until :meth:`close`."""
        if self._root is None:
            self._root = PinnedRoot(self.spec.dst_root)
        return self._root

    def close(self) -> None:
        if self._root is not None:
            self._root.close()
            self._root = None

    def path(self, rel: bytes) -> bytes:
        return local_path(self.spec.dst_root, rel)

    def _temp(self, rel: bytes) -> bytes:
        """The temp name of ``rel``, relative to the root."""
        head, _, name = rel.rpartition(b"/")
        tmp = temp_name(name, self.spec.token)
        return head + b"/" + tmp if head else tmp

    def ancestors(self) -> AncestorCheck | None:
        """Into an existing destination, a check that no directory above an entry became a symlink."""
        return AncestorCheck(os.fsencode(self.spec.dst_root)) if self.spec.check_existing else None

    # directories ------------------------------------------------------------

    def make_dir(self, e: Entry) -> bool:
        """Owner-writable for now (its real mode comes last); when sweeping (``CopySpec.sweep_temps``)
        an existing one loses the temp files this job's killed parts left, never another's.  A symlink where the
        directory or one of its parents should be fails the entry (``PlantedLinkError``)."""
        made = self.root.make_dir(check_relative(e.out_rel), 0o700)
        if not made and self.spec.sweep_temps:
            self.root.remove_stale_temps(e.out_rel, self.spec.token)
        return made

    def set_meta(self, src: Source, e: Entry) -> None:
        """Mode, ownership and times of a directory (after everything inside it was written), on the
        directory's own descriptor opened ``O_NOFOLLOW`` below the pinned root."""
        if e.rel:
            e = src.fresh(e)
        times = (e.atime_ns or e.mtime_ns, e.mtime_ns) if e.mtime_ns is not None else None
        owner = self.spec.owner_ids(e)
        with contextlib.ExitStack() as stack:
            from_path = stack.enter_context(src.proc_path(e.rel)) if isinstance(src, LocalSource) else None

            def xattrs(fd: int) -> list[tuple[bytes, int]]:
                return copy_xattrs(self.spec, from_path, fd, clean=self.spec.check_existing)

            refusals(self.root.dir_meta(e.out_rel, mode=e.mode, times_ns=times, owner=owner, attrs=xattrs))

    def make_parent(self, e: Entry) -> bool:
        """Make sure the destination directory of ``e`` exists (owner-writable: its real mode comes
        last), so the copy can be tried once more (a streamed copy: files come as the walk lists
        them, before anything made their directories).  Made relative to the pinned root."""
        self.root.make_parents(check_relative(e.out_rel), 0o700)
        return True

    # what is there ------------------------------------------------------------

    def same(self, e: Entry) -> bool | None:
        try:
            with self.root.parent(check_relative(e.out_rel)) as (fd, name):
                s = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if e.kind == "symlink" and not self.spec.follow_symlinks:
                    return st.S_ISLNK(s.st_mode) and os.readlink(name, dir_fd=fd) == e.link_target
        except FileNotFoundError:  # the entry, or its directory, is not there yet
            return None
        return (
            st.S_ISREG(s.st_mode)
            and s.st_size == e.size
            and (e.mtime_ns is None or micros(s.st_mtime_ns) == micros(e.mtime_ns))
        )

    # files ----------------------------------------------------------------------

    def copy_batch(self, src: Source, entries: list[Entry], pool: Executor) -> list[str | BaseException]:
        """From a local source, the chunk's regular files go to the native core in one call; the rest
        (symlinks, special files, files from fsspec) one by one on the pool, below the pinned root."""
        if not isinstance(src, LocalSource):
            return super().copy_batch(src, entries, pool)
        files = [i for i, e in enumerate(entries) if e.kind == "file"]
        others = [i for i, e in enumerate(entries) if e.kind != "file"]
        results: list[str | BaseException] = ["skip"] * len(entries)
        for i, result in zip(others, super().copy_batch(src, [entries[i] for i in others], pool), strict=True):
            results[i] = result
        for i, result in zip(files, self.copy_local([entries[i] for i in files]), strict=True):
            results[i] = result
        return results

    def copy_local(self, entries: list[Entry], retry: bool = True) -> list[str | BaseException]:
        """Regular files from a local source, in the native core (``cp_files``): ``file``, ``skip``
        or the error, per entry.  With an ops/s or bandwidth cap, their tokens are taken per
        ``CORE_BATCH`` files before the call."""
        spec = self.spec
        rels = [check_relative(e.rel) for e in entries]  # never '..': the core opens what it is given
        outs = [check_relative(e.out_rel) for e in entries]
        temps = [temp_name(out.rpartition(b"/")[2], spec.token) for out in outs]
        sizes, mtimes = [e.size for e in entries], [e.mtime_ns for e in entries]
        on_exist = {"error": 0, "skip": 1, "overwrite": 2, "ignore": 3}[spec.on_exist]
        src_root, dst_root = os.fsencode(spec.src_root), os.fsencode(spec.dst_root)
        step = CORE_BATCH if ops_capped() or bytes_capped() else max(1, len(entries))
        uid, gid = spec.core_ids()
        src_root_id = host_pin(spec.src_root, spec.src_root_id)  # this host's mount of it (operators.root_identity)
        results: list[str | BaseException] = []
        for lo in range(0, len(entries), step):
            hi = min(len(entries), lo + step)
            take_ops(hi - lo)
            take_bytes(sum(size or 0 for size in sizes[lo:hi]))

            def call(fan: int, lo: int = lo, hi: int = hi) -> tuple[bytes, list[int], list[tuple[int, bytes, int]]]:
                return _native.cp_files(
                    src_root,
                    dst_root,
                    rels[lo:hi],
                    outs[lo:hi],
                    temps[lo:hi],
                    sizes[lo:hi],
                    mtimes[lo:hi],
                    spec.follow_symlinks,
                    uid,
                    gid,
                    spec.xattrs,
                    spec.inplace,
                    spec.check_existing,
                    on_exist,
                    umask(),
                    fan,
                    src_root_id=src_root_id,
                )

            status, errnos, refused = fanned(spec.threads, hi - lo, call)
            here = [self._result(e, code, err) for e, code, err in zip(entries[lo:hi], status, errnos, strict=True)]
            by_file: dict[int, list[tuple[bytes, int]]] = {}
            for i, what, err in refused:  # copied, but some of its metadata refused: a failure of its own
                by_file.setdefault(i, []).append((what, err))
            for i, items in by_file.items():
                here[i] = MetadataRefused(items)
            results += here
        again = [i for i, r in enumerate(results) if r is _NO_PARENT]
        if again and retry and spec.make_parents:
            for i in again:
                self.make_parent(entries[i])
            for i, result in zip(again, self.copy_local([entries[i] for i in again], retry=False), strict=True):
                results[i] = result
        return [FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT)) if r is _NO_PARENT else r for r in results]

    def _result(self, e: Entry, code: int, err: int) -> str | BaseException:
        """What the core's status code (``native/src/copy.rs``) means for ``e``."""
        if code == CP_COPIED:
            return "file"
        if code == CP_SKIP:
            return "skip"
        if code == CP_DIFFERS:
            return FileExistsError(self.differs(e))
        if code == CP_NO_PARENT:
            return _NO_PARENT
        return OSError(err, os.strerror(err))

    def write_file(self, src: Source, e: Entry) -> None:
        """One file (a symlink copied as its target, ``-L``): from a local source in the core, else
        downloaded into a temp file created relative to its held parent."""
        if isinstance(src, LocalSource):
            result = self.copy_local([e])[0]
            if isinstance(result, BaseException):
                raise result
            return
        out = check_relative(e.out_rel)
        with self.root.parent(out) as (pfd, name):
            tmp = name if self.spec.inplace else temp_name(name, self.spec.token)
            try:
                fd, _ = self.create_at(pfd, tmp, 0o600)
                try:
                    e = src.fill(self, e, fd)
                finally:
                    os.close(fd)
                if e.mtime_ns is not None:  # after close: NFS flushes on close
                    os.utime(tmp, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns), dir_fd=pfd, follow_symlinks=False)
                if tmp != name:
                    os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
            except BaseException:
                _unlink_at(pfd, tmp)
                raise

    def symlink(self, src: Source, e: Entry) -> str:
        e = src.fresh(e)
        with self.root.parent(check_relative(e.out_rel)) as (pfd, name):
            tmp = temp_name(name, self.spec.token)
            _unlink_at(pfd, tmp)
            os.symlink(e.link_target or b"", tmp, dir_fd=pfd)
            self._into_place(pfd, tmp, name, e, lambda: self._own(pfd, tmp, e) + self._xattrs(src, e, pfd, tmp))
        return "symlink"

    def special(self, src: Source, e: Entry) -> str | BaseException:
        """FIFOs and sockets are recreated (a socket as the inode ``cp -a`` and ``rsync -a`` make: ``mknod``,
        bound to no process); device nodes only by root with ``preserve``."""
        if e.mode is None:
            return "skip"
        e = src.fresh(e)
        mode = e.mode or 0
        root = self.spec.keeps_owner and os.geteuid() == 0
        device = src.device(e) if (st.S_ISCHR(mode) or st.S_ISBLK(mode)) and root else None
        if not (st.S_ISFIFO(mode) or st.S_ISSOCK(mode)) and device is None:
            return "skip"
        with self.root.parent(check_relative(e.out_rel)) as (pfd, name):
            tmp = temp_name(name, self.spec.token)
            _unlink_at(pfd, tmp)
            if device is not None:
                os.mknod(tmp, mode, device, dir_fd=pfd)
            elif st.S_ISSOCK(mode):
                os.mknod(tmp, st.S_IFSOCK | 0o600, dir_fd=pfd)
            else:
                os.mkfifo(tmp, 0o600, dir_fd=pfd)

            def meta() -> list[tuple[bytes, int]]:
                refused = self._own(pfd, tmp, e)
                os.chmod(tmp, st.S_IMODE(mode), dir_fd=pfd)  # a FIFO, socket or device node just made: not a link
                return refused + self._xattrs(src, e, pfd, tmp)

            self._into_place(pfd, tmp, name, e, meta)
        return "file"

    def _into_place(
        self, pfd: int, tmp: bytes, name: bytes, e: Entry, meta: Callable[[], list[tuple[bytes, int]]]
    ) -> None:
        """Metadata and times on ``tmp`` (never following it), then the rename to ``name``; metadata the
        destination refused is raised (:class:`MetadataRefused`) once the entry is in place."""
        try:
            refused = meta()
            if e.mtime_ns is not None:
                os.utime(tmp, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns), dir_fd=pfd, follow_symlinks=False)
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        except BaseException:
            _unlink_at(pfd, tmp)
            raise
        refusals(refused)

    def _own(self, pfd: int, name: bytes, e: Entry) -> list[tuple[bytes, int]]:
        return chown(self.spec, e, lambda u, g: os.chown(name, u, g, dir_fd=pfd, follow_symlinks=False))

    def _xattrs(self, src: Source, e: Entry, pfd: int, name: bytes) -> list[tuple[bytes, int]]:
        """Attributes of the source entry onto ``name`` in ``pfd``, by path (a symlink has no descriptor
        ``f*xattr`` takes): ``/proc/self/fd/<pfd>/<name>``, so nothing above ``name`` is resolved again."""
        if not isinstance(src, LocalSource):
            return []
        with src.proc_path(e.rel) as from_path:
            return copy_xattrs(self.spec, from_path, b"/proc/self/fd/%d/%s" % (pfd, name), clean=False)

    def create_at(self, pfd: int, name: bytes, mode: int) -> tuple[int, int]:
        """A new file ``name`` in the directory ``pfd`` (a leftover of an earlier attempt is replaced),
        never through a link; returns the descriptor and the mode it was created with."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, mode & 0o777, dir_fd=pfd)
        except FileExistsError:
            os.unlink(name, dir_fd=pfd)
            fd = os.open(name, flags, mode & 0o777, dir_fd=pfd)
        return fd, mode & 0o777 & ~umask()

    def fd_meta(self, fd: int, e: Entry, created_mode: int | None = None) -> list[tuple[bytes, int]]:
        """Ownership and mode; the chmod is skipped when creating the file already gave that mode.
        Returns a refused chown (the caller reports it)."""
        refused = chown(self.spec, e, lambda u, g: os.fchown(fd, u, g))  # before chmod: chown clears set-id bits
        mode = st.S_IMODE(e.mode) if e.mode is not None else 0o644
        if self.spec.owner_ids(e) is not None or mode != created_mode:
            os.fchmod(fd, mode)
        return refused

    # big files in ranges, and hard links --------------------------------------

    def write_range(self, src: Source, e: Entry, offset: int, length: int) -> None:
        """One byte range of ``e`` into its temp file at the same offset; the temp file is created by
        whichever range runs first and extended to the full size (a hole), so ranges land in any order."""
        with self.root.parent(check_relative(e.out_rel)) as (pfd, name):
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            tmp = temp_name(name, self.spec.token)
            try:
                dfd, made = os.open(tmp, flags | os.O_EXCL, 0o600, dir_fd=pfd), True
            except FileExistsError:
                dfd, made = os.open(tmp, flags, 0o600, dir_fd=pfd), False
        try:
            if not st.S_ISREG(os.fstat(dfd).st_mode):
                raise OSError(errno.EINVAL, "the temp file is not a regular file")
            if made:  # still empty: Lustre takes a layout (lustre.lov) only before any data or size
                refusals(self._source_xattrs(src, e, dfd, "layouts"))
            if os.fstat(dfd).st_size < (e.size or 0):
                os.ftruncate(dfd, e.size or 0)  # only ever grows: bytes already written stay below the old size
            src.read_range(e, dfd, offset, length)
        finally:
            os.close(dfd)

    def finish(self, src: Source, e: Entry) -> None:
        """Every range of ``e`` is in its temp file: size, metadata, then the rename."""
        e = src.fresh(e, follow=self.spec.follow_symlinks)
        with self.root.parent(check_relative(e.out_rel)) as (pfd, name):
            tmp = temp_name(name, self.spec.token)
            fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
            try:
                os.ftruncate(fd, e.size or 0)
                refused = self.fd_meta(fd, e)
                refused += self._source_xattrs(src, e, fd, "rest")  # the layout came with the first range
            finally:
                os.close(fd)
            if e.mtime_ns is not None:
                os.utime(tmp, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns), dir_fd=pfd, follow_symlinks=False)
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        refusals(refused)

    def _source_xattrs(self, src: Source, e: Entry, fd: int, phase: str) -> list[tuple[bytes, int]]:
        """The attributes of ``phase`` (``operators._native.copy_xattrs``) of the source file of ``e``
        onto the open file ``fd``."""
        if not isinstance(src, LocalSource) or not self.spec.xattrs:  # S3: its metadata as user.* (objmeta)
            return [] if isinstance(src, LocalSource) or phase == "layouts" else src.xattrs_onto(e, fd)
        sfd = src.open(e.rel, os.O_RDONLY | (0 if self.spec.follow_symlinks else os.O_NOFOLLOW))
        try:
            return copy_xattrs(self.spec, sfd, fd, clean=False, phase=phase)
        finally:
            os.close(sfd)

    def link(self, e: Entry, first: bytes) -> str:
        """Hard-link ``e`` to the already copied ``first``; ``skip`` when it already is."""
        out = check_relative(e.out_rel)
        with self.root.parent(out) as (pfd, name), self.root.parent(check_relative(first)) as (tfd, tname):
            if self.spec.check_existing:
                try:
                    s = os.stat(name, dir_fd=pfd, follow_symlinks=False)
                    t = os.stat(tname, dir_fd=tfd, follow_symlinks=False)
                except FileNotFoundError:
                    pass
                else:
                    if (s.st_dev, s.st_ino) == (t.st_dev, t.st_ino):
                        return "skip"
                    verdict = self.verdict(e)
                    if verdict not in ("copy", "skip"):
                        raise FileExistsError(verdict)
            tmp = temp_name(name, self.spec.token)
            _unlink_at(pfd, tmp)
            os.link(tname, tmp, src_dir_fd=tfd, dst_dir_fd=pfd, follow_symlinks=False)
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        return "link"


def _unlink_at(pfd: int, name: bytes) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=pfd)


def umask() -> int:
    """The process's umask (read once: reading it means setting it)."""
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)
    return _UMASK


_UMASK: int | None = None

__all__ = ["CORE_BATCH", "LocalDestination", "umask"]
