"""Where jobs keep their journals and work directories, and what binds a journal to its job
(docs/journal.md).

A journal (``operators.journal.Journal``) records what a run finished so ``resume`` can go on
after a crash.  It lives next to what the job writes when that is a local directory
(``DST/.pfs-journal-<id>``, ``MANIFEST/.pfs-journal-<id>``), else in the user's cache directory
(``$XDG_CACHE_HOME/pfs/journals/<id>``).  The id hashes what makes two runs the same job, so the
same command finds its journal again and another command never does.

Those directories may be writable by others, so a journal is signed with the user's key (kept in
``$XDG_CACHE_HOME/pfs/keys``, a 0700 directory pfs creates; :func:`journal_key`), and its
``job.json`` holds every option that shapes the job's chunks, selection or output: a resume with
a different one is refused (exit 2, naming the option; :func:`check_options`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import secrets
import stat
from typing import Any

from dask_pfs.errors import Named, OutputError, PfsError
from dask_pfs.manifests.manifest import JOURNAL_PREFIX
from dask_pfs.options import journal_default, named, named_flag
from dask_pfs.urls import Location
from operators.core import outputs
from operators.journal import ForgedJournalError, Journal

KEY_FILE = "journal.key"


def pfs_cache(*parts: str) -> str:
    """``$XDG_CACHE_HOME/pfs/...`` (``~/.cache`` when unset)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "pfs", *parts)


def private_cache(*parts: str) -> str:
    """``pfs_cache(*parts)``, made 0700 through the one writer where missing (every directory from
    ``/`` down checked: one another user owns, or made writable to others, is refused, exit 2)."""
    path = pfs_cache(*parts)
    try:
        outputs.private_dir(path).close()
    except outputs.UnsafeOutput as exc:
        raise PfsError(f"{exc} (pfs's cache directory; set XDG_CACHE_HOME elsewhere)") from None
    return path


def cache_dir(ident: str) -> str:
    """A journal's directory in the cache: ``~/.cache/pfs/journals/<id>`` (its parent made private)."""
    return os.path.join(private_cache("journals"), ident)


def ident(*parts: str) -> str:
    """The id of a job: a short hash of what makes two runs the same job."""
    return hashlib.sha1("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:12]


def job_token(*parts: str) -> str:
    """The name of a job's temp files, derived from what the job is (never read back from a file)."""
    return hashlib.sha256("\0".join(("token", *parts)).encode("utf-8", "surrogateescape")).hexdigest()[:12]


def journal_dir(loc: Location, job_id: str) -> str:
    """``LOC/.pfs-journal-<id>`` for a local directory ``loc``, else one in the cache directory."""
    if loc.is_local:
        return os.path.join(loc.path, f"{JOURNAL_PREFIX}{job_id}")
    return cache_dir(job_id)


def check_private_dir(path: str, what: str) -> None:
    """Refuse (exit 2) a directory that is a symlink, is not this user's, or that others can write."""
    try:
        s = os.lstat(path)
    except OSError as exc:
        raise PfsError(f"{path}: {what}: {exc.strerror}") from None
    if not stat.S_ISDIR(s.st_mode):
        raise PfsError(f"{path}: {what} is not a directory (a symlink is refused)")
    if s.st_uid != os.getuid():
        raise PfsError(f"{path}: {what} belongs to uid {s.st_uid}, not to this user ({os.getuid()})")
    if s.st_mode & 0o022:
        raise PfsError(f"{path}: {what} is writable by group or others (mode {stat.S_IMODE(s.st_mode):o}); chmod go-w")


def journal_key() -> bytes:
    """This user's journal key (32 random bytes, made once) from a 0700 directory of the cache,
    reached through the one writer (every directory from ``/`` down checked: a ``pfs`` directory
    another user owns or others can write is refused)."""
    try:
        with outputs.private_dir(pfs_cache("keys"), strict=True) as keys:
            keys.create_new(KEY_FILE, secrets.token_bytes(32), outputs.PRIVATE_FILE)  # whoever made it first: theirs
            path = os.path.join(keys.path, KEY_FILE)
            try:
                fd = keys.open_fd(KEY_FILE, os.O_RDONLY)
            except OSError as exc:
                reason = "a symlink" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
                raise PfsError(f"{path}: the journal key cannot be read ({reason})") from None
    except outputs.UnsafeOutput as exc:
        raise PfsError(f"{exc} (the journal key directory)") from None
    try:
        key = os.read(fd, 64)
    finally:
        os.close(fd)
    if len(key) != 32:
        raise PfsError(f"{path}: not a pfs journal key ({len(key)} bytes); delete it to make a new one")
    return key


def open_journal(path: str | os.PathLike) -> Journal:
    """The journal in ``path``, signed and checked with this user's key.  An existing journal
    directory must be a real directory of this user that others cannot write (exit 2 otherwise):
    pfs writes and deletes below it."""
    path = os.fspath(path)
    if os.path.lexists(path):
        check_private_dir(path, "a journal directory")
    return _OutputJournal(path, journal_key)


class _OutputJournal(Journal):
    """A journal in a place that may fill up or turn read-only (often the destination itself).

    ``job.json`` that cannot be written ends the job with one line, exit 1 (:class:`OutputError`).
    Lines that cannot be written (finished chunks, batched) are a warning: the job goes on, later
    lines are dropped so the file keeps the order it was written in, and a ``--resume`` redoes the
    chunks after the last line written.  Never a traceback (the timer's thread printed one)."""

    _lines_lost: OSError | None = None

    def _write_job(self, job: dict[str, Any], nonce: str) -> None:
        try:
            super()._write_job(job, nonce)
        except OSError as exc:
            raise OutputError(
                f"{self.path}: the job's journal could not be written ({exc.strerror or exc}): "
                "fix that, then run it again with ",
                named("resume", True),
            ) from None
        self._lines_lost = None  # a new job.json: its lines are written again

    def flush(self) -> None:
        if self._lines_lost is not None:
            with self._lock:
                self._buf = []
            return
        try:
            super().flush()
        except OSError as exc:
            self._lines_lost = exc
            logging.getLogger("pfs").warning(
                "%s: the journal's lines could not be written (%s); a --resume redoes what they named",
                self.path,
                exc.strerror or exc,
            )


def nothing_to_resume(what: str) -> None:
    """``resume`` asked for with no journal of an interrupted run: one warning line (``pfs: warning:`` from the
    CLI), and the job starts afresh, which is what a resume of nothing amounts to."""
    import warnings

    warnings.warn(f"{what}: no journal of an interrupted run to resume: starting afresh", UserWarning, stacklevel=3)


def read_job(jr: Journal) -> dict[str, Any]:
    """``job.json`` of ``jr`` (``{}`` when there is none); a forged one is refused (exit 2)."""
    try:
        return jr.job()
    except ForgedJournalError as exc:
        raise PfsError(f"{exc}; refusing to resume from it (delete {jr.path} to start over)") from None


def records(jr: Journal) -> dict[str, dict]:
    """The finished chunks of ``jr``; a forged line is refused (exit 2)."""
    try:
        return jr.done()
    except ForgedJournalError as exc:
        raise PfsError(f"{exc}; refusing to resume from it (delete {jr.path} to start over)") from None


def same_job(jr: Journal, job: dict) -> bool:
    """True when ``jr`` describes ``job``, False when it is empty; PfsError for another job's journal
    (an explicit ``journal=`` path may hold one)."""
    prior = read_job(jr)
    if prior and any(prior.get(k) != v for k, v in job.items()):
        raise PfsError(f"{jr.path}: the journal of another job ({prior}); not resuming it")
    return bool(prior)


def plain(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists, paths strings)."""
    return json.loads(json.dumps(value, default=str))


def check_options(prior: dict[str, Any], options: dict[str, Any], what: str) -> None:
    """Refuse (exit 2) resuming the job ``prior`` records with options other than ``options``
    (the journal's key, an option's flag -> value: ``dask_pfs.options.journal_options``).  An option the
    journal lacks (written before the option existed) stands for its default."""
    was = prior.get("options")
    if not isinstance(was, dict):
        raise PfsError(
            f"the interrupted {what} recorded no options (an older pfs?): start over without ", named("resume", True)
        )
    for key, value in options.items():
        before = was.get(key, plain(journal_default(key)))
        if before != plain(value):
            option = named_flag(key)
            was_set, now_set = (option.set_to(v, _show(v)) if isinstance(option, Named) else f"{option} {_show(v)}"
                                for v in (before, plain(value)))  # fmt: skip
            raise PfsError(
                f"the interrupted {what} ran with ", was_set, ", this run with ", now_set,
                ": resume with the same ", option, " (or start over without ", named("resume", True), ")",
            )  # fmt: skip


def _show(value: Any) -> str:
    return "(unset)" if value is None else json.dumps(value)
