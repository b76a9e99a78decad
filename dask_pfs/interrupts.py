"""Ctrl-C in a ``pfs`` command's own process: a KeyboardInterrupt, but never inside a native module's start.

Python raises KeyboardInterrupt at the next bytecode of the main thread, wherever that is.  When that is
Python code a native extension calls while it initialises (DuckDB's nanobind module builds its enums through
``enum``), the extension cannot unwind: nanobind reports a "Critical nanobind error" and aborts the process
(SIGABRT, exit -6, a core file), where a Ctrl-C a moment earlier or later prints "pfs: interrupted" and exits
130.  pfs imports DuckDB and pyarrow lazily, inside the command, so that window comes in every command.

:func:`install` (the console script's, ``cli.main``) puts a handler in place of Python's default one that
raises the same KeyboardInterrupt, except while an extension module is being created or executed: then the
signal is sent again a moment later, until the import is over; several taken there are one interrupt then.
A SIGINT the command inherited as ignored (``nohup``, a background job of a script) stays ignored; Python
callers of ``cli.run`` keep their own handler.
"""

from __future__ import annotations

import importlib.machinery
import os
import signal
import threading
from types import FrameType

RETRY_SECONDS = 0.02
_LOADER_STEPS = {"create_module", "exec_module"}


def install() -> None:
    """Use :func:`on_sigint` for SIGINT if this is the main thread and Python's default handler is in place."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is (
        signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, on_sigint)


def raises_keyboard_interrupt(handler: object) -> bool:
    """Whether ``handler`` (a SIGINT disposition) turns a Ctrl-C into a KeyboardInterrupt."""
    return handler is signal.default_int_handler or handler is on_sigint


_owed = False  # a Ctrl-C taken inside an extension's start and not raised yet: one, however many came
_retrying = False  # a retry is on its way (one at a time: several would each raise once the import is over)


def on_sigint(signum: int, frame: FrameType | None) -> None:
    global _owed, _retrying
    if in_native_init(frame):
        _owed = True
        if not _retrying:  # the signal again in a moment, to this handler again: the import is over by then, or not
            _retrying = True
            timer = threading.Timer(RETRY_SECONDS, _retry)
            timer.daemon = True
            timer.start()
        return
    _owed = False  # raised now: a retry still on its way sends nothing (no second interrupt in the cleanup)
    raise KeyboardInterrupt


def _retry() -> None:
    global _retrying
    _retrying = False  # before the signal: its handler may need the next retry
    if _owed:
        os.kill(os.getpid(), signal.SIGINT)


def in_native_init(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an extension module's creation or execution (an import of one)."""
    while frame is not None:
        if frame.f_code.co_name in _LOADER_STEPS:
            loader = frame.f_locals.get("self")
            if isinstance(loader, importlib.machinery.ExtensionFileLoader):
                return True
        frame = frame.f_back
    return False
