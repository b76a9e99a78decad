"""A job's journal: which chunks are finished, kept so a crashed or killed run can resume.

A journal is a local directory holding ``job.json`` (what the job is: its options and the
digest of what it selected; written once with write + fsync + rename) and ``done.jsonl``, one
line per finished chunk.  Lines are batched: a finished chunk's line is written (one ``write``,
then ``fsync``) within :data:`FLUSH_SECONDS` of its record, and at the latest when the journal is
closed.  A SIGKILL loses at most the lines of that last second and can leave a torn last line,
which the reader ignores (those chunks are simply done again; every chunk is idempotent).

A journal may lie in a directory others can write (a destination, a manifest directory), so
nothing in it is trusted as it is read back: ``job.json`` and every line carry an HMAC-SHA256
under the user's own key, each line bound to its ``job.json`` by a random nonce.  A file
that does not verify raises :class:`ForgedJournalError`.  See docs/journal.md.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from typing import Any

from operators.core import outputs

JOB = "job.json"
DONE = "done.jsonl"
MAC = "mac"
NONCE = "nonce"
FLUSH_SECONDS = 1.0  # the most a finished chunk's line waits in memory before it is written and fsync'ed


class ForgedJournalError(ValueError):
    """A journal file that this user's pfs did not write (or that was changed since)."""


def write_atomic(path: str, data: bytes, mode: int = outputs.SHARED_FILE) -> None:
    """Write ``path`` so that a reader (or a run after a crash) sees the old or the new file, whole
    (the one writer: a random temp name in the checked directory, never through a planted link)."""
    outputs.write_bytes(path, data, mode)


def _ends_a_line(fd: int) -> bool:
    """True when the file is empty or its last byte is a newline."""
    size = os.fstat(fd).st_size
    return size == 0 or os.pread(fd, 1, size - 1) == b"\n"


def canonical(value: Any) -> bytes:
    """The bytes a MAC is computed over: JSON with sorted keys (``default=str`` as written)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (a frozen selection's, recorded in the MAC'ed ``job.json``)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Journal:
    """Finished-chunk records of one job; thread-safe (Dask callbacks record from the client loop).

    ``key``: the user's journal key (HMAC-SHA256), or a function giving it, so what is read back is
    what this user's pfs wrote.
    """

    def __init__(self, path: str, key: bytes | Callable[[], bytes]) -> None:
        self.path = path
        self._key = key  # or what makes it: fetched on first use, so a refused job creates no key
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._buf: list[bytes] = []
        self._timer: threading.Timer | None = None
        self._nonce: str | None = None  # binds the lines to this journal's job.json

    @property
    def exists(self) -> bool:
        return os.path.lexists(os.path.join(self.path, JOB))

    def _mac(self, data: bytes) -> str:
        if callable(self._key):
            self._key = self._key()
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()

    def job(self) -> dict[str, Any]:
        """``job.json`` of an existing journal, ``{}`` when there is none; :class:`ForgedJournalError`
        when it does not verify."""
        try:
            fd = os.open(os.path.join(self.path, JOB), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ForgedJournalError(f"{self.path}/{JOB}: cannot be read safely ({exc.strerror})") from None
        with open(fd, "rb") as f:
            raw = f.read(1 << 20)
        try:
            job = json.loads(raw)
        except ValueError:
            return {}  # never completed (write + rename): as if absent
        if not isinstance(job, dict):
            raise ForgedJournalError(f"{self.path}/{JOB}: not a job record")
        mac = job.pop(MAC, None)
        if not isinstance(mac, str) or not hmac.compare_digest(mac, self._mac(canonical(job))):
            raise ForgedJournalError(f"{self.path}/{JOB}: not written by this user's pfs (its digest does not match)")
        self._nonce = str(job.pop(NONCE, ""))
        return job

    def _write_job(self, job: dict[str, Any], nonce: str) -> None:
        plain = {**json.loads(canonical(job)), NONCE: nonce}
        data = json.dumps({**plain, MAC: self._mac(canonical(plain))}, indent=1).encode()
        with outputs.open_dir(self.path, create=True, mode=outputs.PRIVATE_DIR) as d:
            d.write_bytes(JOB, data, outputs.PRIVATE_FILE)
        self._nonce = nonce

    def start(self, job: dict[str, Any]) -> None:
        """Begin a fresh journal (anything there before is dropped)."""
        self.remove()
        self._write_job(job, secrets.token_hex(16))

    def rewrite_job(self, job: dict[str, Any]) -> None:
        """Replace ``job.json`` (a resumed run noting itself), keeping the finished chunks (its lines
        are bound to the journal's nonce, which stays)."""
        if self._nonce is None:
            self.job()
        self._write_job(job, self._nonce or secrets.token_hex(16))

    def _line(self, rec: dict[str, Any]) -> bytes:
        assert self._nonce is not None, "job.json first"
        plain = json.loads(canonical(rec))
        mac = self._mac(self._nonce.encode() + canonical(plain))
        return (json.dumps({**plain, MAC: mac}, separators=(",", ":")) + "\n").encode()

    def records(self) -> Iterator[dict]:
        """Finished-chunk records in the order they were written, read one line at a time.

        A torn line (not JSON) is ignored; a whole line whose MAC does not match raises
        :class:`ForgedJournalError`.  Streaming keeps a resume of a long job (a 100M-entry scan
        journals ~1 GB) from holding every record at once.
        """
        self.flush()  # this instance's own buffered lines first
        if self._nonce is None and not self.job():
            return
        try:
            fd = os.open(os.path.join(self.path, DONE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ForgedJournalError(f"{self.path}/{DONE}: cannot be read safely ({exc.strerror})") from None
        nonce = (self._nonce or "").encode()
        with open(fd, "rb") as f:
            for n, line in enumerate(f, 1):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # torn by a kill
                mac = rec.pop(MAC, None) if isinstance(rec, dict) else None
                want = self._mac(nonce + canonical(rec))
                if not isinstance(mac, str) or not hmac.compare_digest(mac, want) or not isinstance(rec.get("id"), str):
                    raise ForgedJournalError(f"{self.path}/{DONE}: line {n} was not written by this job's pfs")
                yield rec

    def done(self) -> dict[str, dict]:
        """Finished chunk ids and what was recorded with them (the last record of an id wins)."""
        return {rec["id"]: rec for rec in self.records()}

    def record(self, chunk_id: str, **info: Any) -> None:
        """Note one finished chunk; it is on disk within :data:`FLUSH_SECONDS` (or at :meth:`flush`)."""
        if self._nonce is None:
            self.job()
        if self._nonce is None:
            return  # removed meanwhile (a late callback of a finished job): nothing to resume any more
        line = self._line({"id": chunk_id, **info})
        with self._lock:
            self._buf.append(line)
            if self._timer is None:
                self._timer = threading.Timer(FLUSH_SECONDS, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        """Write the buffered lines with one ``write`` and ``fsync`` them."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not self._buf:
                return
            data, self._buf = b"".join(self._buf), []
            if self._fd is None:
                with outputs.open_dir(self.path, create=True, mode=outputs.PRIVATE_DIR) as d:
                    try:  # never through a link, only a regular file of this user's with one name
                        self._fd = d.open_fd(DONE, os.O_RDWR | os.O_CREAT | os.O_APPEND, outputs.PRIVATE_FILE)
                    except outputs.UnsafeOutput as exc:
                        raise ForgedJournalError(f"{exc}") from None
                if not _ends_a_line(self._fd):
                    data = b"\n" + data  # end a torn last line, or the first record would be glued to it
            os.write(self._fd, data)
            os.fsync(self._fd)

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def remove(self) -> None:
        """Delete the journal: the job finished (or a fresh run replaces it)."""
        with self._lock:
            self._buf = []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        self._nonce = None
        shutil.rmtree(self.path, ignore_errors=True)
