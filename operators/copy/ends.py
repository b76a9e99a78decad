"""The two ends of a copy: where data is read (a source) and where it is written (a destination).

One class per kind of storage, chosen once per task from the spec (:func:`source_of`,
:func:`destination_of`), so the tasks in ``operators.copy.tasks`` say *what* to do and these say *how*
on each file system.  Local ends work with descriptors (files opened relative to their open parent
directory, kernel-side copies, metadata set on the open file); fsspec ends hand whole files to the
back end.  Local to local, :meth:`LocalDestination.copy_batch` hands a chunk's regular files to
the native core (``operators._native.cp_files``, ``native/src/copy.rs``) in one call without the
interpreter lock, which keeps many in flight on its own threads (``operators.core.concurrency.fanned``).

A local destination gets every file under a temporary name in its directory (``copy_spec.temp_name``)
renamed into place once data and metadata are complete; an object store gets one PUT (atomic, no
temp name); other fsspec back ends (sftp...) a temp name and a rename.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat as st
from collections.abc import Callable, Iterator
from concurrent.futures import Executor

import fsspec

import operators._native as _native
from operators.copy.kernel import copy_range, is_sparse
from operators.copy.spec import (
    TEMP_MARK,
    CopySpec,
    Entry,
    is_temp_name,
    local_path,
    remote_path,
    temp_name,
    temp_of,
    with_stat,
)
from operators.core.concurrency import fanned
from operators.core.dirfd import OpenDirs
from operators.names import check_relative
from operators.ratelimit import bytes_capped, ops_capped, take_bytes, take_ops
from operators.safety import AncestorCheck

STREAM_BLOCK = 16 << 20
CORE_BATCH = 64  # files per native call when a cap paces them (else a whole chunk per call)
CP_COPIED, CP_SKIP, CP_ERROR, CP_DIFFERS, CP_NO_PARENT = range(5)  # cp_files status codes (native/src/copy.rs)
_NO_PARENT = FileNotFoundError("the destination directory does not exist yet")  # a streamed copy makes it


def _fs(protocol: str, options: dict) -> fsspec.AbstractFileSystem:
    return fsspec.filesystem(protocol, **options)


# ---------------------------------------------------------------- sources


class LocalSource:
    """A local or mounted tree; files opened relative to their open parent directory."""

    local = True

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec

    def path(self, rel: bytes) -> bytes:
        return local_path(self.spec.src_root, rel)

    def fresh(self, e: Entry, follow: bool = False) -> Entry:
        """``e`` with the metadata the source has now (the manifest's when it cannot be read)."""
        try:
            return with_stat(e, os.stat(self.path(e.rel), follow_symlinks=follow))
        except OSError:
            return e

    def kind_followed(self, e: Entry) -> str:
        s = os.stat(self.path(e.rel))
        return "file" if st.S_ISREG(s.st_mode) else "directory" if st.S_ISDIR(s.st_mode) else "other"

    def device(self, e: Entry) -> int | None:
        return os.lstat(self.path(e.rel)).st_rdev

    def read_range(self, e: Entry, dfd: int, offset: int, length: int) -> None:
        """Copy ``[offset, offset+length)`` of ``e`` to the same offsets of ``dfd``."""
        sfd = os.open(self.path(e.rel), os.O_RDONLY | (0 if self.spec.follow_symlinks else os.O_NOFOLLOW))
        try:
            s = os.fstat(sfd)
            copy_range(sfd, dfd, offset, length, is_sparse(s), (s.st_dev, 0))
        finally:
            os.close(sfd)

    def send(self, fs: fsspec.AbstractFileSystem, e: Entry, target: str) -> None:
        """Upload ``e`` to ``target`` on ``fs``."""
        fs.put_file(os.fsdecode(self.path(e.rel)), target)


class FsspecSource:
    """A tree read through fsspec (object stores, sftp, ...); whole files or byte ranges."""

    local = False

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec
        self.fs = _fs(spec.src_protocol, spec.src_options)

    def path(self, rel: bytes) -> str:
        return remote_path(self.spec.src_root, rel)

    def fresh(self, e: Entry, follow: bool = False) -> Entry:
        return e  # the manifest's metadata: nothing cheaper to ask

    def kind_followed(self, e: Entry) -> str:
        return "file"

    def device(self, e: Entry) -> int | None:
        return None

    def fill(self, dst: LocalDestination, e: Entry, tmp: bytes) -> Entry:
        """Download ``e`` into the new local file ``tmp``, with its mode."""
        self.fs.get_file(self.path(e.rel), os.fsdecode(tmp))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            dst.fd_meta(fd, e)
        finally:
            os.close(fd)
        return e

    def read_range(self, e: Entry, dfd: int, offset: int, length: int) -> None:
        src = self.path(e.rel)
        pos, end = offset, offset + length
        while pos < end:
            data = self.fs.cat_file(src, start=pos, end=min(end, pos + STREAM_BLOCK))
            if not data:
                break
            view = memoryview(data)
            done = 0
            while done < len(data):
                done += os.pwrite(dfd, view[done:], pos + done)
            pos += len(data)

    def send(self, fs: fsspec.AbstractFileSystem, e: Entry, target: str) -> None:
        with self.fs.open(self.path(e.rel), "rb") as f, fs.open(target, "wb") as g:
            shutil.copyfileobj(f, g, STREAM_BLOCK)


Source = LocalSource | FsspecSource


def source_of(spec: CopySpec) -> Source:
    return LocalSource(spec) if spec.src_local else FsspecSource(spec)


# ---------------------------------------------------------------- destinations


class _Destination:
    """What both kinds of destination do alike: one entry, and a chunk of them on the pool."""

    spec: CopySpec
    has_dirs: bool

    def copy_batch(self, src: Source, entries: list[Entry], pool: Executor) -> list[str | BaseException]:
        """Copy a chunk of files, symlinks and special files concurrently: ``file``, ``symlink``,
        ``skip`` or the error, per entry."""
        return list(pool.map(lambda e: self.copy_one(src, e), entries))

    def copy_one(self, src: Source, e: Entry, retry: bool = True) -> str | BaseException:
        take_ops()
        try:
            if self.spec.check_existing:
                verdict = self.verdict(e)
                if verdict != "copy":
                    return verdict if verdict == "skip" else FileExistsError(verdict)
            kind = e.kind
            if kind == "symlink" and self.spec.follow_symlinks:
                kind = src.kind_followed(e)
            if kind == "symlink":
                return self.symlink(src, e)
            if kind == "other":
                return self.special(src, e)
            if kind == "directory":
                return NotImplementedError("symlink to a directory is not followed (-L copies symlinks to files)")
            if not (src.local and self.local):
                take_bytes(e.size or 0)  # fsspec moves the data itself: charge it up front
            self.write_file(src, e)
            return "file"
        except FileNotFoundError as exc:
            if retry and self.spec.make_parents and self.make_parent(e):
                return self.copy_one(src, e, retry=False)
            return exc
        except Exception as exc:
            return exc

    def verdict(self, e: Entry) -> str:
        """``"copy"``, ``"skip"`` (identical file there) or an error message (exists and differs)."""
        same = self.same(e)
        if same is None:
            return "copy"
        if self.spec.on_exist == "ignore":  # --ignore-existing: never touch what is there
            return "skip"
        if same and self.spec.on_exist != "overwrite":
            return "skip"
        if self.spec.on_exist == "error":
            return self.differs(e)
        return "copy"

    def differs(self, e: Entry) -> str:
        where = os.fsdecode(self.path(e.out_rel))
        return f"exists and differs (size or mtime): {where}; use --update, --ignore-existing or --overwrite"

    # what each kind says --------------------------------------------------

    local: bool

    def path(self, rel: bytes) -> bytes | str:
        raise NotImplementedError

    def same(self, e: Entry) -> bool | None:
        """Whether the destination holds ``e`` already (None: nothing there)."""
        raise NotImplementedError

    def make_parent(self, e: Entry) -> bool:
        raise NotImplementedError

    def write_file(self, src: Source, e: Entry) -> None:
        raise NotImplementedError

    def symlink(self, src: Source, e: Entry) -> str:
        raise NotImplementedError

    def special(self, src: Source, e: Entry) -> str | BaseException:
        raise NotImplementedError


class LocalDestination(_Destination):
    """A local or mounted tree: temp names, renames, metadata on open files, hard links."""

    local = True
    has_dirs = True

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec
        self._held: OpenDirs | None = None  # a chunk's destination directories (existing destinations)

    def path(self, rel: bytes) -> bytes:
        return local_path(self.spec.dst_root, rel)

    def temp(self, rel: bytes) -> bytes:
        return temp_of(self.path(rel), self.spec.token)

    def ancestors(self) -> AncestorCheck | None:
        """Into an existing destination, a check that no directory above an entry became a symlink."""
        return AncestorCheck(os.fsencode(self.spec.dst_root)) if self.spec.check_existing else None

    def make_dir(self, e: Entry) -> None:
        """Owner-writable for now (its real mode comes last); an existing one loses the stale temp
        files of interrupted runs, before any file task of this run starts."""
        path = self.path(e.out_rel)
        try:
            os.mkdir(path, 0o700)
            return
        except FileNotFoundError:
            os.makedirs(path, 0o700, exist_ok=True)
            return
        except FileExistsError:
            if not os.path.isdir(path) or os.path.islink(path):
                raise FileExistsError(f"exists and is not a directory: {os.fsdecode(path)}") from None
        if self.spec.check_existing:
            remove_stale_temps(path, keep=self.spec.token)

    def set_meta(self, src: Source, e: Entry, follow: bool = True) -> None:
        """Mode, ownership and times of a directory: after everything inside it was written."""
        path = self.path(e.out_rel)
        if e.rel:
            e = src.fresh(e)
        if self.spec.preserve and e.uid is not None and os.geteuid() == 0:
            os.chown(path, e.uid, e.gid if e.gid is not None else -1, follow_symlinks=follow)
        if e.mode is not None and follow:
            os.chmod(path, st.S_IMODE(e.mode))
        if e.mtime_ns is not None:
            os.utime(path, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns), follow_symlinks=follow)

    def same(self, e: Entry) -> bool | None:
        path = self.path(e.out_rel)
        try:
            s = os.lstat(path)
        except FileNotFoundError:
            return None
        if e.kind == "symlink" and not self.spec.follow_symlinks:
            return st.S_ISLNK(s.st_mode) and os.readlink(path) == e.link_target
        return (
            st.S_ISREG(s.st_mode)
            and s.st_size == e.size
            and (e.mtime_ns is None or s.st_mtime_ns // 1000 == e.mtime_ns // 1000)
        )

    def make_parent(self, e: Entry) -> bool:
        """Make sure the destination directory of ``e`` exists (owner-writable: its real mode comes
        last), so the copy can be tried once more.  Another thread may have made it meanwhile; when
        the source was what was missing, the second try fails the same way.

        Only for a streamed copy into a fresh destination (``dask_pfs.copy.streaming``): files are
        copied as the walk lists them, and nothing has made their directories yet.  Nothing but this
        run has written there, so no component can be a symlink planted to redirect the copy.
        """
        os.makedirs(os.path.dirname(self.path(e.out_rel)), 0o700, exist_ok=True)
        return True

    def copy_batch(self, src: Source, entries: list[Entry], pool: Executor) -> list[str | BaseException]:
        """From a local source, the chunk's regular files go to the native core in one call (which
        opens every parent down from the root with ``O_NOFOLLOW``); the rest (symlinks, special
        files, files from fsspec) one by one on the pool, into an existing destination through
        parents held the same way for the whole chunk (:meth:`_pinned`)."""
        if not self.spec.check_existing:
            return self._copy_batch(src, entries, pool)
        self._held = OpenDirs(os.fsencode(self.spec.dst_root))
        try:
            return self._copy_batch(src, entries, pool)
        finally:
            self._held.close()
            self._held = None

    @contextlib.contextmanager
    def _pinned(self, rel: bytes) -> Iterator[bytes]:
        """The path to write ``rel`` through: ``/proc/self/fd/<parent>/<name>``, its parent opened one
        component at a time without following symlinks (``ELOOP`` when one was planted or swapped in
        after the chunk's ancestor check), and kept open while the caller writes, renames and sets
        times there; the plain path where nothing is held (a fresh destination, a top-level entry)."""
        parent_rel, _, name = rel.rpartition(b"/")
        if self._held is None or not parent_rel:
            yield self.path(rel)
            return
        parent = self._held.handle(parent_rel)
        try:
            yield b"/proc/self/fd/%d/%s" % (parent.fd, name)
        finally:
            parent.release()

    def _copy_batch(self, src: Source, entries: list[Entry], pool: Executor) -> list[str | BaseException]:
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
        results: list[str | BaseException] = []
        for lo in range(0, len(entries), step):
            hi = min(len(entries), lo + step)
            take_ops(hi - lo)
            take_bytes(sum(size or 0 for size in sizes[lo:hi]))

            def call(fan: int, lo: int = lo, hi: int = hi) -> tuple[bytes, list[int]]:
                return _native.cp_files(
                    src_root,
                    dst_root,
                    rels[lo:hi],
                    outs[lo:hi],
                    temps[lo:hi],
                    sizes[lo:hi],
                    mtimes[lo:hi],
                    spec.follow_symlinks,
                    spec.preserve,
                    spec.inplace,
                    spec.check_existing,
                    on_exist,
                    _umask(),
                    fan,
                )

            status, errnos = fanned(spec.threads, hi - lo, call)
            for e, code, err in zip(entries[lo:hi], status, errnos, strict=True):
                results.append(self._result(e, code, err))
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
        """One file (a symlink copied as its target, ``-L``): from a local source in the core."""
        if isinstance(src, LocalSource):
            result = self.copy_local([e])[0]
            if isinstance(result, BaseException):
                raise result
            return
        with self._pinned(e.out_rel) as dst:
            tmp = dst if self.spec.inplace else temp_of(dst, self.spec.token)
            try:
                e = src.fill(self, e, tmp)
                if e.mtime_ns is not None:
                    os.utime(tmp, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns))  # after close: NFS flushes on close
                if tmp != dst:
                    os.rename(tmp, dst)
            except BaseException:
                unlink_quietly(tmp)
                raise

    def symlink(self, src: Source, e: Entry) -> str:
        e = src.fresh(e)
        with self._pinned(e.out_rel) as dst:
            tmp = temp_of(dst, self.spec.token)
            unlink_quietly(tmp)
            os.symlink(e.link_target or b"", tmp)
            self._into_place(tmp, e, lambda: self._own(tmp, e, link=True), dst)
        return "symlink"

    def special(self, src: Source, e: Entry) -> str | BaseException:
        """FIFOs are recreated; device nodes only by root with ``preserve``; sockets are skipped."""
        if e.mode is None:
            return "skip"
        e = src.fresh(e)
        mode = e.mode or 0
        tmp = self.temp(e.out_rel)
        unlink_quietly(tmp)
        root = self.spec.preserve and os.geteuid() == 0
        device = src.device(e) if (st.S_ISCHR(mode) or st.S_ISBLK(mode)) and root else None
        if st.S_ISFIFO(mode):
            os.mkfifo(tmp, 0o600)
        elif device is not None:
            os.mknod(tmp, mode, device)
        else:
            return "skip"
        self._into_place(tmp, e, lambda: os.chmod(tmp, st.S_IMODE(mode)))
        return "file"

    def _into_place(self, tmp: bytes, e: Entry, meta: Callable[[], None], dst: bytes | None = None) -> None:
        """Metadata and times on ``tmp`` (never following it), then the rename to ``e``'s name (``dst``)."""
        try:
            meta()
            if e.mtime_ns is not None:
                os.utime(tmp, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns), follow_symlinks=False)
            os.rename(tmp, dst or self.path(e.out_rel))
        except BaseException:
            unlink_quietly(tmp)
            raise

    def _own(self, path: bytes, e: Entry, link: bool = False) -> None:
        if self.spec.preserve and e.uid is not None and os.geteuid() == 0:
            os.chown(path, e.uid, e.gid if e.gid is not None else -1, follow_symlinks=not link)

    def create(self, path: bytes, mode: int) -> tuple[int, int]:
        """A new file (a leftover of an earlier attempt is replaced) created with ``mode`` where the umask
        allows, so most files need no chmod afterwards (one network round trip less each); returns
        the descriptor and the mode it was created with."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        try:
            fd = os.open(path, flags, mode & 0o777)
        except FileExistsError:
            os.unlink(path)
            fd = os.open(path, flags, mode & 0o777)
        return fd, mode & 0o777 & ~_umask()

    def fd_meta(self, fd: int, e: Entry, created_mode: int | None = None) -> None:
        """Ownership and mode; the chmod is skipped when creating the file already gave that mode."""
        chown = self.spec.preserve and e.uid is not None and os.geteuid() == 0
        if chown:
            os.fchown(fd, e.uid or 0, e.gid if e.gid is not None else -1)  # before chmod: chown clears set-id bits
        mode = st.S_IMODE(e.mode) if e.mode is not None else 0o644
        if chown or mode != created_mode:
            os.fchmod(fd, mode)

    # big files in ranges, and hard links (local destinations only) --------

    def write_range(self, src: Source, e: Entry, offset: int, length: int) -> None:
        """One byte range of ``e`` into its temp file at the same offset; the temp file is created by
        whichever range runs first and extended to the full size (a hole), so ranges land in any order."""
        dfd = os.open(self.temp(e.out_rel), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            if os.fstat(dfd).st_size < (e.size or 0):
                os.ftruncate(dfd, e.size or 0)  # only ever grows: bytes already written stay below the old size
            src.read_range(e, dfd, offset, length)
        finally:
            os.close(dfd)

    def finish(self, src: Source, e: Entry) -> None:
        """Every range of ``e`` is in its temp file: size, metadata, then the rename."""
        tmp = self.temp(e.out_rel)
        e = src.fresh(e, follow=self.spec.follow_symlinks)
        fd = os.open(tmp, os.O_WRONLY)
        try:
            os.ftruncate(fd, e.size or 0)
            self.fd_meta(fd, e)
        finally:
            os.close(fd)
        if e.mtime_ns is not None:
            os.utime(tmp, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns))
        os.rename(tmp, self.path(e.out_rel))

    def link(self, e: Entry, first: bytes) -> str:
        """Hard-link ``e`` to the already copied ``first``; ``skip`` when it already is."""
        dst, target = self.path(e.out_rel), self.path(first)
        if self.spec.check_existing:
            try:
                s, t = os.lstat(dst), os.lstat(target)
            except FileNotFoundError:
                pass
            else:
                if (s.st_dev, s.st_ino) == (t.st_dev, t.st_ino):
                    return "skip"
                verdict = self.verdict(e)
                if verdict not in ("copy", "skip"):
                    raise FileExistsError(verdict)
        tmp = self.temp(e.out_rel)
        unlink_quietly(tmp)
        os.link(target, tmp)
        os.rename(tmp, dst)
        return "link"


class FsspecDestination(_Destination):
    """A tree written through fsspec: object stores (one PUT per file) or sftp-like back ends."""

    local = False

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec
        self.has_dirs = spec.dst_has_dirs
        self.fs = _fs(spec.dst_protocol, spec.dst_options)

    def path(self, rel: bytes) -> str:
        return remote_path(self.spec.dst_root, rel)

    def ancestors(self) -> AncestorCheck | None:
        return None

    def make_dir(self, e: Entry) -> None:
        self.fs.makedirs(self.path(e.out_rel), exist_ok=True)

    def set_meta(self, src: Source, e: Entry, follow: bool = True) -> None:
        """Nothing: fsspec back ends keep no source metadata."""

    def same(self, e: Entry) -> bool | None:
        try:
            info = self.fs.info(self.path(e.out_rel))
        except FileNotFoundError:
            return None
        return info.get("type") == "file" and info.get("size") == e.size  # object stores keep no source mtime

    def make_parent(self, e: Entry) -> bool:
        return False

    def write_file(self, src: Source, e: Entry) -> None:
        """One PUT (or a multipart upload s3fs completes at close) is atomic: no temp name there."""
        dst = self.path(e.out_rel)
        target = os.fsdecode(temp_of(os.fsencode(dst), self.spec.token)) if self.has_dirs else dst
        src.send(self.fs, e, target)
        if target != dst:
            self.fs.mv(target, dst)

    def symlink(self, src: Source, e: Entry) -> str:
        if not self.has_dirs:
            return "skip"  # object stores have no symlinks
        raise NotImplementedError("symlinks on this destination")

    def special(self, src: Source, e: Entry) -> str | BaseException:
        return "skip"


Destination = LocalDestination | FsspecDestination


def destination_of(spec: CopySpec) -> Destination:
    return LocalDestination(spec) if spec.dst_local else FsspecDestination(spec)


def remove_stale_temps(directory: bytes, keep: str | None = None) -> int:
    """Delete ``.*.pfs-tmp-*`` files left in ``directory`` by killed or interrupted runs.

    Temp files of the run ``keep`` names are kept: a resumed run (same token) still needs the
    byte ranges it wrote before it was interrupted.
    """
    removed = 0
    mine = TEMP_MARK + keep.encode() if keep else None
    with os.scandir(directory) as it:
        for e in it:
            if mine is not None and e.name.endswith(mine):
                continue
            if is_temp_name(e.name) and not e.is_dir(follow_symlinks=False):
                try:
                    os.unlink(e.path)
                    removed += 1
                except FileNotFoundError:
                    pass
    return removed


def unlink_quietly(path: bytes) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _umask() -> int:
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)
    return _UMASK


_UMASK: int | None = None
