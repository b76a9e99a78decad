"""What every copy task shares: the job's spec, one entry, a task's outcome, temp names."""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from operators.names import check_relative
from operators.root_identity import RootIdentity, job_pin
from operators.rows import describe_error
from operators.scan.remote import FLAT_PROTOCOLS

Bytes = bytes  # Outcome's field ``bytes`` hides the type inside the class
TEMP_MARK = b".pfs-tmp-"
NAME_MAX = 255
LOCAL = ("file", "local")


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
    sweep_temps: bool = False  # remove this job's temp files from existing directories (a group's last part)
    on_exist: str = "error"  # error | skip (--update) | overwrite | ignore (--ignore-existing); dask_pfs.copy
    check_existing: bool = True  # False when the destination root did not exist before the run
    follow_symlinks: bool = False
    owner: bool | None = None  # keep the source's owner and group; None: when root (``cp -a``, ``rsync -a``)
    chown: tuple[int | None, int | None] = (None, None)  # --chown: these ids instead (None: that part not given)
    xattrs: bool = True  # extended attributes and ACLs (operators.copy.attrs)
    inplace: bool = False  # small files straight to their names: no rename (costly on GlusterFS), no atomicity
    make_parents: bool = False  # a file's destination directory may not exist yet: create it (streamed copies)
    threads: int | None = None
    src_options: dict = field(default_factory=dict)
    dst_options: dict = field(default_factory=dict)
    src_root_id: RootIdentity | None = None  # a local source root's identity at the start (pinned): another is refused

    def pinned(self) -> CopySpec:
        """This spec with the source root's identity now (the job starting): from then on the core
        refuses another directory renamed into its place."""
        return replace(self, src_root_id=job_pin(self.src_root, self.src_local))

    @property
    def keeps_owner(self) -> bool:
        return self.owner if self.owner is not None else may_chown()

    def owner_ids(self, e: Entry) -> tuple[int, int] | None:
        """The ``chown`` of a copy of ``e`` (-1: that id left alone), or None: nothing to change."""
        keep = self.keeps_owner
        uid = self.chown[0] if self.chown[0] is not None else (e.uid if keep and e.uid is not None else -1)
        gid = self.chown[1] if self.chown[1] is not None else (e.gid if keep and e.gid is not None else -1)
        return None if uid == gid == -1 else (uid, gid)

    def core_ids(self) -> tuple[int, int]:
        """``cp_files``'s ``uid``/``gid``: -1 leave the copier's, -2 the source's, else that id."""
        keep = -2 if self.keeps_owner else -1
        return tuple(i if i is not None else keep for i in self.chown)  # type: ignore[return-value]

    @property
    def src_local(self) -> bool:
        return self.src_protocol in LOCAL

    @property
    def dst_local(self) -> bool:
        return self.dst_protocol in LOCAL

    @property
    def storage(self) -> tuple[tuple[str, str], ...]:
        """Both ends, for where the concurrency controller starts (``operators.core.pool.get_pool``)."""
        return ((self.src_protocol, self.src_root), (self.dst_protocol, self.dst_root))

    @property
    def dst_has_dirs(self) -> bool:
        return self.dst_protocol not in FLAT_PROTOCOLS


@dataclass
class Outcome:
    """Counters and failures of one task; the driver adds them up."""

    files: int = 0
    bytes: int = 0
    dirs: int = 0
    symlinks: int = 0
    hardlinks: int = 0
    skipped: int = 0
    dirs_existing: int = 0  # directories already there (``dirs``: the ones made)
    failures: list[tuple[str, str]] = field(default_factory=list)

    COUNTERS = ("files", "bytes", "dirs", "symlinks", "hardlinks", "skipped", "dirs_existing")

    def add(self, other: Outcome) -> None:
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures.extend(other.failures)

    def fail(self, rel: Bytes, error: BaseException | str) -> None:
        self.failures.append((os.fsdecode(rel), describe_error(error)))

    def counts(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.COUNTERS} | {"failed": len(self.failures)}


@functools.cache
def may_chown() -> bool:
    """The process may give files away: CAP_CHOWN in its effective set (root, unless dropped as with
    ``setpriv``); the default of ``owner`` (``cp -a`` and ``rsync -a`` keep owners only as root)."""
    try:
        with open("/proc/self/status") as f:
            caps = next(line for line in f if line.startswith("CapEff:")).split()[1]
        return bool(int(caps, 16) & 1)  # CAP_CHOWN
    except (OSError, StopIteration, ValueError, IndexError):
        return os.geteuid() == 0


def with_stat(e: Entry, s: os.stat_result) -> Entry:
    """Metadata from the source as read now: exact to the nanosecond (DuckDB hands back microseconds)."""
    return e._replace(mode=s.st_mode, mtime_ns=s.st_mtime_ns, atime_ns=s.st_atime_ns, uid=s.st_uid, gid=s.st_gid)


def local_path(root: str, rel: bytes) -> bytes:
    """``rel`` below a local root, checked to stay below it."""
    if rel:
        check_relative(rel)
    base = os.fsencode(root).rstrip(b"/") or b""
    return base + b"/" + rel if rel else (base or b"/")


def remote_path(root: str, rel: bytes) -> str:
    """``rel`` below an fsspec root, checked to stay below it."""
    if rel:
        check_relative(rel)
    text = rel.decode("utf-8", "surrogateescape")
    return f"{root.rstrip('/')}/{text}" if text else root


def temp_name(name: bytes, token: str) -> bytes:
    """``.NAME.pfs-tmp-TOKEN`` (hidden, same directory); a hash stands in for names too long for that."""
    suffix = TEMP_MARK + token.encode()
    if len(name) + len(suffix) + 1 > NAME_MAX:
        name = hashlib.sha1(name).hexdigest().encode()
    return b"." + name + suffix


def is_temp_name(name: bytes, token: str) -> bool:
    """Whether ``name`` is a temp file of the job ``token`` names (what :func:`temp_name` makes)."""
    return name.startswith(b".") and name.endswith(TEMP_MARK + token.encode())


def temp_of(path: bytes, token: str) -> bytes:
    """The temp name of ``path`` in its own directory."""
    head, _, name = path.rpartition(b"/")
    return head + b"/" + temp_name(name, token)
