"""What every job returns, and the log of what it could not do.

:class:`JobResult` is the base of every driver's result: the same names mean the same thing in
``scan``, ``cp``, ``rm``, ``sync`` and ``verify``, so the CLI, scripts reading ``--json`` and the
Airflow provider report any of them the same way.

* ``counts``: the job's counters (what each job counts is documented on its result);
* ``failed``: entries the job could not do; ``exit_code`` is 1 when there are any, else 0;
* ``samples``: the first few of them as ``(path, what went wrong)``;
* ``log``: a Parquet file listing every one of them (``path``, ``path_raw``, ``status``,
  ``error``), when there were any;
* ``seconds``, ``tasks``, ``resumed`` (tasks or chunks an interrupted run had finished),
  ``journal`` (kept for ``resume`` when the run did not finish cleanly), ``concurrency``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from operators.core import outputs
from operators.names import decode

SAMPLES = 20
LOG_SCHEMA = pa.schema(
    [("path", pa.string()), ("path_raw", pa.binary()), ("status", pa.string()), ("error", pa.string())]
)


@dataclass(kw_only=True)
class JobResult:
    counts: dict[str, Any] = field(default_factory=dict)
    failed: int = 0
    samples: list[tuple[str, str]] = field(default_factory=list)
    log: str | None = None
    seconds: float = 0.0
    tasks: int = 0
    resumed: int = 0
    journal: str | None = None
    concurrency: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def summary(self) -> dict[str, Any]:
        """Everything as plain data (``--json``, XCom), with ``exit_code``."""
        return {**asdict(self), "exit_code": self.exit_code}


def counted(n: int, word: str, plural: str | None = None) -> str:
    """``1 file``, ``2 files``, ``1,000 entries`` (``plural`` when adding an s is not it)."""
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


def shown(text: object) -> str:
    """``text`` safe to print on one line: control characters (a newline in a file name could fake
    output lines, an escape sequence could rewrite the terminal) shown as Python escapes."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in s)


class ProblemLog:
    """Entries a job could not do (or skipped on purpose): the first ``SAMPLES`` kept for the
    summary, every one appended to a Parquet file (``url``; None keeps none), opened on first use.

    The log is written through the one writer (``operators.core.outputs``): a random temp name in
    its checked directory renamed into place when closed (one put on an object store), so a crashed
    run never leaves a truncated file under the name the user asked for.
    """

    def __init__(self, url: str | None, storage_options: dict | None = None) -> None:
        self.url = url
        self.storage_options = storage_options or {}
        self.samples: list[tuple[str, str]] = []
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._file: Any = None
        if url is not None and "://" not in url and not self.storage_options:
            # a directory the one writer refuses: refused now, not when the first failure is logged
            with contextlib.suppress(FileNotFoundError):
                outputs.open_dir(os.path.dirname(os.path.abspath(url))).close()

    def add(self, problems: Sequence[tuple[bytes | str, str, str]]) -> None:
        """``(path, status, error)`` each; ``path`` as exact bytes, or as text."""
        if not problems:
            return
        texts = [decode(p) if isinstance(p, bytes) else (p, None) for p, _, _ in problems]
        room = SAMPLES - len(self.samples)
        if room > 0:
            self.samples.extend((t, _detail(s, e)) for (t, _), (_, s, e) in zip(texts, problems[:room], strict=False))
        self.rows += len(problems)
        if self.url is None:
            return
        if self._writer is None:
            self._open()
        table = pa.table(
            [[t for t, _ in texts], [r for _, r in texts], [s for _, s, _ in problems], [e for _, _, e in problems]],
            schema=LOG_SCHEMA,
        )
        assert self._writer is not None
        self._writer.write_table(table)

    def _open(self) -> None:
        assert self.url is not None
        self._file = contextlib.ExitStack()
        # 0600: a job's failures name paths of trees that may be private (``chmod`` to share the log)
        sink = self._file.enter_context(outputs.output_file(self.url, self.storage_options, outputs.PRIVATE_FILE))
        self._writer = pq.ParquetWriter(sink, LOG_SCHEMA, compression="zstd")

    def close(self) -> str | None:
        """Finish the file (again: nothing more); its URL, or None when nothing was logged."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._file.close()  # the one writer: renamed into place, or put whole on an object store
        return self.url if self.rows and self.url is not None else None


def _detail(status: str, error: str) -> str:
    return error if status == "failed" else f"{status}: {error}"
