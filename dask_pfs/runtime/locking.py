"""One writer per destination: a lock that makes a second ``pfs cp``/``sync`` into the same
destination, or a second ``pfs scan`` into the same output, refuse at once (exit 2) instead of
mixing their work (docs/reliability.md).

The lock is an ``flock`` on a file in a per-user lock directory (:func:`lock_dir`: ``PFS_LOCK_DIR``,
else ``$XDG_RUNTIME_DIR/pfs-locks``, else ``/tmp/pfs-<uid>/locks``) keyed by what the job writes
(the destination's real path, or its URL), never a file inside the destination or the home
directory: nothing is left in the copied tree or the manifest, and a lock file of a killed run
needs no cleaning (the kernel drops a dead process's ``flock``).  It guards the jobs one user drives
from one host; ``PFS_LOCK_DIR`` on a shared file system with working ``flock`` (NFSv4, Lustre)
widens that to every host the same user (uid) runs on.  The directory must belong to the user and
be writable by no one else, and lock files (and their gates) are opened with ``O_NOFOLLOW`` and must
be the user's regular files: anything else is refused (exit 2), so nobody else can point a lock at a
file or hold it forever (docs/journal.md, "Who may write where").  Re-entrant within a process:
``sync`` holds its destination while the copy it runs takes the same lock.

Parts of one job share the lock: :func:`writer_lock` with a ``group`` (a copy of a manifest's rows:
the manifest's identity and the destination, ``dask_pfs.copy.group``) takes a shared ``flock`` that
jobs of the same group can all hold, while a job of another group, or one without a group, is refused
as before.  The mapped copies of an Airflow fan-out (``pfs cp --manifest M --where <part>``, one per
part) thus run at once.  Every taking of the lock goes through a short-held gate file, so that the
first holder of a group can name its group in the lock file and turn its lock into a shared one
without another job slipping in; :meth:`Held.alone` tells a group member whose writes are over whether
it is the last one still running (the others give the lock up then), and keeps the gate while it
settles what the parts share (``dask_pfs.copy.group``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator

from dask_pfs.errors import PfsError
from dask_pfs.runtime.journals import check_private_dir, ident
from dask_pfs.urls import Location
from operators.core import outputs


class LockedError(PfsError):
    """Another pfs job holds the lock of this destination (exit code 2, nothing done)."""


_held: dict[str, int] = {}  # lock file -> how many blocks of this process hold it
_fds: dict[str, int] = {}  # lock file -> the descriptor holding its flock in this process
_guard = threading.Lock()
GROUP_TAG = "group "


def lock_key(loc: Location) -> str:
    """What names a destination: the real path of a local one (symlinks and ``..`` resolved), else its URL."""
    return os.path.realpath(loc.path) if loc.is_local else loc.url


def lock_dir() -> str:
    """Where lock files live (see the module docstring)."""
    explicit = os.environ.get("PFS_LOCK_DIR")
    if explicit:
        return explicit
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "pfs-locks")
    mine = os.path.join(tempfile.gettempdir(), f"pfs-{os.getuid()}")
    try:  # made 0700 by the one writer, every directory above checked
        outputs.private_dir(mine).close()
    except outputs.UnsafeOutput as exc:
        raise PfsError(f"{exc}; set PFS_LOCK_DIR to a directory of yours") from None
    s = os.lstat(mine)
    if not stat.S_ISDIR(s.st_mode) or s.st_uid != os.getuid():
        raise PfsError(f"{mine}: not a directory of this user; set PFS_LOCK_DIR to a directory of yours")
    return os.path.join(mine, "locks")


def lock_path(key: str) -> str:
    return os.path.join(lock_dir(), ident(key) + ".lock")


class Held:
    """The lock of a destination as one block holds it."""

    def __init__(self, path: str, group: str | None) -> None:
        self.path = path
        self.group = group

    def sole(self) -> bool:
        """Whether no other process holds this lock now (always True for an exclusive one); see :meth:`alone`."""
        with self.alone() as alone:
            return alone

    @contextlib.contextmanager
    def alone(self) -> Iterator[bool]:
        """Whether no other process holds this lock now: asked once by each part of a group as its
        writes end.  Not alone, the part gives the lock up there and then (its writes are over), so
        the last of parts ending together finds itself alone; alone, it keeps the gate for the block,
        so that no part joins (and writes) while it settles what the parts share.  A part that comes
        then waits for the gate (it is not refused), finds those directories settled, and settles
        again after its own writes."""
        with _guard:
            if _held.get(self.path, 0) > 1:
                yield False  # another block of this process (a thread) still holds it
                return
            fd = _fds.get(self.path)
        if fd is None or self.group is None:
            yield True
            return
        with _gate(self.path):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # Linux drops the shared lock when the conversion fails: left so (see above)
                fcntl.flock(fd, fcntl.LOCK_UN)
                alone = False
            else:
                fcntl.flock(fd, fcntl.LOCK_SH)  # shared again: the next part may join once the gate opens
                alone = True
            yield alone


@contextlib.contextmanager
def writer_lock(loc: Location, what: str, group: str | None = None) -> Iterator[Held]:
    """Hold the lock of ``loc`` for the block; :class:`LockedError` at once if another process holds it.

    ``what`` names the job in the refusal (``"copy into"``, ``"scan into"``).  ``group``: jobs that
    name the same group share the lock (parts of one job); others are refused.
    """
    key = lock_key(loc)
    path = lock_path(key)
    with _guard:
        if path in _held:
            _held[path] += 1
            fd = None
        else:
            fd = _acquire(path, key, what, loc.url, group)
            _held[path] = 1
            _fds[path] = fd
    try:
        yield Held(path, group)
    finally:
        with _guard:
            _held[path] -= 1
            if not _held[path]:
                del _held[path]
                _fds.pop(path, None)
                if fd is not None:
                    os.close(fd)  # drops the flock


@contextlib.contextmanager
def _gate(path: str) -> Iterator[None]:
    """A short-held exclusive lock beside the lock file: taking and converting locks happen one at a time."""
    fd = _open_lock(path + ".gate")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _open_lock(path: str) -> int:
    """Open (or create) a lock file in a directory of this user that others cannot write, never
    through a symlink, and only a regular file of this user: a planted link or another user's file
    is refused (exit 2), never written through or held for someone else."""
    directory = os.path.dirname(path)
    try:  # the one writer: the directory made 0700 and checked from / down, the file opened relative to it
        with outputs.private_dir(directory) as d:
            check_private_dir(directory, "the lock directory (PFS_LOCK_DIR)")
            return d.open_fd(os.path.basename(path), os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, outputs.PRIVATE_FILE)
    except outputs.UnsafeOutput as exc:
        raise PfsError(f"{exc} (a lock file); refusing") from None
    except OSError as exc:
        why = "a symlink" if exc.errno == errno.ELOOP else exc.strerror
        raise PfsError(f"{path}: cannot open the lock file ({why}); refusing") from None


def _acquire(path: str, key: str, what: str, url: str, group: str | None = None) -> int:
    with _gate(path):
        fd = _open_lock(path)
        try:
            first = _try(fd, fcntl.LOCK_EX)
            if not first and (group is None or not _try(fd, fcntl.LOCK_SH) or _group_of(fd) != group):
                holder = os.pread(fd, 400, 0).decode(errors="replace").strip() or "another process"
                raise LockedError(
                    f"{url}: another pfs job is writing there ({holder}); refusing to {what} it at the same time "
                    "(wait for it to end; a killed job's lock goes with its process)"
                )
        except BaseException:
            os.close(fd)
            raise
        if first:
            note = f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}, on {key}"
            if group is not None:
                note += f", {GROUP_TAG}{group}"
            os.ftruncate(fd, 0)
            os.pwrite(fd, note.encode("utf-8", "surrogateescape"), 0)
            if group is not None:
                fcntl.flock(fd, fcntl.LOCK_SH)  # now others of the group may join (we hold the gate)
    return fd


def _try(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _group_of(fd: int) -> str | None:
    """The group the first holder wrote into the lock file (None: an exclusive holder)."""
    note = os.pread(fd, 400, 0).decode(errors="replace")
    _, tag, group = note.rpartition(", " + GROUP_TAG)
    return group.strip() if tag else None
