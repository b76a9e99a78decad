"""A job's journal: which chunks are finished, kept so a crashed or killed run can resume.

A journal is a local directory holding ``job.json`` (what the job is: its manifest, the token
naming its temp files, its options; written once with write + fsync + rename) and
``done.jsonl``, one line per finished chunk, appended with a single ``write`` and ``fsync``d
before the driver moves on.  A SIGKILL can at worst leave a torn last line, which the reader
ignores (that chunk is simply done again; every chunk is idempotent).  See docs/journal.md.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from typing import Any

JOB = "job.json"
DONE = "done.jsonl"


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes) -> None:
    """Write ``path`` so that a reader (or a run after a crash) sees the old or the new file, whole."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


def _ends_a_line(fd: int) -> bool:
    """True when the file is empty or its last byte is a newline."""
    size = os.fstat(fd).st_size
    return size == 0 or os.pread(fd, 1, size - 1) == b"\n"


class Journal:
    """Finished-chunk records of one job; thread-safe (Dask callbacks record from the client loop)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = None

    @property
    def exists(self) -> bool:
        return os.path.exists(os.path.join(self.path, JOB))

    def job(self) -> dict[str, Any]:
        """``job.json`` of an existing journal, ``{}`` when there is none."""
        try:
            with open(os.path.join(self.path, JOB), "rb") as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return {}

    def start(self, job: dict[str, Any]) -> None:
        """Begin a fresh journal (anything there before is dropped)."""
        self.remove()
        os.makedirs(self.path, exist_ok=True)
        write_atomic(os.path.join(self.path, JOB), json.dumps(job, indent=1, default=str).encode())

    def records(self) -> Iterator[dict]:
        """Finished-chunk records in the order they were written, read one line at a time.

        A torn last line is ignored.  Streaming keeps a resume of a long job (a 100M-entry scan
        journals ~1 GB) from holding every record at once.
        """
        try:
            with open(os.path.join(self.path, DONE), "rb") as f:
                for line in f:
                    try:
                        yield json.loads(line)
                    except ValueError:
                        continue
        except FileNotFoundError:
            return

    def done(self) -> dict[str, dict]:
        """Finished chunk ids and what was recorded with them (the last record of an id wins)."""
        return {rec["id"]: rec for rec in self.records()}

    def rewrite_job(self, job: dict[str, Any]) -> None:
        """Replace ``job.json`` (a resumed run noting itself), keeping the finished chunks."""
        os.makedirs(self.path, exist_ok=True)
        write_atomic(os.path.join(self.path, JOB), json.dumps(job, indent=1, default=str).encode())

    def record(self, chunk_id: str, **info: Any) -> None:
        """Append one finished chunk, durably, before returning."""
        line = (json.dumps({"id": chunk_id, **info}, default=str) + "\n").encode()
        with self._lock:
            if self._fd is None:
                os.makedirs(self.path, exist_ok=True)
                self._fd = os.open(os.path.join(self.path, DONE), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
                if not _ends_a_line(self._fd):
                    os.write(self._fd, b"\n")  # end a torn last line, or this record would be glued to it
            os.write(self._fd, line)
            os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def remove(self) -> None:
        """Delete the journal: the job finished (or a fresh run replaces it)."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
