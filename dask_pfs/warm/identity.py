"""Which warm server a process may use: a private directory, and a key that pins everything a forked
child inherits from its server rather than from the command's own process.

A child of the server runs with the server's credentials, capabilities, namespaces, cgroup, resource
limits, interpreter and imported code; only argv, environment, working directory, umask and standard
streams come from the client.  So a server is only ever used by a process for which all the former
are equal: they are hashed into the socket's name (:func:`server_key`), and each side checks the
other's credentials and confinement from ``/proc`` (:func:`context_of`) before trusting it, so a
process that dropped a capability (``setpriv``) never runs its command in a server that kept it.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import stat
import sys

from operators.core import outputs

# Environment read once, at start-up or import (interpreter, loader, allocator, locale, numeric
# libraries' thread pools): a different value needs a different server.  Everything else in the
# environment is the command's own and is handed to the child as is.  Not OPENBLAS_*: pfs sets its
# thread count to 1 before numpy's import in every process, and does no linear algebra.
_KEYED_PREFIXES = ("PYTHON", "LD_", "MALLOC_", "ARROW_", "OMP_", "MKL_", "LC_", "PFS_SERVER")
_KEYED_NAMES = ("LANG", "LANGUAGE", "TZ", "VIRTUAL_ENV")
_STATUS_FIELDS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
_NAMESPACES = ("mnt", "pid", "net", "user", "uts", "ipc", "cgroup", "time")
_PACKAGES = ("dask_pfs", "operators")


def socket_dir(create: bool = True) -> str | None:
    """``$XDG_RUNTIME_DIR/pfs`` (or ``/tmp/pfs-UID``), only if it is a directory of this user's that
    nobody else may enter; None otherwise (the command then runs in its own process)."""
    uid = os.getuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _private_dir(runtime, uid):
        base = os.path.join(runtime, "pfs")
    else:  # where dask_pfs.runtime.locking keeps its locks (tempfile.gettempdir(), without its imports)
        tmp = next((d for d in map(os.environ.get, ("TMPDIR", "TEMP", "TMP")) if d and os.path.isdir(d)), "/tmp")
        base = os.path.join(tmp, f"pfs-{uid}")
    if create:
        try:  # made 0700 by the one writer, every directory above checked
            outputs.private_dir(base).close()
        except OSError:  # refused (UnsafeOutput) or impossible: no warm server
            return None
    return base if _private_dir(base, uid) else None


def open_file(where: str, name: str, flags: int) -> int:
    """``name`` in the socket directory ``where``, through the one writer: never through a link, only
    a regular file of this user's with one name."""
    with outputs.open_dir(where) as d:
        return d.open_fd(name, flags, outputs.PRIVATE_FILE)


def open_lock(where: str, key: str) -> int:
    """``KEY.lock``, which a key's server holds (``flock``) while it lives: one server per key."""
    return open_file(where, f"{key}.lock", os.O_RDWR | os.O_CREAT)


def _private_dir(path: str, uid: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and st.st_mode & 0o077 == 0


def context_of(pid: int | str = "self") -> dict:
    """Credentials and confinement of a process as the kernel reports them (``/proc/PID``)."""
    proc = f"/proc/{pid}"
    fields: dict = {}
    with open(f"{proc}/status", encoding="ascii", errors="replace") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in _STATUS_FIELDS:
                fields[name] = value.split()
    with open(f"{proc}/cgroup", encoding="utf-8", errors="surrogateescape") as f:
        fields["cgroup"] = f.read()
    for ns in _NAMESPACES:
        try:
            fields[f"ns/{ns}"] = os.readlink(f"{proc}/ns/{ns}")
        except FileNotFoundError:  # a namespace this kernel does not have
            fields[f"ns/{ns}"] = None
    root = os.stat(f"{proc}/root")
    fields["root"] = [root.st_dev, root.st_ino]
    try:
        with open(f"{proc}/attr/current", "rb") as f:  # SELinux / AppArmor label
            fields["lsm"] = f.read().decode("ascii", "replace")
    except OSError:
        fields["lsm"] = None
    return fields


def _install() -> dict:
    """The interpreter and the code a server imported: any edit, rebuild or reinstall changes it."""
    newest, count = 0, 0
    places = []
    for package in _PACKAGES:
        module = sys.modules.get(package)
        where = os.path.dirname(module.__file__) if module and module.__file__ else _find(package)
        places.append(where)
        if where:
            n, c = _newest(where)
            newest, count = max(newest, n), count + c
    return {
        "executable": sys.executable,
        "version": sys.version,
        "flags": list(sys.flags),
        "xoptions": sorted(map(str, sys._xoptions.items())),
        "warnoptions": list(sys.warnoptions),
        "path": sys.path[1:],  # [0] is the script's directory or the working directory of ``python -m``
        "packages": places,
        "newest": newest,
        "files": count,
    }


def _find(package: str) -> str | None:
    for entry in sys.path[1:] + sys.path[:1]:
        candidate = os.path.join(entry or ".", package)
        if os.path.isfile(os.path.join(candidate, "__init__.py")):
            return os.path.abspath(candidate)
    return None


def _newest(top: str) -> tuple[int, int]:
    newest, count = 0, 0
    stack = [top]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(entry.path)
                elif entry.name.endswith((".py", ".so")):
                    st = entry.stat(follow_symlinks=False)
                    newest, count = max(newest, st.st_mtime_ns, st.st_ctime_ns), count + 1
    return newest, count


def _limits() -> list:
    return [
        (name, resource.getrlimit(getattr(resource, name)))
        for name in sorted(dir(resource))
        if name.startswith("RLIMIT_")
    ]


def keyed_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k.startswith(_KEYED_PREFIXES) or k in _KEYED_NAMES}


def server_key(context: dict | None = None) -> str:
    """The name of the server this process may use (the same in the server that it starts);
    ``context``: this process's :func:`context_of`, when the caller has read it already."""
    mine = context if context is not None else context_of()
    blob = json.dumps(
        [mine, _install(), sorted(keyed_environment().items()), _limits(), os.getuid()],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()[:24]
