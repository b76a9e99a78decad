"""What a child forked by the warm server does to become the client's command.

It takes the client's standard streams, working directory, umask, environment and argv, watches
the client's connection (a signal the client forwards is raised in the command's main thread; the
client gone means nobody waits for the result: the child and what it started are killed, as a
killed ``pfs`` process's would be), and runs the command as the console script does.
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
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from dask_pfs.warm import wire


def become(conn: socket.socket, request: dict, fds: list[int], closing: Callable[[], None]) -> NoReturn:
    code = 1
    try:
        closing()
        os.setpgid(0, 0)  # the command's own helpers and workers, killed together if the client goes
        _take_streams(fds, request.get("streams", []))
        os.umask(int(request["umask"]))
        _take_environment(request["env"])
        sys.argv = list(request["argv"])
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        conn.settimeout(None)
        _watch(conn, threading.main_thread().ident or 0)
        from dask_pfs import cli

        code = cli.run(sys.argv[1:])
        cli.exit_now(code)
    except BaseException:  # the server's child must never return into the server's loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    os._exit(code)


def _take_streams(fds: list[int], streams: list[int]) -> None:
    """dup2 the client's descriptors onto 0, 1, 2 (a stream the client had closed stays closed) and
    change to its working directory (sent as a descriptor: ``fchdir`` reaches it even if renamed)."""
    received = dict(zip(streams + [-1], fds, strict=False))  # -1: the working directory
    for target in (0, 1, 2):
        if target in received:
            os.dup2(received[target], target)
        else:
            os.close(target)
    os.fchdir(received[-1])
    for fd in fds:
        os.close(fd)
    encoding = sys.stdout.encoding  # the locale's, as the client's: LANG and LC_* are in the server's key
    sys.stdin = _text(0, "r", encoding, "strict") if 0 in received else None
    sys.stdout = _text(1, "w", encoding, "strict") if 1 in received else None
    sys.stderr = _text(2, "w", encoding, "backslashreplace") if 2 in received else None


def _text(fd: int, mode: str, encoding: str, errors: str) -> io.TextIOWrapper:
    binary = open(fd, mode + "b", closefd=False)  # noqa: SIM115 (the stream outlives this function)
    return io.TextIOWrapper(
        binary,
        encoding=encoding,
        errors=errors,
        line_buffering=mode == "w" and os.isatty(fd),
        write_through=fd == 2,  # unbuffered, as Python's own stderr
    )


def _take_environment(env: dict[str, str]) -> None:
    """The client's environment, and what the server's libraries read from it at import, again."""
    os.environ.clear()
    os.environ.update(env)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
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
    if sig in (signal.SIGSTOP, signal.SIGCONT):  # the client was suspended or resumed: the whole job is
        os.killpg(0, sig)
    elif sig in wire.FORWARDED_SIGNALS:
        signal.pthread_kill(main_thread, sig)
