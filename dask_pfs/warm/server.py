"""The warm server: imports what every command needs once, then forks a child per command.

Single-threaded by design: a process that forks must hold no lock another thread could own, so
the server starts no thread and refuses to serve if an import started one (pyarrow's and DuckDB's
pools start when first used, which only children do).  It listens on ``KEY.sock`` in the user's
private directory (``identity``), holds ``KEY.lock`` while alive (one server per key), answers each
child's end with its exit status and CPU time, and leaves after ``PFS_SERVER_IDLE`` seconds (600)
without a command, when told to stop, or when its socket is removed or replaced.

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
)
IDLE_SECONDS = 600.0


def main() -> None:
    key, sys_path = sys.argv[1], json.loads(sys.argv[2])
    sys.path[:] = sys_path
    from dask_pfs.warm import identity

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


class Server:
    def __init__(self, where: str, key: str, lock: int) -> None:
        from dask_pfs.warm import identity

        self.path = os.path.join(where, f"{key}.sock")
        self.key = key
        self.lock = lock
        self.context = identity.context_of()
        self.started = time.time()
        self.last_end = time.monotonic()
        self.idle = float(os.environ.get("PFS_SERVER_IDLE") or IDLE_SECONDS)
        self.jobs: dict[int, tuple[int, socket.socket, float]] = {}  # pidfd -> (pid, client, started)
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
        self.selector.register(self.listener, selectors.EVENT_READ)
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def serve(self) -> None:
        print(f"pfs server {os.getpid()} listening on {self.path}", file=sys.stderr, flush=True)
        while not (self.stopping and not self.jobs):
            for key, _events in self.selector.select(timeout=1.0):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._reap(key.fd)
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

    def _idle_too_long(self) -> bool:
        return not self.jobs and time.monotonic() - self.last_end > self.idle

    def _socket_is_ours(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

    def _accept(self) -> None:
        from dask_pfs.warm import wire

        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.settimeout(5)  # one client that never speaks cannot hold the others for long
        reader = wire.Reader(conn)
        try:
            _pid, refused = wire.verified_peer(conn, self.context)
            if refused:
                wire.send(conn, {"op": "refused", "why": refused})
                return conn.close()
            request = reader.read(with_fds=True)
            if request is None:
                return conn.close()
            op = request.get("op")
            if op == "run" and request.get("key") == self.key and not self.stopping:
                return self._fork(conn, request, reader.fds)
            if op == "status":
                wire.send(conn, self.status())
            elif op == "stop":
                wire.send(conn, {"op": "stopping", "pid": os.getpid(), "running": len(self.jobs)})
                self.stop()
            else:
                wire.send(conn, {"op": "refused", "why": "another key" if op == "run" else f"unknown op {op!r}"})
        except (BrokenPipeError, ConnectionResetError):
            pass  # a client that only checked the server is up, or gave up
        except (OSError, ValueError) as exc:
            print(f"pfs server: a client's request failed: {exc}", file=sys.stderr, flush=True)
        for fd in reader.fds:
            os.close(fd)
        conn.close()

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

    def _fork(self, conn: socket.socket, request: dict, fds: list[int]) -> None:
        from dask_pfs.warm import wire

        # Blocking from here on, in both processes: O_NONBLOCK (a socket timeout) belongs to the open file
        # description, which the child shares; the child blocks in recv, and the parent only sends short
        # messages without waiting (MSG_DONTWAIT).
        conn.settimeout(None)
        pid = os.fork()
        if pid == 0:
            from dask_pfs.warm import job

            job.become(conn, request, fds, closing=self._close_in_child)
        for fd in fds:
            os.close(fd)
        self.served += 1
        pidfd = os.pidfd_open(pid)
        self.jobs[pidfd] = (pid, conn, time.monotonic())
        self.selector.register(pidfd, selectors.EVENT_READ)
        wire.tell(conn, {"op": "started", "pid": pid})

    def _close_in_child(self) -> None:
        """In a forked child: drop every descriptor of the server's (its clients are not the child's)."""
        for pidfd, (_pid, other, _started) in self.jobs.items():
            os.close(pidfd)
            other.close()
        self.selector.close()
        if not self.stopping:
            self.listener.close()
        os.close(self.lock)

    def _reap(self, pidfd: int) -> None:
        from dask_pfs.warm import wire

        pid, conn, _started = self.jobs.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status, usage = os.wait4(pid, 0)
        self.last_end = time.monotonic()
        end = {"op": "exit", "cpu": usage.ru_utime + usage.ru_stime}
        if os.WIFSIGNALED(status):
            end["signal"] = os.WTERMSIG(status)
        else:
            end["code"] = os.waitstatus_to_exitcode(status)
        wire.tell(conn, end)
        conn.close()


if __name__ == "__main__":
    main()
