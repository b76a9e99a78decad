"""What a child forked by the warm server does to become the client's command.

It takes the client's standard streams, working directory, umask, environment and argv, the signal
state of a fresh interpreter (nothing blocked, only SIGPIPE and SIGXFSZ ignored, Python's SIGINT
handler), watches the client's connection (a signal the client forwards is raised in the command's
main thread; the client gone means nobody waits for the result: the child and what it started are
killed, as a killed ``pfs`` process's would be), and runs the command as the console script does.
Its exit code goes to the client before it leaves (``done``), so a server that dies meanwhile does
not turn the command's status into a failure.

Reading a terminal while the client is a background job stops a plain process with SIGTTIN; the
child is in the server's session, where the kernel would not, so its stdin does it: it asks the
client to stop its job with SIGTTIN (the server then stops the child with it) and reads once the
client is in the terminal's foreground again.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from dask_pfs.warm import wire


def become(conn: socket.socket, request: dict, fds: list[int], closing: Callable[[], None]) -> NoReturn:
    code = 1
    try:
        closing()
        os.setpgid(0, 0)  # the command's own helpers and workers, killed together if the client goes
        _fresh_signals()
        _take_streams(fds, request.get("streams", []), conn, int(request["client_pid"]))
        os.umask(int(request["umask"]))
        _take_environment(request["env"])
        sys.argv = list(request["argv"])
        conn.settimeout(None)
        _watch(conn, threading.main_thread().ident or 0)
        from dask_pfs import cli

        code = cli.run(sys.argv[1:])
        wire.tell(conn, {"op": "done", "code": code})
        cli.exit_now(code)
    except BaseException:  # the server's child must never return into the server's loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            sys.stderr.flush()
    os._exit(code)


def _fresh_signals() -> None:
    """What a new interpreter starts with, whatever the server has (it ignores SIGINT and SIGHUP)."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def _take_streams(fds: list[int], streams: list[int], conn: socket.socket, client: int) -> None:
    """dup2 the client's descriptors onto 0, 1, 2 (the client serves only with all three open) and
    change to its working directory (sent as a descriptor: ``fchdir`` reaches it even if renamed).
    ``fds``: the streams, the working directory, the proof (``server._unproven``)."""
    if streams != [0, 1, 2] or len(fds) != 5:
        raise ValueError("expected the three standard streams, the working directory and the proof")
    for target in (0, 1, 2):
        os.dup2(fds[target], target)
    os.fchdir(fds[3])
    for fd in fds:
        os.close(fd)
    encoding = sys.stdout.encoding  # the locale's, as the client's: LANG and LC_* are in the server's key
    if os.isatty(0) and os.fstat(0).st_rdev == _terminal_of(client):
        # not fd 0 itself: input() would read it directly (PyOS_Readline), past the foreground check
        raw: io.RawIOBase = _Foreground(os.dup(0), conn, client)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(raw), encoding=encoding, errors="strict")
    else:
        sys.stdin = _text(0, "r", encoding, "strict")
    sys.stdout = _text(1, "w", encoding, "strict")
    sys.stderr = _text(2, "w", encoding, "backslashreplace")


def _text(fd: int, mode: str, encoding: str, errors: str) -> io.TextIOWrapper:
    if fd == 2:  # unbuffered, as Python's own stderr: nothing is lost to an os._exit
        return io.TextIOWrapper(
            open(fd, "wb", buffering=0, closefd=False),
            encoding=encoding,
            errors=errors,
            line_buffering=True,
            write_through=True,
        )
    binary = open(fd, mode + "b", closefd=False)  # noqa: SIM115 (the stream outlives this function)
    return io.TextIOWrapper(binary, encoding=encoding, errors=errors, line_buffering=mode == "w" and os.isatty(fd))


class _Foreground(io.RawIOBase):
    """The client's terminal as stdin: read only while the client's job is the terminal's foreground."""

    def __init__(self, fd: int, conn: socket.socket, client: int) -> None:
        self.fd, self.conn, self.client = fd, conn, client

    def readable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def readinto(self, buffer) -> int:
        asked = 0.0
        while not _in_foreground(self.client):
            if time.monotonic() - asked > 1.0:  # stopped with SIGTTIN, resumed in the background: again
                wire.tell(self.conn, {"op": "ttin"})
                asked = time.monotonic()
            time.sleep(0.05)
        return os.readv(self.fd, [buffer])


def _terminal_of(pid: int) -> int:
    """The device number of ``pid``'s controlling terminal (0: none)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rpartition(b")")[2].split()[4])


def _in_foreground(pid: int) -> bool:
    """Whether ``pid``'s process group is the foreground one of its terminal (``/proc/PID/stat``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return True  # the client is gone: the server ends this child
    return int(fields[2]) == int(fields[5])


def _take_environment(env: dict[str, str]) -> None:
    """The client's environment, and what the server's libraries read from it at import, again."""
    os.environ.clear()
    os.environ.update(env)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    time.tzset()  # TZ is the command's (not in the server's key)
    if "dask.config" in sys.modules:
        sys.modules["dask.config"].refresh()
    mounts: Any = sys.modules.get("operators.mounts")
    if mounts is not None:  # the mount table as it is now, not as when the server started
        mounts._mounts.cache_clear()
    fsspec_config: Any = sys.modules.get("fsspec.config")
    if fsspec_config is not None:  # as fsspec.config does at import, with this environment
        fsspec_config.default_conf_dir = os.path.join(os.path.expanduser("~"), ".config/fsspec")
        fsspec_config.conf_dir = os.environ.get("FSSPEC_CONFIG_DIR", fsspec_config.default_conf_dir)
        fsspec_config.conf.clear()
        fsspec_config.set_conf_files(fsspec_config.conf_dir, fsspec_config.conf)
        fsspec_config.set_conf_env(fsspec_config.conf, os.environ)


def _watch(conn: socket.socket, main_thread: int) -> None:
    def relay() -> None:
        buffer = b""
        while True:
            try:
                data = conn.recv(256)
            except BlockingIOError:  # never expected (see server._fork); wait rather than take it for an end
                select.select([conn], [], [])
                continue
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:  # the client is gone: nobody will read the result
                os.killpg(0, signal.SIGKILL)
            buffer += data
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                _raise(line, main_thread)

    threading.Thread(target=relay, name="pfs-client-signals", daemon=True).start()


def _raise(line: bytes, main_thread: int) -> None:
    import json

    try:
        sig = int(json.loads(line).get("signal"))
    except (ValueError, TypeError, AttributeError):
        return
    if sig in wire.FORWARDED_SIGNALS:
        signal.pthread_kill(main_thread, sig)
