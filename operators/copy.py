"""Copy tasks: directories, chunks of files, byte ranges of big files, hard links, metadata.

Engine-free: the driver (``dask_pfs.copy``) ships these functions to workers.  Every file is
written under a temporary name in its destination directory (:func:`temp_name`) and renamed
into place once its data and metadata are complete, so a reader never sees a partial file
under its real name and a killed task leaves only temp files, which the next run's directory
phase removes (:func:`make_dirs`).  Per-entry failures are returned, never raised, so one bad
file does not fail (and retry) a chunk of 500; whole-task failures (a dead worker) are retried
by the engine, which is safe because every task is idempotent.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat as st
from dataclasses import dataclass, field
from typing import NamedTuple

import fsspec

from .copy_local import copy_range, is_sparse
from .dirfd import OpenDirs
from .names import check_relative
from .pool import get_pool
from .ratelimit import take_bytes, take_ops
from .remote_scan import FLAT_PROTOCOLS
from .rows import describe_error
from .safety import AncestorCheck

TEMP_MARK = b".pfs-tmp-"
NAME_MAX = 255
STREAM_BLOCK = 16 << 20


class Entry(NamedTuple):
    """One manifest row, reduced to what copying needs; paths are exact bytes relative to the roots."""

    rel: bytes
    kind: str  # file / directory / symlink / other
    size: int | None = None
    mtime_ns: int | None = None
    atime_ns: int | None = None
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    link_target: bytes | None = None
    dst_rel: bytes | None = None  # a different destination name (copying one file to a new name)

    @property
    def out_rel(self) -> bytes:
        return self.dst_rel if self.dst_rel is not None else self.rel


@dataclass(frozen=True)
class CopySpec:
    """What every task of one copy job shares."""

    src_protocol: str
    src_root: str
    dst_protocol: str
    dst_root: str
    token: str  # names this run's temp files; the same in every attempt of a task
    on_exist: str = "error"  # error | skip | overwrite  (see dask_pfs.copy.copy)
    check_existing: bool = True  # False when the destination root did not exist before the run
    follow_symlinks: bool = False
    preserve: bool = False  # ownership (needs root)
    inplace: bool = False  # small files straight to their names: no rename (costly on GlusterFS), no atomicity
    make_parents: bool = False  # a file's destination directory may not exist yet: create it (streamed copies)
    threads: int | None = None
    src_options: dict = field(default_factory=dict)
    dst_options: dict = field(default_factory=dict)

    @property
    def src_local(self) -> bool:
        return self.src_protocol in ("file", "local")

    @property
    def dst_local(self) -> bool:
        return self.dst_protocol in ("file", "local")

    @property
    def storage(self) -> tuple[tuple[str, str], ...]:
        """Both ends, for where the concurrency controller starts (``operators.pool.get_pool``)."""
        return ((self.src_protocol, self.src_root), (self.dst_protocol, self.dst_root))

    @property
    def dst_has_dirs(self) -> bool:
        return self.dst_protocol not in FLAT_PROTOCOLS

    def src_path(self, rel: bytes) -> bytes | str:
        return _join(self.src_root, rel, self.src_local)

    def dst_path(self, rel: bytes) -> bytes | str:
        return _join(self.dst_root, rel, self.dst_local)


def with_stat(e: Entry, s: os.stat_result) -> Entry:
    """Metadata from the source as read now: exact to the nanosecond (DuckDB hands back microseconds)."""
    return e._replace(mode=s.st_mode, mtime_ns=s.st_mtime_ns, atime_ns=s.st_atime_ns, uid=s.st_uid, gid=s.st_gid)


def _source_stat(spec: CopySpec, e: Entry, follow: bool = False) -> Entry:
    if not spec.src_local:
        return e
    try:
        return with_stat(e, os.stat(spec.src_path(e.rel), follow_symlinks=follow))
    except OSError:
        return e


def _join(root: str, rel: bytes, local: bool) -> bytes | str:
    check_relative(rel) if rel else None
    if local:
        base = os.fsencode(root).rstrip(b"/") or b""
        return base + b"/" + rel if rel else (base or b"/")
    text = rel.decode("utf-8", "surrogateescape")
    return f"{root.rstrip('/')}/{text}" if text else root


@dataclass
class Outcome:
    """Counters and failures of one task; the driver adds them up."""

    files: int = 0
    bytes: int = 0
    dirs: int = 0
    symlinks: int = 0
    hardlinks: int = 0
    skipped: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)

    def add(self, other: Outcome) -> None:
        for name in ("files", "bytes", "dirs", "symlinks", "hardlinks", "skipped"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures.extend(other.failures)

    def fail(self, rel: bytes, error: BaseException | str) -> None:
        self.failures.append((os.fsdecode(rel), describe_error(error)))

    def counts(self) -> dict:
        return {k: getattr(self, k) for k in ("files", "bytes", "dirs", "symlinks", "hardlinks", "skipped")} | {
            "failed": len(self.failures)
        }


def temp_name(name: bytes, token: str) -> bytes:
    """``.NAME.pfs-tmp-TOKEN`` (hidden, same directory); a hash stands in for names too long for that."""
    suffix = TEMP_MARK + token.encode()
    if len(name) + len(suffix) + 1 > NAME_MAX:
        name = hashlib.sha1(name).hexdigest().encode()
    return b"." + name + suffix


def is_temp_name(name: bytes) -> bool:
    return name.startswith(b".") and TEMP_MARK in name


def _temp_of(path: bytes, token: str) -> bytes:
    head, _, name = path.rpartition(b"/")
    return head + b"/" + temp_name(name, token)


def _fs(protocol: str, options: dict):
    return fsspec.filesystem(protocol, **options)


# ---------------------------------------------------------------- directories


def make_dirs(spec: CopySpec, dirs: list[Entry]) -> Outcome:
    """Create directories (owner-writable; their real modes come last) and remove stale temp files.

    A directory that already existed may hold temp files of an interrupted run: they go now,
    before any file task of this run starts, so this run's own temp files are never touched.
    """
    out = Outcome()
    if not spec.dst_has_dirs:
        return out
    pool = get_pool(spec.threads, spec.storage)
    for rel, result in zip(dirs, pool.map(lambda e: _make_dir(spec, e), dirs), strict=True):
        if isinstance(result, BaseException):
            out.fail(rel.out_rel, result)
        else:
            out.dirs += 1
    return out


def _make_dir(spec: CopySpec, entry: Entry) -> BaseException | None:
    try:
        path = spec.dst_path(entry.out_rel)
        if not spec.dst_local:
            _fs(spec.dst_protocol, spec.dst_options).makedirs(path, exist_ok=True)
            return None
        try:
            os.mkdir(path, 0o700)
            return None
        except FileNotFoundError:
            os.makedirs(path, 0o700, exist_ok=True)
            return None
        except FileExistsError:
            if not os.path.isdir(path) or os.path.islink(path):
                return FileExistsError(f"exists and is not a directory: {os.fsdecode(path)}")
        if spec.check_existing:
            remove_stale_temps(path, keep=spec.token)
        return None
    except Exception as exc:
        return exc


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


def set_dir_meta(spec: CopySpec, dirs: list[Entry]) -> Outcome:
    """Modes, ownership and times of directories: after everything inside them was written."""
    out = Outcome()
    if not spec.dst_local:
        return out
    pool = get_pool(spec.threads, spec.storage)
    for e, result in zip(dirs, pool.map(lambda e: _meta_path(spec, e), dirs), strict=True):
        if isinstance(result, BaseException):
            out.fail(e.out_rel, result)
    return out


def _meta_path(spec: CopySpec, e: Entry, follow: bool = True) -> BaseException | None:
    try:
        path = spec.dst_path(e.out_rel)
        if e.rel:
            e = _source_stat(spec, e)
        if spec.preserve and e.uid is not None and os.geteuid() == 0:
            os.chown(path, e.uid, e.gid if e.gid is not None else -1, follow_symlinks=follow)
        if e.mode is not None and follow:
            os.chmod(path, st.S_IMODE(e.mode))
        if e.mtime_ns is not None:
            os.utime(path, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns), follow_symlinks=follow)
        return None
    except Exception as exc:
        return exc


# ---------------------------------------------------------------- files


def copy_files(spec: CopySpec, entries: list[Entry]) -> Outcome:
    """Copy a chunk of files, symlinks and special files concurrently on the process's I/O pool."""
    out = Outcome()
    entries = _safe(spec, entries, out)
    pool = get_pool(spec.threads, spec.storage)
    sources = OpenDirs(os.fsencode(spec.src_root)) if spec.src_local else None
    try:
        results = list(pool.map(lambda e: _copy_one(spec, e, sources), entries))
    finally:
        if sources is not None:
            sources.close()
    for e, result in zip(entries, results, strict=True):
        if isinstance(result, BaseException):
            out.fail(e.out_rel, result)
        elif result == "skip":
            out.skipped += 1
        elif result == "symlink":
            out.symlinks += 1
        else:
            out.files += 1
            out.bytes += e.size or 0
    return out


def _safe(spec: CopySpec, entries: list[Entry], out: Outcome) -> list[Entry]:
    """Into an existing destination, drop entries whose parent directories there are symlinks now."""
    if not (spec.check_existing and spec.dst_local):
        return entries
    check = AncestorCheck(os.fsencode(spec.dst_root))
    kept = []
    for e in entries:
        problem = check.ancestor_problem(e.out_rel)
        if problem is None:
            kept.append(e)
        else:
            out.fail(e.out_rel, f"destination {problem}; not written")
    return kept


def _copy_one(spec: CopySpec, e: Entry, sources: OpenDirs | None = None, retry: bool = True) -> str | BaseException:
    take_ops()
    try:
        if spec.check_existing:
            verdict = existing_verdict(spec, e)
            if verdict != "copy":
                return verdict if verdict == "skip" else FileExistsError(verdict)
        kind = e.kind
        if kind == "symlink" and spec.follow_symlinks:
            kind = _followed_kind(spec, e)
        if kind == "symlink":
            if not spec.dst_has_dirs:
                return "skip"  # object stores have no symlinks
            _copy_symlink(spec, e)
            return "symlink"
        if kind == "other":
            return _copy_special(spec, e)
        if kind == "directory":
            return NotImplementedError("symlink to a directory is not followed (-L copies symlinks to files)")
        _copy_file(spec, e, sources)
        return "file"
    except FileNotFoundError as exc:
        if retry and spec.make_parents and _made_parent(spec, e):
            return _copy_one(spec, e, sources, retry=False)
        return exc
    except Exception as exc:
        return exc


def _made_parent(spec: CopySpec, e: Entry) -> bool:
    """Make sure the destination directory of ``e`` exists (owner-writable: its real mode comes last),
    so the copy can be tried once more.  Another thread may have made it meanwhile; when the
    source was what was missing, the second try fails the same way.

    Only for a streamed copy into a fresh destination (``dask_pfs.copy``): files are copied as the
    walk lists them, and nothing has made their directories yet.  Nothing but this run has written
    there, so no component can be a symlink planted to redirect the copy.
    """
    if not spec.dst_local:
        return False
    os.makedirs(os.path.dirname(spec.dst_path(e.out_rel)), 0o700, exist_ok=True)
    return True


def _followed_kind(spec: CopySpec, e: Entry) -> str:
    if spec.src_local:
        s = os.stat(spec.src_path(e.rel))
        return "file" if st.S_ISREG(s.st_mode) else "directory" if st.S_ISDIR(s.st_mode) else "other"
    return "file"


def existing_verdict(spec: CopySpec, e: Entry) -> str:
    """``"copy"``, ``"skip"`` (identical file there) or an error message (exists and differs)."""
    dst = spec.dst_path(e.out_rel)
    if spec.dst_local:
        try:
            s = os.lstat(dst)
        except FileNotFoundError:
            return "copy"
        if e.kind == "symlink" and not spec.follow_symlinks:
            same = st.S_ISLNK(s.st_mode) and os.readlink(dst) == e.link_target
        else:
            same = (
                st.S_ISREG(s.st_mode)
                and s.st_size == e.size
                and (e.mtime_ns is None or s.st_mtime_ns // 1000 == e.mtime_ns // 1000)
            )
    else:
        fs = _fs(spec.dst_protocol, spec.dst_options)
        try:
            info = fs.info(dst)
        except FileNotFoundError:
            return "copy"
        same = info.get("type") == "file" and info.get("size") == e.size  # object stores keep no source mtime
    if same and spec.on_exist != "overwrite":
        return "skip"
    if spec.on_exist == "error":
        return f"exists and differs (size or mtime): {os.fsdecode(dst)}; use --overwrite or --skip-existing"
    return "copy"


def _copy_file(spec: CopySpec, e: Entry, sources: OpenDirs | None = None) -> None:
    """``sources`` opens the source relative to its open parent directory (a lookup per file, not per
    path component: ``operators.dirfd``)."""
    src, dst = spec.src_path(e.rel), spec.dst_path(e.out_rel)
    if not (spec.src_local and spec.dst_local):
        take_bytes(e.size or 0)  # fsspec moves the data itself: charge it up front
    if not spec.dst_local:
        _copy_to_remote(spec, src, dst)
        return
    tmp = dst if spec.inplace else _temp_of(dst, spec.token)
    try:
        if spec.src_local:
            flags = os.O_RDONLY | os.O_CLOEXEC | (0 if spec.follow_symlinks else os.O_NOFOLLOW)
            sfd = sources.open_file(e.rel, flags) if sources is not None else os.open(src, flags)
            try:
                s = os.fstat(sfd)
                e = with_stat(e, s)
                dfd, created = _create(tmp, st.S_IMODE(e.mode))
                try:
                    sparse = is_sparse(s)
                    copy_range(sfd, dfd, 0, s.st_size, sparse, (s.st_dev, 0))  # the size fstat saw
                    if sparse:
                        os.ftruncate(dfd, s.st_size)
                    _fd_meta(spec, dfd, e, created)
                finally:
                    os.close(dfd)
            finally:
                os.close(sfd)
        else:
            _fs(spec.src_protocol, spec.src_options).get_file(src, os.fsdecode(tmp))
            fd = os.open(tmp, os.O_RDONLY)
            try:
                _fd_meta(spec, fd, e)
            finally:
                os.close(fd)
        if e.mtime_ns is not None:
            os.utime(tmp, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns))  # after close: NFS flushes on close
        if tmp != dst:
            os.rename(tmp, dst)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _fd_meta(spec: CopySpec, fd: int, e: Entry, created_mode: int | None = None) -> None:
    """Ownership and mode; the chmod is skipped when creating the file already gave that mode."""
    chown = spec.preserve and e.uid is not None and os.geteuid() == 0
    if chown:
        os.fchown(fd, e.uid, e.gid if e.gid is not None else -1)  # before chmod: chown clears set-id bits
    mode = st.S_IMODE(e.mode) if e.mode is not None else 0o644
    if chown or mode != created_mode:
        os.fchmod(fd, mode)


def _create(path: bytes, mode: int) -> tuple[int, int]:
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


def _umask() -> int:
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)
    return _UMASK


_UMASK: int | None = None


def _copy_to_remote(spec: CopySpec, src, dst: str) -> None:
    """Object stores: one PUT (or a multipart upload s3fs completes at close) is atomic, no temp name.

    Other fsspec back ends with directories (sftp...) get a temp name and a rename.
    """
    fs = _fs(spec.dst_protocol, spec.dst_options)
    target = dst if not spec.dst_has_dirs else os.fsdecode(_temp_of(dst.encode("utf-8", "surrogateescape"), spec.token))
    if spec.src_local:
        fs.put_file(os.fsdecode(src), target)
    else:
        sfs = _fs(spec.src_protocol, spec.src_options)
        with sfs.open(src, "rb") as f, fs.open(target, "wb") as g:
            shutil.copyfileobj(f, g, STREAM_BLOCK)
    if target != dst:
        fs.mv(target, dst)


def _copy_symlink(spec: CopySpec, e: Entry) -> None:
    dst = spec.dst_path(e.out_rel)
    if not spec.dst_local:
        raise NotImplementedError("symlinks on this destination")
    e = _source_stat(spec, e)
    tmp = _temp_of(dst, spec.token)
    _unlink_quietly(tmp)
    os.symlink(e.link_target, tmp)
    try:
        if spec.preserve and e.uid is not None and os.geteuid() == 0:
            os.lchown(tmp, e.uid, e.gid if e.gid is not None else -1)
        if e.mtime_ns is not None:
            os.utime(tmp, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns), follow_symlinks=False)
        os.rename(tmp, dst)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _copy_special(spec: CopySpec, e: Entry) -> str | BaseException:
    """FIFOs are recreated; device nodes only by root with ``preserve``; sockets are skipped."""
    if not spec.dst_local or e.mode is None:
        return "skip"
    dst = spec.dst_path(e.out_rel)
    e = _source_stat(spec, e)
    tmp = _temp_of(dst, spec.token)
    _unlink_quietly(tmp)
    if st.S_ISFIFO(e.mode):
        os.mkfifo(tmp, 0o600)
    elif (st.S_ISCHR(e.mode) or st.S_ISBLK(e.mode)) and spec.preserve and os.geteuid() == 0 and spec.src_local:
        os.mknod(tmp, e.mode, os.lstat(spec.src_path(e.rel)).st_rdev)
    else:
        return "skip"
    try:
        os.chmod(tmp, st.S_IMODE(e.mode))
        if e.mtime_ns is not None:
            os.utime(tmp, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns))
        os.rename(tmp, dst)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return "file"


def _unlink_quietly(path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


# ---------------------------------------------------------------- big files in ranges


def copy_part(spec: CopySpec, e: Entry, offset: int, length: int) -> str:
    """Copy one byte range of a big file into its temp file at the same offset (local destinations).

    Idempotent: a retry rewrites the same bytes.  The temp file is created by whichever range
    runs first and extended to the full size (a hole), so ranges can land in any order.
    Returns ``"copied"``, ``"skip"`` or an error message when the destination already exists.
    """
    if spec.check_existing:
        if spec.dst_local:
            problem = AncestorCheck(os.fsencode(spec.dst_root)).ancestor_problem(e.out_rel)
            if problem is not None:
                return f"destination {problem}; not written"
        verdict = existing_verdict(spec, e)
        if verdict != "copy":
            return verdict
    tmp = _temp_of(spec.dst_path(e.out_rel), spec.token)
    dfd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        if os.fstat(dfd).st_size < (e.size or 0):
            os.ftruncate(dfd, e.size)  # only ever grows: bytes already written stay below the old size
        if spec.src_local:
            flags = os.O_RDONLY | (0 if spec.follow_symlinks else os.O_NOFOLLOW)
            sfd = os.open(spec.src_path(e.rel), flags)
            try:
                s = os.fstat(sfd)
                copy_range(sfd, dfd, offset, length, is_sparse(s), (s.st_dev, 0))
            finally:
                os.close(sfd)
        else:
            fs = _fs(spec.src_protocol, spec.src_options)
            src = spec.src_path(e.rel)
            pos, end = offset, offset + length
            while pos < end:
                data = fs.cat_file(src, start=pos, end=min(end, pos + STREAM_BLOCK))
                if not data:
                    break
                view = memoryview(data)
                done = 0
                while done < len(data):
                    done += os.pwrite(dfd, view[done:], pos + done)
                pos += len(data)
    finally:
        os.close(dfd)
    return "copied"


def finish_file(spec: CopySpec, e: Entry, *parts: str) -> Outcome:
    """Runs once every range of ``e`` is in its temp file: size, metadata, then the rename."""
    out = Outcome()
    verdicts = set(parts)
    if verdicts != {"copied"}:
        if verdicts == {"skip"}:
            out.skipped += 1
        else:
            out.fail(e.out_rel, next(v for v in verdicts if v not in ("copied", "skip")))
        return out
    dst = spec.dst_path(e.out_rel)
    tmp = _temp_of(dst, spec.token)
    e = _source_stat(spec, e, follow=spec.follow_symlinks)
    try:
        fd = os.open(tmp, os.O_WRONLY)
        try:
            os.ftruncate(fd, e.size or 0)
            _fd_meta(spec, fd, e)
        finally:
            os.close(fd)
        if e.mtime_ns is not None:
            os.utime(tmp, ns=(e.atime_ns or e.mtime_ns, e.mtime_ns))
        os.rename(tmp, dst)
        out.files += 1
        out.bytes += e.size or 0
    except Exception as exc:
        out.fail(e.out_rel, exc)
    return out


# ---------------------------------------------------------------- hard links


def link_files(spec: CopySpec, pairs: list[tuple[Entry, bytes]]) -> Outcome:
    """Recreate hard links: each ``(entry, first)`` links ``entry`` to the already copied ``first``."""
    out = Outcome()
    kept = {e.rel for e in _safe(spec, [p[0] for p in pairs], out)}
    pairs = [p for p in pairs if p[0].rel in kept]
    pool = get_pool(spec.threads, spec.storage)
    for (e, _), result in zip(pairs, pool.map(lambda p: _link_one(spec, *p), pairs), strict=True):
        if isinstance(result, BaseException):
            out.fail(e.out_rel, result)
        elif result == "skip":
            out.skipped += 1
        else:
            out.hardlinks += 1
    return out


def _link_one(spec: CopySpec, e: Entry, first: bytes) -> str | BaseException:
    try:
        dst, target = spec.dst_path(e.out_rel), spec.dst_path(first)
        if spec.check_existing:
            try:
                s, t = os.lstat(dst), os.lstat(target)
            except FileNotFoundError:
                pass
            else:
                if (s.st_dev, s.st_ino) == (t.st_dev, t.st_ino):
                    return "skip"
                verdict = existing_verdict(spec, e)
                if verdict not in ("copy", "skip"):
                    return FileExistsError(verdict)
        tmp = _temp_of(dst, spec.token)
        _unlink_quietly(tmp)
        os.link(target, tmp)
        os.rename(tmp, dst)
        return "link"
    except Exception as exc:
        return exc
