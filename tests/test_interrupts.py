"""A Ctrl-C in a command's own process never lands inside a native module's start (dask_pfs.interrupts).

Python raises KeyboardInterrupt wherever the main thread is; inside DuckDB's extension start that broke the
import ("Encountered an error while initializing the extension") or aborted the process ("Critical nanobind
error", SIGABRT) instead of "pfs: interrupted", exit 130.  The script below sends SIGINT every 0.5 ms from
the moment the extension module exists (it is in ``sys.modules`` while it runs its start) until the
interrupt is taken."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from .conftest import REPO

SPAM_DURING_IMPORT = """
import os, signal, sys, threading, time
if sys.argv[1] == "guarded":
    from dask_pfs import interrupts
    interrupts.install()
taken = threading.Event()
def spam():
    while "_duckdb" not in sys.modules:
        time.sleep(0.0002)
    while not taken.is_set():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.0005)
threading.Thread(target=spam, daemon=True).start()
try:
    import duckdb
    print("no interrupt")
except KeyboardInterrupt:
    taken.set()
    print("interrupted; extension started:", "_duckdb" in sys.modules and hasattr(sys.modules["_duckdb"], "connect"))
    sys.exit(130)
"""


def run(mode: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", SPAM_DURING_IMPORT, mode], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize("attempt", range(3))
def test_ctrl_c_during_duckdbs_extension_start_is_taken_after_it(attempt):
    proc = run("guarded")
    assert proc.returncode == 130, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert proc.stdout.strip() == "interrupted; extension started: True", proc.stdout
    assert "nanobind" not in proc.stderr and "initializing the extension" not in proc.stderr


def test_the_same_signals_break_the_import_without_the_handler():
    """The control: Python's own handler takes the interrupt inside the extension's start (so the test
    above reaches the window it guards). Timing decides where a signal lands: one broken import of five
    runs is enough (about one run in fifty is interrupted just before or after the extension's start)."""
    runs = [run("plain") for _ in range(5)]
    broken = [p for p in runs if "initializing the extension" in p.stderr or "nanobind" in p.stderr]
    assert broken, [(p.returncode, p.stdout, p.stderr[-500:]) for p in runs]
    assert all(p.returncode in (1, -signal.SIGABRT) for p in broken)


def test_an_ignored_sigint_stays_ignored():
    """``nohup`` or a script's background job: the command keeps SIGINT ignored (as a plain process)."""
    code = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); from dask_pfs import interrupts; "
    code += "interrupts.install(); print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "True"


TWO_PRESSES_INSIDE_A_START = """
import importlib.machinery, signal, sys, time
from dask_pfs import interrupts
interrupts.install()

class Start(importlib.machinery.ExtensionFileLoader):
    def exec_module(self, module):  # an extension's start, as in_native_init sees one: two Ctrl-C 10 ms apart
        interrupts.on_sigint(signal.SIGINT, sys._getframe())
        time.sleep(0.01)
        interrupts.on_sigint(signal.SIGINT, sys._getframe())

Start("ext", "/nonexistent/ext.so").exec_module(None)
taken = 0
deadline = time.monotonic() + 0.5
while time.monotonic() < deadline:
    try:
        time.sleep(0.01)
    except KeyboardInterrupt:
        taken += 1
print(taken)
"""


def test_ctrl_c_pressed_twice_inside_a_start_is_one_interrupt_after_it():
    """Presses taken while an extension starts are owed as one KeyboardInterrupt once it is over: a second one
    would land in the cleanup of the first (a traceback after "pfs: interrupted")."""
    code = subprocess.run(
        [sys.executable, "-c", TWO_PRESSES_INSIDE_A_START],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=True,
    )  # fmt: skip
    assert code.stdout.strip() == "1", code.stdout + code.stderr
