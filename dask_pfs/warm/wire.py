"""Messages between a ``pfs`` client and its warm server: one JSON object per line.

The request carries the command's standard streams and working directory as descriptors
(``SCM_RIGHTS``), so in the child ``isatty``, redirections, pipes and a deleted working directory
behave as in the client's own process.  Names and values that are not UTF-8 travel as JSON's
surrogate escapes (``os.fsdecode``), so they reach the child byte for byte.
"""

from __future__ import annotations

import json
import signal
import socket
import struct

# what a client passes on to its command (Ctrl-Z is SIGTSTP: the client stops the command with itself)
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
MAX_LINE = 4 << 20  # a request (argv + environment) larger than this is refused
MAX_FDS = 5  # stdin, stdout, stderr, working directory, the proof (the server's /proc/PID/environ)


def send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n"
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        data = data[sent:]
    if data:
        sock.sendall(data)


def tell(sock: socket.socket, message: dict) -> bool:
    """Send a short message without waiting and without changing the socket's blocking mode (which a
    forked child shares); False if it could not be sent whole (the client is gone or not reading)."""
    data = json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n"
    try:
        return sock.send(data, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL) == len(data)
    except OSError:
        return False


class Reader:
    """Reads lines (and the descriptors sent with the first one) from a stream socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.fds: list[int] = []
        self.open = True  # False once the peer closed its end

    def poll(self) -> dict | None:
        """On a non-blocking socket: one receive (with the descriptors), then the first message if it
        is whole, else None (``open`` False: never will be).  BlockingIOError: nothing to read yet."""
        if b"\n" not in self.buffer:
            data, fds, _flags, _addr = socket.recv_fds(self.sock, 65536, MAX_FDS)
            self.fds.extend(fds)
            if not data:
                self.open = False
                return None
            self.buffer += data
            if len(self.buffer) > MAX_LINE:
                raise ValueError("message too long")
            if b"\n" not in self.buffer:
                return None
        return self._message()

    def read(self, with_fds: bool = False) -> dict | None:
        """The next message, or None at end of stream."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE:
                raise ValueError("message too long")
            if with_fds and not self.fds:
                data, fds, _flags, _addr = socket.recv_fds(self.sock, 65536, MAX_FDS)
                self.fds.extend(fds)
            else:
                data = self.sock.recv(65536)
            if not data:
                return None
            self.buffer += data
        return self._message()

    def _message(self) -> dict:
        line, _, self.buffer = self.buffer.partition(b"\n")
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError("not a message")
        return message


def peer_pid(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end, as the kernel saw it connect (``SO_PEERCRED``)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


SO_PEERPIDFD = 77  # Linux 6.5+: a pidfd of the peer, which cannot be reused by another process


def verified_peer(sock: socket.socket, expected: dict, identity_only: bool = False) -> tuple[int | None, str | None]:
    """(pid, None) if the peer is this user's with the same credentials, confinement, limits and
    priorities as ``expected`` (``identity.context_of()``); (pid, why not) otherwise.  ``identity_only``:
    credentials and confinement only (``pfs cluster status|stop`` from a ``nice``d shell)."""
    import os

    from dask_pfs.warm import identity

    pid, uid = peer_pid(sock)
    if uid != os.getuid():
        return pid, f"uid {uid} is not {os.getuid()}"
    try:
        pidfd = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError:
        pidfd = os.pidfd_open(pid)  # older kernels: the peer is still connected, so alive
    try:
        context = identity.context_of(pid)
        signal.pidfd_send_signal(pidfd, 0)  # the pid read from /proc was still the peer's
    except (OSError, ValueError) as exc:
        return pid, f"cannot read the peer's context: {exc}"
    finally:
        os.close(pidfd)
    compared = [k for k in expected if not (identity_only and k in identity.COMPARED_ONLY)]
    differing = sorted(k for k in compared if context.get(k) != expected[k])
    if differing:
        return pid, "different " + ", ".join(differing)
    return pid, None
