"""The one writer of every file pfs writes outside a destination tree: markers, manifest parts,
plans, failure logs, journals, locks, keys, query outputs, and the directories that hold them.

Why one writer: pfs runs as root in directories other users may write (a group's manifest
directory, ``/tmp``, a cache someone else created).  A predictable temp name opened by its path
is a place to plant a symlink, and root then writes through it (``/etc/victim.conf`` started with
``PAR1``).  So no file of pfs's own is opened by a full path:

* its directory is opened once (``O_DIRECTORY|O_NOFOLLOW``) and checked on the open descriptor:
  owned by this user or root, and not writable by group or others unless sticky (then a name
  replaced there must be this user's) -- :class:`UnsafeOutput` (one line) otherwise;
* a file is written under a random temp name made ``O_CREAT|O_EXCL|O_NOFOLLOW`` relative to that
  descriptor, with an explicit mode (at most :data:`SHARED_FILE` or :data:`PRIVATE_FILE`: a
  ``umask 000`` never widens it, a stricter umask narrows it), ``fsync``'ed, renamed within the same
  descriptor (``renameat``) and the directory ``fsync``'ed: a reader sees the old file or the new
  one, whole;
* directories pfs makes for itself are made ``mkdirat`` with an explicit mode; the private ones
  (cache, logs, keys, locks: :func:`private_dir`) are reached from ``/`` one component at a time,
  each component checked by the rule above, so a ``pfs`` directory another user owns (or made
  0777) anywhere above them is refused;
* outputs on an object store (``fsspec``) are one put of the complete bytes (:func:`remote_file`).

What a copy writes inside its destination tree is not written here: it has its own temp-file and
rename protocol relative to the pinned destination (``operators/copy``, ``native/src/copy.rs``).
``tests/test_one_writer.py`` walks the code and fails on any other write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import IO, Any

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
SHARED_DIR = 0o755
SHARED_FILE = 0o644
TEMP_PREFIX = ".pfs-out-"  # every temp name the writer makes starts so (never a name a reader takes)

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
SPOOL_BYTES = 64 << 20  # an object-store output up to this size is one put from memory


class UnsafeOutput(PermissionError):
    """A directory or name pfs will not write its own files in (the message is one line naming it)."""


def _trusted(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def check_dir(st: os.stat_result, path: str, *, private: bool = False) -> None:
    """Refuse a directory others could change under pfs: not a directory, owned by someone other
    than this user or root, or writable by group/others without the sticky bit.  ``private``: it
    must also be this user's and closed to group and others (a 0700 directory of the cache)."""
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeOutput(f"{path}: not a directory (a symlink is never followed here)")
    if not _trusted(st.st_uid):
        raise UnsafeOutput(
            f"{path}: belongs to uid {st.st_uid}, not to this user ({os.geteuid()}) or root: "
            "pfs writes its own files only in directories others cannot change (write elsewhere)"
        )
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise UnsafeOutput(
            f"{path}: writable by group or others (mode {stat.S_IMODE(st.st_mode):o}): pfs writes its own "
            "files only in directories others cannot change (chmod go-w, or write elsewhere)"
        )
    if private and (st.st_uid != os.geteuid() or st.st_mode & 0o077):
        raise UnsafeOutput(f"{path}: must be mode 700 and this user's (chmod 700)")


class TempFile:
    """A file being written under a temp name: ``file`` (buffered, binary) or, for a writer that
    takes a path (pyarrow's native one), ``path``, a name of this very open file that no one can
    redirect (``/proc/self/fd/N``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.file: IO[bytes] = open(fd, "wb", closefd=False)  # noqa: SIM115 (closed by Dir.replace)
        self.path = f"/proc/self/fd/{fd}"


class Dir:
    """An open, checked directory: every name pfs writes in it is resolved relative to ``fd``."""

    def __init__(self, fd: int, path: str, st: os.stat_result) -> None:
        self.fd = fd
        self.path = path
        self._open_to_others = bool(st.st_mode & 0o022)  # sticky (else refused): names there must be ours

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def subdir(self, name: str, mode: int = SHARED_DIR, *, create: bool = True, private: bool = False) -> Dir:
        """The checked directory ``name`` in this one, made with ``mode`` when missing."""
        path = os.path.join(self.path, name)
        try:
            return _open_in(self.fd, name, path, private)
        except FileNotFoundError:
            if not create:
                raise
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=self.fd)
        return _open_in(self.fd, name, path, private)

    def _check_name(self, name: str) -> None:
        if "/" in name or name in ("", ".", ".."):
            raise UnsafeOutput(f"{self.path}/{name}: not a plain file name")
        if self._open_to_others:
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if st.st_uid != os.geteuid():
                raise UnsafeOutput(
                    f"{self.path}/{name}: belongs to uid {st.st_uid} in a directory others can write; not replaced"
                )

    @contextlib.contextmanager
    def replace(self, name: str, mode: int = SHARED_FILE) -> Iterator[TempFile]:
        """Write ``name`` whole: a new temp file is yielded; when the block ends without an error it
        is flushed, ``fsync``'ed and renamed onto ``name`` (else removed)."""
        self._check_name(name)
        tmp = f"{TEMP_PREFIX}{os.urandom(8).hex()}"
        fd = os.open(tmp, _NEW_FILE, mode, dir_fd=self.fd)
        out = TempFile(fd)
        done = False
        try:
            yield out
            out.file.flush()
            os.fsync(fd)
            self._check_name(name)
            os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            done = True
        finally:
            with contextlib.suppress(OSError, ValueError):
                out.file.close()
            os.close(fd)
            if not done:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=self.fd)
        self._sync()

    def _sync(self) -> None:
        """``fsync`` the directory (the rename is durable); a file system that cannot sync a directory
        (``EINVAL``: some network and FUSE ones) has nothing more to give."""
        try:
            os.fsync(self.fd)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.ENOSYS):
                raise

    def write_bytes(self, name: str, data: bytes, mode: int = SHARED_FILE) -> None:
        with self.replace(name, mode) as t:
            t.file.write(data)

    def create_new(self, name: str, data: bytes, mode: int = PRIVATE_FILE) -> bool:
        """Make ``name`` with ``data`` only if it does not exist (a key: whoever makes it first wins);
        whether this call made it."""
        self._check_name(name)
        tmp = f"{TEMP_PREFIX}{os.urandom(8).hex()}"
        fd = os.open(tmp, _NEW_FILE, mode, dir_fd=self.fd)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
            made = True
        except FileExistsError:
            made = False
        finally:
            os.unlink(tmp, dir_fd=self.fd)
        self._sync()
        return made

    def open_fd(self, name: str, flags: int, mode: int = PRIVATE_FILE) -> int:
        """A descriptor of the regular file ``name`` (created when ``O_CREAT`` is in ``flags``), never
        through a symlink, and only a file of this user with one link: locks, append-only logs."""
        self._check_name(name)
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            os.close(fd)
            raise UnsafeOutput(f"{self.path}/{name}: not a regular file of this user with one link; not written")
        return fd

    def unlink(self, name: str) -> None:
        """Remove the file ``name`` if it is there."""
        self._check_name(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)


def _open_in(parent: int, name: str, path: str, private: bool) -> Dir:
    try:
        fd = os.open(name, _OPEN_DIR, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeOutput(f"{path}: not a directory (a symlink is never followed here)") from None
        raise
    try:
        st = os.fstat(fd)
        check_dir(st, path, private=private)
    except BaseException:
        os.close(fd)
        raise
    return Dir(fd, path, st)


def open_dir(path: str | os.PathLike[str], *, create: bool = False, mode: int = SHARED_DIR) -> Dir:
    """The checked directory ``path`` (made with ``mode`` when ``create`` and missing, its missing
    parents too).  Symlinks above its last component are the user's own naming and are followed; the last
    component never is."""
    path = os.path.abspath(os.fspath(path))
    head, name = os.path.split(path)
    if not name:  # "/"
        fd = os.open("/", _OPEN_DIR)
        st = os.fstat(fd)
        return Dir(fd, "/", st)
    if create:
        make_parents(head, mode)
    pfd = os.open(head, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            return _open_in(pfd, name, path, False)
        except FileNotFoundError:
            if not create:
                raise
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=pfd)
        return _open_in(pfd, name, path, False)
    finally:
        os.close(pfd)


def make_parents(path: str, mode: int = SHARED_DIR) -> None:
    """Make the missing directories of ``path`` with ``mode`` (the user's path: existing symlinks
    in it are followed, as ``mkdir -p`` does)."""
    missing: list[str] = []
    while not os.path.isdir(path):
        path, name = os.path.split(path)
        if not name:
            break
        missing.append(name)
    for name in reversed(missing):
        path = os.path.join(path, name)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, mode)


def private_dir(path: str | os.PathLike[str], *, strict: bool = False) -> Dir:
    """The directory ``path`` of pfs's own (cache, logs, keys, locks), made 0700 where missing:
    reached from ``/`` one component at a time without following a symlink, every component
    checked (:func:`check_dir`); ``strict``: the last one must be this user's with mode 700."""
    real = os.path.realpath(os.fspath(path))  # the user's own symlinks (a $HOME on another volume) resolved once
    parts = [p for p in real.split("/") if p]
    here = _open_in_root()
    try:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            sub = here.subdir(name, PRIVATE_DIR, create=True, private=last and strict)
            here.close()
            here = sub
        return here
    except BaseException:
        here.close()
        raise


def _open_in_root() -> Dir:
    fd = os.open("/", _OPEN_DIR)
    return Dir(fd, "/", os.fstat(fd))


@contextlib.contextmanager
def replace_file(path: str | os.PathLike[str], mode: int = SHARED_FILE, *, private: bool = False) -> Iterator[TempFile]:
    """Write the file ``path`` whole through its checked directory (:meth:`Dir.replace`);
    ``private``: the directory is one of pfs's own (:func:`private_dir`)."""
    head, name = os.path.split(os.path.abspath(os.fspath(path)))
    with private_dir(head) if private else open_dir(head) as d, d.replace(name, mode) as t:
        yield t


def write_bytes(path: str | os.PathLike[str], data: bytes, mode: int = SHARED_FILE, *, private: bool = False) -> None:
    with replace_file(path, mode, private=private) as t:
        t.file.write(data)


@contextlib.contextmanager
def remote_file(fs: Any, path: str) -> Iterator[IO[bytes]]:
    """An output on an object store (an ``fsspec`` file system): what is written is spooled and
    stored with one put of the complete bytes when the block ends without an error (nothing is
    stored otherwise); a big one goes through the store's own upload, which also makes the object
    appear only once complete."""
    import shutil
    import tempfile

    with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as spool:
        yield spool
        size = spool.tell()
        spool.seek(0)
        if size <= SPOOL_BYTES:
            fs.pipe_file(path, spool.read())
        else:
            with fs.open(path, "wb") as out:
                shutil.copyfileobj(spool, out, 8 << 20)


def remote_dirs(fs: Any, path: str) -> None:
    """An output directory on an object store (a prefix; a bucket made where the store needs one)."""
    fs.makedirs(path, exist_ok=True)


@contextlib.contextmanager
def output_file(url: str, storage_options: dict | None = None, mode: int = SHARED_FILE) -> Iterator[IO[bytes]]:
    """One output named by the user, local (:func:`replace_file`) or on an object store
    (:func:`remote_file`): yields a binary file."""
    if "://" not in url and not storage_options:
        with replace_file(url, mode) as t:
            yield t.file
        return
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    if is_local(fs):
        with replace_file(path, mode) as t:
            yield t.file
    else:
        with remote_file(fs, path) as f:
            yield f


def is_local(fs: Any) -> bool:
    """An fsspec file system that is this machine's own (written through :func:`replace_file`)."""
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocol or "local" in protocol


__all__ = [
    "PRIVATE_DIR",
    "PRIVATE_FILE",
    "SHARED_DIR",
    "SHARED_FILE",
    "Dir",
    "TempFile",
    "UnsafeOutput",
    "check_dir",
    "is_local",
    "make_parents",
    "open_dir",
    "output_file",
    "private_dir",
    "remote_dirs",
    "remote_file",
    "replace_file",
    "write_bytes",
]
