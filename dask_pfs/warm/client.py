"""The ``pfs`` console script: hand the command to this user's warm server, or run it here.

Importing Python's data stack costs a 1-file command most of its time (~0.4 s of CPU before the
first file; docs/performance.md), so this module imports nothing of it.  It finds the server whose
key (``identity.server_key``) matches this process, checks from ``/proc`` that the server has this
process's credentials and confinement, sends argv, environment, umask, the standard streams and the
working directory, forwards signals (Ctrl-C) and leaves with the command's exit status.

Opt-in: by default (``PFS_SERVER`` unset or ``auto``) a command uses a server only if one is running
(``pfs cluster start`` started it) and never starts one; ``PFS_SERVER=on`` also starts one in the
background when there is none (this command then runs itself); ``PFS_SERVER=off`` never uses one
(``pfs cluster stop`` stops them).
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
# the client's sys.path without a working directory (identity.import_path; ``-P``: none added either)
_SERVER_MAIN = "import json, sys; sys.path[:] = json.loads(sys.argv[2]); from dask_pfs.warm.server import main; main()"
MAX_SERVERS = 4  # per user: each set of keyed settings (LC_ALL, a venv, ...) would otherwise start its own


_MODES = {"on": "on", "1": "on", "yes": "on", "true": "on", "off": "off", "0": "off", "no": "off", "false": "off"}


def main() -> NoReturn:
    argv = sys.argv[1:]
    _check_descriptors(argv)
    mode = _mode()
    if mode != "off" and _wanted(argv):
        code = _via_server(start=mode == "on")
        if code is not None:
            _leave(code)
    from dask_pfs import cli

    cli.main(argv)
    raise SystemExit(0)  # cli.main exits; for type checkers


def _check_descriptors(argv: list[str]) -> None:
    """An argument naming a descriptor (``--output=/dev/fd/3``) must name one this process was given:
    otherwise it would be whatever pfs opens first there (a manifest part, overwritten)."""
    if not any("/" in arg for arg in argv):
        return
    from dask_pfs.warm import faithful

    for arg, fd in faithful.descriptors_named(argv).items():
        try:
            os.fstat(fd)  # nothing of this process's own is open yet: an open one was given
        except OSError:
            _refuse(f"{arg}: descriptor {fd} is not open (give it to pfs, e.g. 3>FILE)")


def _mode() -> str:
    """``PFS_SERVER``: ``auto`` (unset: a running server only), ``on`` or ``off``; anything else is refused."""
    value = os.environ.get("PFS_SERVER", "auto").strip().lower()
    if value in ("auto", ""):
        return "auto"
    if value not in _MODES:
        _refuse(f"PFS_SERVER={os.environ['PFS_SERVER']!r}: expected on, off or auto")
    if _MODES[value] == "on":
        try:
            idle_seconds()
        except ValueError as exc:
            _refuse(str(exc))
    return _MODES[value]


def _refuse(message: str) -> NoReturn:
    print(f"pfs: error: {message}", file=sys.stderr)
    os._exit(2)


def idle_seconds() -> float:
    """``PFS_SERVER_IDLE``: seconds a server waits for a command before it leaves (600); ValueError if bad."""
    raw = os.environ.get("PFS_SERVER_IDLE", "")
    try:
        value = float(raw) if raw.strip() else 600.0
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(f"PFS_SERVER_IDLE={raw!r}: expected a positive number of seconds")
    return value


def _wanted(argv: list[str]) -> bool:
    return "cluster" not in argv[:3]  # ``pfs cluster stop|status`` talk to servers: from outside them


def _via_server(start: bool) -> int | tuple[str, int] | None:
    """The command's exit status from the server, or None to run it in this process (``start``: and
    start a server in the background when there is none)."""
    try:
        from dask_pfs.warm import faithful, identity

        where = identity.socket_dir(create=start)
        if where is None:
            return None
        if not start and not any(name.endswith(".sock") for name in os.listdir(where)):
            return None  # the default: nobody started a server, so none is looked for (no key computed)
        why = faithful.reasons(sys.argv[1:])
        if why:
            _debug(f"pfs: running here, not in the warm server: {why}")
            return None
        context = identity.context_of()
        if context["ioprio"] is None:
            _debug("pfs: running here, not in the warm server: the I/O priority cannot be read")
            return None
        key = identity.server_key(context)
        sock = connect(os.path.join(where, f"{key}.sock"))
        if sock is None:
            if start and 1 not in (os.getpid(), os.getppid()):  # not a container's one command: never back
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
        pid, refused = wire.verified_peer(sock, context)
        if refused or pid is None:
            _debug(f"pfs: not using the server at {sock.getpeername()}: {refused}")
            return None
        # proof that this process passes a ptrace read check of the server (a Landlock domain may not)
        proof = os.open(f"/proc/{pid}/fdinfo/0", os.O_RDONLY | os.O_CLOEXEC)
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
                "streams": list(_STREAMS),
            }
            wire.send(sock, request, [*_STREAMS, cwd, proof])
        finally:
            os.close(cwd)
            os.close(proof)
        reader = wire.Reader(sock)
        answer = reader.read()
        if answer is None or answer.get("op") not in ("started", "done"):  # done: a child faster than "started"
            _debug(f"pfs: the server did not take the command: {answer}")
            return None
        return _wait(sock, reader, answer)


def _wait(sock: socket.socket, reader, first: dict) -> int | tuple[str, int]:
    """Forward signals until the server reports the child's end.  Ctrl-Z, ``kill -STOP`` and ``fg``
    need nothing here: the server stops and continues the child with this process."""
    from dask_pfs.warm import wire

    def forward(sig: int, _frame) -> None:
        with contextlib.suppress(OSError):
            wire.send(sock, {"signal": sig})

    for sig in wire.FORWARDED_SIGNALS:
        signal.signal(sig, forward)
    done: int | None = int(first.get("code", 1)) if first.get("op") == "done" else None
    while True:
        end = reader.read()
        if end is None or end.get("op") == "exit":
            break
        if end.get("op") == "done":  # the child's own exit code, in case the server is gone before it reports
            done = int(end.get("code", 1))
        elif end.get("op") == "ttin":  # the command read the terminal while this job was in the background
            os.killpg(os.getpgrp(), signal.SIGTTIN)
    for sig in wire.FORWARDED_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    if end is None:
        if done is not None:
            return done
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
    answers (True) or that many seconds pass.  OSError: the runtime directory refused its files;
    ValueError: a bad setting, or already ``MAX_SERVERS`` servers."""
    import json
    import subprocess
    import time

    from dask_pfs.warm import identity

    idle_seconds()
    others = [n for n in os.listdir(where) if n.endswith(".sock") and n != f"{key}.sock"]
    if len(others) >= MAX_SERVERS:
        raise ValueError(f"already {len(others)} pfs servers (at most {MAX_SERVERS}; pfs cluster stop --all)")

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
                    "-P",
                    "-c",
                    _SERVER_MAIN,
                    key,
                    json.dumps(identity.import_path()),
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


def _debug(message: str) -> None:
    if os.environ.get("PFS_SERVER_DEBUG"):
        print(message, file=sys.stderr)
