"""When a child forked by the warm server could not be exactly the command's own process.

A forked child gets only argv, environment, umask, working directory and the three standard streams
from the client (``wire``); everything else it inherits from the server.  What the server and client
can compare (credentials, confinement, limits, priorities) is compared in ``wire.verified_peer``;
this module names what this process has that no server can be given, each a reason to run the
command here, as ``PFS_SERVER=off`` would:

- a closed standard stream (in its own process pfs's own files would land on fd 0, 1 or 2);
- a signal ignored or blocked (a fresh interpreter keeps them; a forked child cannot inherit them),
  but SIGPIPE and SIGXFSZ, which Python ignores itself at start-up whatever it inherited, and the C
  library's reserved signals (``make`` runs its recipes with them ignored);
- a background job of its terminal (reading it stops a plain process with SIGTTIN), or a terminal
  with ``tostop`` (writing does);
- seccomp in any mode (its filters cannot be compared);
- an argument, or the working directory, that names a descriptor or anything under ``/proc``
  (``/dev/fd/3`` would be the server child's fd 3) in any spelling: inside ``--opt=value`` or
  ``-oVALUE``, behind a URL scheme, relative to the working directory, through symlinks.

It reads only ``/proc/self`` and the arguments: no import beyond the standard library's core.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import termios

# Python ignores these at start-up whatever it inherited, so a plain process has them ignored too
_PYTHON_IGNORES = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))
# The C library's own signals below SIGRTMIN (glibc's 32 and 33: thread cancellation, set*id across
# threads): no program can set or use them, the library takes them over when it needs them, and GNU make
# passes them on ignored to every recipe.  Their disposition changes nothing a command does.
_VALID = {int(number) for number in signal.valid_signals()}  # once: each call converts ~64 numbers to enums
_LIBC_RESERVED = sum(1 << (number - 1) for number in range(1, signal.SIGRTMIN) if number not in _VALID)
# descriptors, the terminal, and every per-process file of /proc (the server child's, not the client's)
_NAMES_A_PROCESS = re.compile(r"^/(proc(/|$)|dev/(fd|stdin|stdout|stderr|tty)(/|$))")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def reasons(argv: list[str]) -> str | None:
    """Why this process's command must run here, or None if a server's child can run it faithfully."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            return f"fd {fd} is closed"
    status = _status()
    if int(status.get("SigBlk", "0"), 16) & ~_LIBC_RESERVED:
        return "a signal is blocked"
    if int(status.get("SigIgn", "0"), 16) & ~(_PYTHON_IGNORES | _LIBC_RESERVED):
        return "a signal is ignored"
    if status.get("Seccomp", "0") != "0":
        return "seccomp"
    terminal = _terminal_reason()
    if terminal:
        return terminal
    try:
        cwd = os.getcwd()
    except OSError:
        return "no working directory"
    if names_a_process(cwd):
        return "the working directory is under /proc"
    for arg in argv:
        if any(names_a_process(os.path.join(cwd, candidate)) for candidate in _spellings(arg)):
            return f"argument {arg!r} names a descriptor or /proc"
    return None


def _status() -> dict[str, str]:
    fields = {}
    with open("/proc/self/status", encoding="ascii", errors="replace") as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields


def _terminal_reason() -> str | None:
    """A background job of its controlling terminal, or a terminal stream with ``tostop``."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    pgrp, tty_nr, tpgid = int(fields[2]), int(fields[4]), int(fields[5])
    if tty_nr and tpgid != pgrp:
        return "a background job of its terminal"
    for fd in (0, 1, 2):
        if os.isatty(fd):
            try:
                if termios.tcgetattr(fd)[3] & termios.TOSTOP:
                    return "its terminal stops background writers (tostop)"
            except termios.error:
                return "its terminal's modes cannot be read"
    return None


def _spellings(arg: str) -> list[str]:
    """The paths an argument may name: itself, an option's value, the path of a URL."""
    found = [arg]
    if arg.startswith("-"):
        if "=" in arg:
            found.append(arg.partition("=")[2])
        if not arg.startswith("--") and len(arg) > 2:
            found.append(arg[2:])  # -oVALUE
    found += [_SCHEME.sub("", s, count=1) for s in found if _SCHEME.match(s)]
    return found


def names_a_process(path: str) -> bool:
    """Whether ``path`` (absolute), normalised and with its symlinks followed, is a descriptor, the
    terminal or under ``/proc``."""
    return bool(_NAMES_A_PROCESS.match(_resolve(path)))


_DESCRIPTOR = re.compile(r"^/proc/(self|thread-self|(\d+)(/task/\d+)?)/fd/(\d+)$")
_DEV_DESCRIPTOR = re.compile(r"^/dev/(fd/(\d+)|stdin|stdout|stderr)$")  # where /dev has no such symlinks
_PROC = re.compile(r"^/proc(/|$)")
_STD = {"stdin": 0, "stdout": 1, "stderr": 2}


def descriptors_named(argv: list[str]) -> dict[str, int]:
    """{argument: descriptor} for each argument naming one of this process's descriptors in any spelling
    (``/dev/fd/3``, ``--output=/proc/self/fd/3``, ``-o/dev/stdout``)."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = "/"
    found = {}
    for arg in argv:
        for candidate in _spellings(arg):
            resolved = _resolve(os.path.join(cwd, candidate))
            match = _DESCRIPTOR.match(resolved)
            if match and match.group(2) in (None, str(os.getpid())):
                found[arg] = int(match.group(4))
            dev = _DEV_DESCRIPTOR.match(resolved)
            if dev:
                found[arg] = int(dev.group(2)) if dev.group(2) else _STD[dev.group(1)]
    return found


def _resolve(path: str) -> str:
    """``path`` normalised, its symlinks followed, but nothing under ``/proc`` (a descriptor's magic
    link would lead to the file it has open)."""
    seen = 0
    path = "/" + os.path.normpath(path).lstrip("/")
    while True:
        if _PROC.match(path):
            return path
        parts = path.split("/")
        resolved = "/"
        for i, part in enumerate(parts[1:], start=1):
            candidate = os.path.join(resolved, part)
            if _PROC.match(candidate):
                return "/" + os.path.normpath(os.path.join(candidate, *parts[i + 1 :])).lstrip("/")
            try:
                st = os.lstat(candidate)
            except OSError:  # nothing further to follow: what is left is a name to create
                return "/" + os.path.normpath(os.path.join(candidate, *parts[i + 1 :])).lstrip("/")
            if stat.S_ISLNK(st.st_mode):
                seen += 1
                if seen > 40:
                    return "/proc/loop"  # a loop: not worth serving
                target = os.readlink(candidate)
                path = "/" + os.path.normpath(os.path.join(resolved, target, *parts[i + 1 :])).lstrip("/")
                break
            resolved = candidate
        else:
            return path
