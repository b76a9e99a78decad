"""The warm server: imports what every command needs once, then forks a child per command.

Single-threaded by design: a process that forks must hold no lock another thread could own, so
the server starts no thread and refuses to serve if an import started one (pyarrow's and DuckDB's
pools start when first used, which only children do).  It listens on ``KEY.sock`` in the user's
private directory (``identity``), holds ``KEY.lock`` while alive (one server per key), reads every
client's request without waiting on any one of them, answers each child's end with its exit status
and CPU time, and leaves after ``PFS_SERVER_IDLE`` seconds (600) without a command, when told to
stop, or when its socket is removed or replaced.

Job control follows the client: while a client is stopped (Ctrl-Z, SIGTTIN, ``kill -STOP``) its
child's process group is stopped, and continued with it (``fg``, ``bg``); a client that dies takes
the child's process group with it (SIGKILL), stopped or not.

Run as ``python -m dask_pfs.warm.server KEY SYS_PATH_JSON`` by ``client.start_server``.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

# What a command's process imports before its first file: each command's module and the engine it
# calls (docs/performance.md).  Not distributed: only jobs that outlast PFS_ALONE_SECONDS start a
# cluster, and they can pay for it.
PRELOAD = (
    "pyarrow",
    "pyarrow.parquet",
    "pyarrow.compute",  # sync and attribute reads; 30-57 ms that a 1-file command need not pay, the server can
    "fsspec",
    "duckdb",
    "click",
    "operators._native",
    "dask_pfs.cli",
    *(f"dask_pfs.commands.{m}" for m in ("cp", "diff", "query", "rm", "scan", "sync", "verify", "workers")),
    "dask_pfs.scan.api",
    "dask_pfs.copy",
    "dask_pfs.remove.api",
    "dask_pfs.compare.sync",
    "dask_pfs.compare.verify",
    "dask_pfs.compare.diff",
    "dask_pfs.runtime.here",
    "dask_pfs.manifests.manifest",
    # obstore's listers and writers: a command imports them only for a store (a local job never pays)
    "operators.scan.objstore",
    "operators.copy.obstore_destination",
    "operators.remove.objstore",
)
FOLLOW_SECONDS = 0.05  # how often a running job's client is looked at (stopped, continued)
REQUEST_SECONDS = 5.0  # a client that connected must send its request within this


def main() -> None:
    key, sys_path = sys.argv[1], json.loads(sys.argv[2])
    sys.path[:] = sys_path
    from dask_pfs.warm import identity

    # whatever the starting process had blocked or ignored is not the server's (nor its children's)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for sig in (signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)

    where = identity.socket_dir()
    if where is None:
        raise SystemExit("pfs server: no private socket directory")
    lock = identity.open_lock(where, key)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another server for this key is starting or running
    if identity.server_key() != key:  # before the imports, which set OPENBLAS_NUM_THREADS
        raise SystemExit("pfs server: this process's key differs from its client's; not serving")
    if not _proof_holds():
        raise SystemExit("pfs server: a Landlock-confined process could pass the proof on this kernel; not serving")
    _preload()
    Server(where, key, lock).serve()


def _preload() -> None:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from operators import pandas_gate

    pandas_gate.refuse_implicit()
    for name in PRELOAD:
        importlib.import_module(name)
    import duckdb

    from dask_pfs.manifests.sql import DUCKDB_CONFIG

    # DuckDB's first database in a process builds its catalogue (~30 ms); closed, it leaves no thread
    duckdb.connect(config=DUCKDB_CONFIG).close()
    others = [name for name in _thread_names() if name not in FORK_SAFE_THREADS]
    if len(others) != 1:
        raise SystemExit(f"pfs server: threads {others} after imports; a process that forks must have one")


# jemalloc's (pyarrow's allocator) purging thread, started at import: jemalloc's own fork handlers
# take its locks around fork and the child starts its threads again when needed.
FORK_SAFE_THREADS = {"jemalloc_bg_thd"}


def _thread_names() -> list[str]:
    names = []
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/comm") as f:
            names.append(f.read().strip())
    return names


@dataclass
class Job:
    """A running command: the server's child and the client waiting for it."""

    pid: int
    conn: socket.socket
    client_pid: int
    client_pidfd: int
    stopped: bool = False  # stopped by the server, with its client


@dataclass
class Pending:
    """A connection whose request has not arrived whole yet."""

    reader: Any
    peer: int
    deadline: float
    unfaithful: str | None  # why a command of this peer's would not run here as in its own process


class Server:
    def __init__(self, where: str, key: str, lock: int) -> None:
        from dask_pfs.warm import client

        self.path = os.path.join(where, f"{key}.sock")
        self.key = key
        self.lock = lock
        self.started = time.time()
        self.last_end = time.monotonic()
        self.idle = client.idle_seconds()
        self.jobs: dict[int, Job] = {}  # by the child's pidfd
        self.clients: dict[int, int] = {}  # a running job's client pidfd -> the child's pidfd
        self.pending: dict[socket.socket, Pending] = {}
        self.served = 0
        self.stopping = False
        self.selector = selectors.DefaultSelector()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a dead server's: we hold the key's lock
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(self.path)
        finally:
            os.umask(old)
        self.listener.listen(64)
        self.inode = os.stat(self.path).st_ino
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def serve(self) -> None:
        print(f"pfs server {os.getpid()} listening on {self.path}", file=sys.stderr, flush=True)
        while not (self.stopping and not self.jobs):
            timeout = FOLLOW_SECONDS if self.jobs or self.pending else 1.0
            for key, _events in self.selector.select(timeout=timeout):
                if key.data == "listener":
                    self._accept()
                elif key.data == "child":
                    self._reap(key.fd)
                elif key.data == "client":
                    self._client_gone(key.fd)
                else:
                    self._read(key.fileobj)  # type: ignore[arg-type]
            self._follow_clients()
            self._expire()
            if not self.stopping and (self._idle_too_long() or not self._socket_is_ours()):
                self.stop()
        print(f"pfs server {os.getpid()} stopped after {self.served} commands", file=sys.stderr, flush=True)
        base = self.path[: -len(".sock")]
        for leftover in (f"{base}.log", f"{base}.lock"):  # still holding the lock: no server starts in between
            with contextlib.suppress(OSError):
                os.unlink(leftover)

    def stop(self) -> None:
        """Take no more commands; the running ones end and get their exit status first."""
        if self.stopping:
            return
        self.stopping = True
        self.selector.unregister(self.listener)
        if self._socket_is_ours():
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self.listener.close()
        for conn in list(self.pending):
            self._drop(conn)

    def _idle_too_long(self) -> bool:
        return not self.jobs and time.monotonic() - self.last_end > self.idle

    def _socket_is_ours(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

    def _accept(self) -> None:
        """Check who connected (from the kernel), then wait for its request without blocking anyone."""
        from dask_pfs.warm import identity, wire

        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        try:
            mine = identity.context_of()
            pid, refused = wire.verified_peer(conn, mine, identity_only=True)
            if refused or pid is None:
                wire.tell(conn, {"op": "refused", "why": refused})
                conn.close()
                return
            _pid, unfaithful = wire.verified_peer(conn, mine)  # limits and priorities: for "run"
        except OSError:
            conn.close()
            return
        conn.setblocking(False)
        self.pending[conn] = Pending(wire.Reader(conn), pid, time.monotonic() + REQUEST_SECONDS, unfaithful)
        self.selector.register(conn, selectors.EVENT_READ, "request")

    def _read(self, conn: socket.socket) -> None:
        from dask_pfs.warm import wire

        pending = self.pending[conn]
        try:
            request = pending.reader.poll()
        except (BlockingIOError, InterruptedError):
            return
        except (OSError, ValueError) as exc:
            print(f"pfs server: a client's request failed: {exc}", file=sys.stderr, flush=True)
            return self._drop(conn)
        if request is None:
            return None if pending.reader.open else self._drop(conn)
        self.selector.unregister(conn)
        del self.pending[conn]
        fds = pending.reader.fds
        try:
            conn.setblocking(True)
            op = request.get("op")
            if op == "run" and request.get("key") == self.key and not self.stopping:
                refused = pending.unfaithful or _unproven(request, fds)
                if refused is None:
                    return self._fork(conn, request, fds, pending.peer)
                wire.tell(conn, {"op": "refused", "why": refused})
            elif op == "status":
                wire.tell(conn, self.status())
            elif op == "stop":
                wire.tell(conn, {"op": "stopping", "pid": os.getpid(), "running": len(self.jobs)})
                self.stop()
            else:
                wire.tell(conn, {"op": "refused", "why": "another key" if op == "run" else f"unknown op {op!r}"})
        except OSError as exc:
            print(f"pfs server: a client's request failed: {exc}", file=sys.stderr, flush=True)
        for fd in fds:
            os.close(fd)
        conn.close()

    def _drop(self, conn: socket.socket) -> None:
        pending = self.pending.pop(conn)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)
        for fd in pending.reader.fds:
            os.close(fd)
        conn.close()

    def _expire(self) -> None:
        """One client that never speaks holds nobody up, and not even its own connection for long."""
        now = time.monotonic()
        for conn in [c for c, p in self.pending.items() if p.deadline < now]:
            self._drop(conn)

    def status(self) -> dict:
        return {
            "op": "status",
            "pid": os.getpid(),
            "key": self.key,
            "started": self.started,
            "idle_timeout": self.idle,
            "idle": 0.0 if self.jobs else time.monotonic() - self.last_end,
            "running": len(self.jobs),
            "served": self.served,
            "stopping": self.stopping,
        }

    def _fork(self, conn: socket.socket, request: dict, fds: list[int], client_pid: int) -> None:
        from dask_pfs.warm import wire

        try:
            client_pidfd = os.pidfd_open(client_pid)
        except OSError:  # the client is gone already
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        request["client_pid"] = client_pid
        # Blocking from here on, in both processes: O_NONBLOCK belongs to the open file description,
        # which the child shares; the child blocks in recv, and the parent only sends short messages
        # without waiting (MSG_DONTWAIT).
        pid = os.fork()
        if pid == 0:
            from dask_pfs.warm import job

            os.close(client_pidfd)
            job.become(conn, request, fds, closing=self._close_in_child)
        for fd in fds:
            os.close(fd)
        self.served += 1
        pidfd = os.pidfd_open(pid)
        self.jobs[pidfd] = Job(pid, conn, client_pid, client_pidfd)
        self.clients[client_pidfd] = pidfd
        self.selector.register(pidfd, selectors.EVENT_READ, "child")
        self.selector.register(client_pidfd, selectors.EVENT_READ, "client")
        wire.tell(conn, {"op": "started", "pid": pid})

    def _close_in_child(self) -> None:
        """In a forked child: drop every descriptor of the server's (its clients are not the child's)."""
        for pidfd, job in self.jobs.items():
            os.close(pidfd)
            os.close(job.client_pidfd)
            job.conn.close()
        for other, pending in self.pending.items():
            other.close()
            for fd in pending.reader.fds:
                os.close(fd)
        self.selector.close()
        if not self.stopping:
            self.listener.close()
        os.close(self.lock)

    def _follow_clients(self) -> None:
        """Stop a job whose client is stopped, continue it when the client goes on (the child is in
        another session, so the terminal's Ctrl-Z and the shell's ``fg`` reach only the client)."""
        for job in self.jobs.values():
            stopped = _is_stopped(job.client_pid)
            if stopped != job.stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.pid, signal.SIGSTOP if stopped else signal.SIGCONT)
                job.stopped = stopped

    def _client_gone(self, client_pidfd: int) -> None:
        """Nobody waits for the result: the child's whole process group goes, stopped or not (SIGKILL)."""
        pidfd = self.clients.pop(client_pidfd)
        self.selector.unregister(client_pidfd)
        job = self.jobs[pidfd]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)  # not reaped yet: its pid, so its group's id, is not reused

    def _reap(self, pidfd: int) -> None:
        from dask_pfs.warm import wire

        job = self.jobs.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        if self.clients.pop(job.client_pidfd, None) is not None:
            self.selector.unregister(job.client_pidfd)
        os.close(job.client_pidfd)
        _, status, usage = os.wait4(job.pid, 0)
        if job.stopped:  # helpers the child left behind are not left stopped
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGCONT)
        self.last_end = time.monotonic()
        end = {"op": "exit", "cpu": usage.ru_utime + usage.ru_stime}
        if os.WIFSIGNALED(status):
            end["signal"] = os.WTERMSIG(status)
        else:
            end["code"] = os.waitstatus_to_exitcode(status)
        wire.tell(job.conn, end)
        job.conn.close()


def _is_stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def _proof_holds() -> bool:
    """Whether a process in a Landlock domain is refused ``/proc/<this server>/fdinfo/0`` (kernels
    without Landlock: nothing to prove).  A forked child restricts itself and tries."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(444, None, 0, 1) < 1:  # landlock_create_ruleset(VERSION): not enabled here
        return True
    server = os.getpid()
    child = os.fork()
    if child == 0:
        code = 2
        try:
            attr = ctypes.create_string_buffer(struct.pack("Q", 1 << 1))  # handles LANDLOCK_ACCESS_FS_WRITE_FILE
            ruleset = libc.syscall(444, attr, 8, 0)
            libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, as an unprivileged process must
            if ruleset >= 0 and libc.syscall(446, ruleset, 0) == 0:
                try:
                    os.close(os.open(f"/proc/{server}/fdinfo/0", os.O_RDONLY))
                    code = 1
                except PermissionError:
                    code = 0
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0


def _unproven(request: dict, fds: list[int]) -> str | None:
    """Why the client has not shown it may open this server's ``/proc/PID/fdinfo/0`` (None: it has).

    Opening it takes a ptrace read check of this process: a client in a Landlock domain this server is
    not in, or with fewer capabilities, cannot, and /proc does not show the domain (:func:`_proof_holds`
    checked at start that this kernel makes the check)."""
    streams = request.get("streams")
    if not isinstance(streams, list) or len(fds) != len(streams) + 2:
        return "expected the standard streams, the working directory and the proof"
    mine = f"/proc/{os.getpid()}/fdinfo/0"
    proof = fds[-1]
    try:
        if os.readlink(f"/proc/self/fd/{proof}") != mine:
            return "the proof is not this server's fdinfo"
        theirs, ours = os.fstat(proof), os.stat(mine)
    except OSError as exc:
        return f"the proof cannot be checked: {exc}"
    if (theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino):
        return "the proof is not this server's fdinfo"
    return None


if __name__ == "__main__":
    main()
