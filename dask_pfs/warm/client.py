"""The ``pfs`` console script: hand the command to this user's warm server, or run it here.

Importing Python's data stack costs a 1-file command most of its time (~0.4 s of CPU before the
first file; docs/performance.md), so this module imports nothing of it.  It finds the server whose
key (``identity.server_key``) matches this process, checks from ``/proc`` that the server has this
process's credentials and confinement, sends argv, environment, umask, the standard streams and the
working directory, forwards signals (Ctrl-C) and leaves with the command's exit status.  With no
server yet it starts one in the background and runs this command itself; ``PFS_SERVER=off`` never
uses one (``pfs cluster stop`` stops them).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import sys
from typing import NoReturn

_STREAMS = (0, 1, 2)
# the client's sys.path first (a checkout on PYTHONPATH, a ``python -m`` from a source tree), then the server
_SERVER_MAIN = "import json, sys; sys.path[:] = json.loads(sys.argv[2]); from dask_pfs.warm.server import main; main()"


def main() -> NoReturn:
    argv = sys.argv[1:]
    if _wanted(argv):
        code = _via_server()
        if code is not None:
            _leave(code)
    from dask_pfs import cli

    cli.main(argv)
    raise SystemExit(0)  # cli.main exits; for type checkers


def _wanted(argv: list[str]) -> bool:
    mode = os.environ.get("PFS_SERVER", "auto").lower()
    if mode in ("off", "0", "no", "false"):
        return False
    if "cluster" in argv[:3]:  # ``pfs cluster stop|status`` talk to servers: from outside them
        return False
    # descriptors other than 0, 1 and 2 are the client's own: a path naming one stays here
    return not any(a.startswith(("/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/")) for a in argv)


def _via_server() -> int | tuple[str, int] | None:
    """The command's exit status from the server, or None to run it in this process."""
    try:
        from dask_pfs.warm import identity

        where = identity.socket_dir()
        if where is None:
            return None
        context = identity.context_of()
        key = identity.server_key(context)
        sock = connect(os.path.join(where, f"{key}.sock"))
        if sock is None:
            if 1 not in (os.getpid(), os.getppid()):  # not a container's one command: it would never come back
                start_server(where, key)
            return None
        return _run(sock, key, context)
    except (OSError, ValueError) as exc:
        _debug(f"pfs: running here, not in the warm server: {exc}")
        return None


def connect(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    return sock


def _run(sock: socket.socket, key: str, context: dict) -> int | tuple[str, int] | None:
    from dask_pfs.warm import wire

    with sock:
        _pid, refused = wire.verified_peer(sock, context)
        if refused:
            _debug(f"pfs: not using the server at {sock.getpeername()}: {refused}")
            return None
        streams = [fd for fd in _STREAMS if _is_open(fd)]
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            umask = os.umask(0o22)
            os.umask(umask)
            request = {
                "op": "run",
                "key": key,
                "argv": [os.fsdecode(sys.argv[0])] + sys.argv[1:],
                "env": dict(os.environ),
                "umask": umask,
                "streams": streams,
            }
            wire.send(sock, request, streams + [cwd])
        finally:
            os.close(cwd)
        reader = wire.Reader(sock)
        answer = reader.read()
        if answer is None or answer.get("op") != "started":
            _debug(f"pfs: the server did not take the command: {answer}")
            return None
        return _wait(sock, reader)


def _wait(sock: socket.socket, reader) -> int | tuple[str, int]:
    """Forward signals until the server reports the child's end."""
    from dask_pfs.warm import wire

    def forward(sig: int, _frame) -> None:
        with contextlib.suppress(OSError):
            wire.send(sock, {"signal": sig})

    def suspend(_sig: int, _frame) -> None:  # Ctrl-Z: the command stops with this process, and goes on with it
        forward(signal.SIGSTOP, None)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)
        signal.signal(signal.SIGTSTP, suspend)  # here again after SIGCONT (fg, bg)
        forward(signal.SIGCONT, None)

    for sig in wire.FORWARDED_SIGNALS:
        signal.signal(sig, forward)
    signal.signal(signal.SIGTSTP, suspend)
    end = reader.read()
    for sig in (*wire.FORWARDED_SIGNALS, signal.SIGTSTP):
        signal.signal(sig, signal.SIG_DFL)
    if end is None or end.get("op") != "exit":
        print("pfs: error: the pfs server ended while running this command", file=sys.stderr)
        return 1
    if os.environ.get("PFS_SERVER_CPU"):  # benchmarks: the command's CPU is the server child's
        print(f"pfs: server job cpu {end.get('cpu', 0.0):.4f} s", file=sys.stderr)
    if "signal" in end:
        return ("signal", int(end["signal"]))
    return int(end.get("code", 1))


def _leave(code: int | tuple[str, int]) -> NoReturn:
    if isinstance(code, tuple):  # killed by a signal: so is this process, as a shell would see it
        sig = code[1]
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        code = 128 + sig
    os._exit(code)


def start_server(where: str, key: str, wait: float = 0.0) -> bool:
    """Start this key's server in the background, unless one is starting; with ``wait``, until it
    answers (True) or that many seconds pass."""
    import json
    import subprocess
    import time

    from dask_pfs.warm import identity

    lock = identity.open_lock(where, key)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            starting = True  # a server holds it
        else:
            fcntl.flock(lock, fcntl.LOCK_UN)
            starting = False
    finally:
        os.close(lock)
    if not starting:
        log = identity.open_file(where, f"{key}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            subprocess.Popen(
                [
                    sys.executable,
                    *subprocess._args_from_interpreter_flags(),  # type: ignore[attr-defined]
                    "-c",
                    _SERVER_MAIN,
                    key,
                    json.dumps(sys.path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd="/",
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(log)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        sock = connect(os.path.join(where, f"{key}.sock"))
        if sock is not None:
            sock.close()
            return True
        time.sleep(0.05)
    return False


def _is_open(fd: int) -> bool:
    try:
        fcntl.fcntl(fd, fcntl.F_GETFD)
    except OSError:
        return False
    return True


def _debug(message: str) -> None:
    if os.environ.get("PFS_SERVER_DEBUG"):
        print(message, file=sys.stderr)
