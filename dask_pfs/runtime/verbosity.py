"""How much a ``pfs`` command says: ``-q`` (-1) only errors and the summary, default (0), ``-v`` (1) a
line per finished chunk, ``-vv`` (2) debug logs.  Set once by the CLI group, read by the reporters."""

from __future__ import annotations

import logging
import sys
import warnings

_level = 0


def verbosity() -> int:
    return _level


def set_verbosity(level: int) -> None:
    """Remember ``level`` and route pfs's own log records (and, quiet, Python warnings) to match."""
    global _level
    _level = level
    log = logging.getLogger("pfs")
    if level >= 1 and not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("pfs: %(message)s"))
        log.addHandler(handler)
    if level:  # the default leaves the logger as it is (an embedding application's, or a test's, levels)
        log.setLevel(logging.ERROR if level < 0 else logging.DEBUG if level >= 2 else logging.INFO)
    warnings.showwarning = _one_line
    if level < 0:
        warnings.simplefilter("ignore")


def _one_line(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one ``pfs: warning:`` line on stderr, not Python's two lines with a source path."""
    print(f"pfs: warning: {message}", file=file or sys.stderr, flush=True)
