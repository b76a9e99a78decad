"""Progress reporting for long jobs: a live bar on a terminal or in a notebook, log lines elsewhere.

Engines call ``update(counters)`` whenever a chunk finishes; the reporter decides how often
anything is shown.  ``LogProgress`` is what Airflow tasks and batch jobs get: one line per
interval with counts and rates.  A Python caller that passes no reporter gets :func:`default_reporter`'s:
a live display and a summary in a Jupyter notebook, the terminal's bar in a terminal, nothing in a pipe.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any, Protocol

from dask_pfs.redact import redact

if TYPE_CHECKING:
    from rich.console import Console


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


class Reporter(Protocol):
    def start(self, title: str) -> None: ...

    def update(self, counters: dict) -> None: ...

    def stop(self) -> None: ...


COPIED = ("files", "symlinks", "hardlinks")  # what a copy counts instead of "entries"


def describe(counters: dict, elapsed: float) -> str:
    """One progress line; a copy's counters (files, symlinks, hard links, ``failed``) are named as such."""
    if "entries" not in counters and any(k in counters for k in COPIED):
        count, unit = sum(int(counters.get(k) or 0) for k in COPIED), "files"
    else:
        count, unit = int(counters.get("entries") or 0), "entries"
    rate = count / elapsed if elapsed > 0 else 0.0
    text = f"{count:,} {unit}, {human_bytes(counters.get('bytes', 0))}, {rate:,.0f} {unit}/s"
    errors = counters.get("errors") or counters.get("failed") or 0
    return text + (f", {errors:,} errors" if errors else "")


class NullProgress:
    def start(self, title: str) -> None:
        pass

    def update(self, counters: dict) -> None:
        pass

    def stop(self) -> None:
        pass


class InfoLogger(Protocol):
    """What :class:`LogProgress` logs to: a ``logging.Logger``, or Airflow's task logger."""

    def info(self, msg: Any, /, *args: Any, **kwargs: Any) -> Any: ...


class LogProgress:
    """One log line every ``interval`` seconds (and at the end)."""

    def __init__(self, logger: InfoLogger | None = None, interval: float = 10.0) -> None:
        self.log = logger or logging.getLogger("pfs")
        self.interval = interval
        self.title = ""
        self.counters: dict = {}

    def start(self, title: str) -> None:
        self.title = redact(title)  # a log line never carries a URL's credentials
        self.t0 = self.last = time.monotonic()

    def update(self, counters: dict) -> None:
        self.counters = counters
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self.log.info("%s: %s", self.title, describe(counters, now - self.t0))

    def stop(self) -> None:
        self.log.info("%s done: %s", self.title, describe(self.counters, time.monotonic() - self.t0))


class RichProgress:
    """A live status line: entries, bytes, entries/s, errors, elapsed."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console  # only for a terminal: rich costs ~40 ms to import
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = console or Console(stderr=True)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
            refresh_per_second=5,
        )

    def start(self, title: str) -> None:
        self.t0 = time.monotonic()
        self.progress.start()
        self.task = self.progress.add_task(title, total=None, status="starting")

    def update(self, counters: dict) -> None:
        self.progress.update(self.task, status=describe(counters, time.monotonic() - self.t0))

    def stop(self) -> None:
        self.progress.stop()


class NotebookProgress:
    """A live line in a Jupyter cell's output, then the job's summary in its place.

    Made of IPython's display handles (``display(..., display_id=True)`` and ``update``: Jupyter's
    ``update_display_data`` message), which every Jupyter front end shows and nbclient saves, so no
    widget library is needed.  Updates go out at most every ``interval`` seconds.
    """

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.handle: Any = None
        self.title = ""
        self.counters: dict = {}

    def start(self, title: str) -> None:
        from IPython.display import display

        self.title, self.counters = title, {}
        self.t0 = self.last = time.monotonic()
        self.handle = display(self._bundle("starting", done=False), raw=True, display_id=True)

    def update(self, counters: dict) -> None:
        self.counters = counters
        now = time.monotonic()
        if self.handle is not None and now - self.last >= self.interval:
            self.last = now
            self.handle.update(self._bundle(describe(counters, now - self.t0), done=False), raw=True)

    def stop(self) -> None:
        if self.handle is not None:
            elapsed = time.monotonic() - self.t0
            text = f"{describe(self.counters, elapsed)} in {elapsed:.1f} s"
            self.handle.update(self._bundle(text, done=True), raw=True)

    def _bundle(self, text: str, *, done: bool) -> dict[str, str]:
        import html

        line = f"{self.title}: {'done: ' if done else ''}{text}"
        mark = "&#10003;" if done else "&#8987;"
        return {"text/plain": line, "text/html": f"<pre>{mark} {html.escape(line)}</pre>"}


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's ZMQ shell), where stderr is never a terminal."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # an IPython too old or half imported
        return False
    return shell is not None and hasattr(shell, "kernel")


def default_reporter(progress: Reporter | None) -> Reporter:
    """``progress``, or what a Python caller who passed none sees: a live display in a Jupyter notebook,
    the bar on a terminal, nothing in a pipe or batch job (the engines' ``progress=None``)."""
    if progress is not None:
        return progress
    if in_notebook():
        return NotebookProgress()
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return RichProgress() if tty else NullProgress()


def ask(reporter: Reporter, message: str) -> bool:
    """A yes/no question on the terminal (``[y/N]``, no by default) with the live bar stopped while
    it waits, so no redraw covers the question; the bar goes on after the answer."""
    import click

    live = getattr(reporter, "progress", None)
    if live is not None:
        live.stop()
    try:
        return click.confirm(message, default=False, err=True)
    finally:
        if live is not None:
            live.start()


class ChunkLines:
    """``-v``: one line on stderr per finished chunk (each ``update``), with the job's counters."""

    def start(self, title: str) -> None:
        self.title, self.t0 = title, time.monotonic()

    def update(self, counters: dict) -> None:
        shown = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in counters.items())
        print(f"pfs: {self.title}: {shown} ({time.monotonic() - self.t0:.1f} s)", file=sys.stderr, flush=True)

    def stop(self) -> None:
        pass


def make_reporter(enabled: bool | None) -> Reporter:
    """A bar on a terminal unless disabled; nothing when stderr is not a TTY; ``-q`` nothing, ``-v``
    a line per chunk (``dask_pfs.runtime.verbosity``)."""
    from dask_pfs.runtime.verbosity import verbosity

    if verbosity() < 0 or enabled is False:
        return NullProgress()
    if verbosity() > 0:
        return ChunkLines()
    if enabled is None and not sys.stderr.isatty():
        return NullProgress()
    return RichProgress()
