"""Which warm server a process may use: a private directory, and a key that pins everything a forked
child inherits from its server rather than from the command's own process.

A child of the server runs with the server's credentials, capabilities, namespaces, cgroup, resource
limits, scheduling, interpreter and imported code; only argv, environment, working directory, umask and
standard streams come from the client.  So a server is only ever used by a process for which all the
former are equal: what picks a server is hashed into the socket's name (:func:`server_key`), and each
side checks the other's credentials, confinement, limits and priorities from ``/proc``
(:func:`context_of`) before trusting it, so a process that dropped a capability (``setpriv``) never runs
its command in a server that kept it, and a ``nice``d or ``ulimit``ed one runs in its own process.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys

from operators.core import outputs

# Environment read once, at start-up or import (interpreter, loader, allocator, locale, numeric
# libraries' thread pools): a different value needs a different server.  Everything else in the
# environment is the command's own and is handed to the child as is.  Not OPENBLAS_*: pfs sets its
# thread count to 1 before numpy's import in every process, and does no linear algebra.
# TZ is not keyed: the child calls tzset() with the command's own environment (a key per value would mean a
# server per value).
_KEYED_PREFIXES = ("PYTHON", "LD_", "MALLOC_", "ARROW_", "OMP_", "MKL_", "LC_", "PFS_SERVER")
_KEYED_NAMES = ("LANG", "LANGUAGE", "VIRTUAL_ENV")
_STATUS_FIELDS = (
    "Uid",
    "Gid",
    "Groups",
    "CapInh",
    "CapPrm",
    "CapEff",
    "CapBnd",
    "CapAmb",
    "NoNewPrivs",
    "Seccomp",
    "Seccomp_filters",
    "Cpus_allowed_list",
    "Mems_allowed_list",
)
_NAMESPACES = ("mnt", "pid", "net", "user", "uts", "ipc", "cgroup", "time")
_PACKAGES = ("dask_pfs", "operators")
# Compared between client and server (equal, or the command runs in its own process) but not keyed: a
# ``nice``d or ``ulimit``ed command runs itself rather than starting a server of its own.
COMPARED_ONLY = ("Cpus_allowed_list", "Mems_allowed_list", "sched", "oom_score_adj", "limits", "ioprio")
_DIST_SUFFIXES = (".dist-info", ".egg-info", ".pth", ".egg-link")
# ioprio_get(2) by machine; another machine's I/O priority cannot be read, so it is never served
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31, "ppc64le": 274, "s390x": 283, "riscv64": 31}


def socket_path_base() -> str:
    """``$XDG_RUNTIME_DIR/pfs`` (or ``/tmp/pfs-UID``), whether or not it exists or may be used."""
    uid = os.getuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _private_dir(runtime, uid):
        return os.path.join(runtime, "pfs")
    # where dask_pfs.runtime.locking keeps its locks (tempfile.gettempdir(), without its imports)
    tmp = next((d for d in map(os.environ.get, ("TMPDIR", "TEMP", "TMP")) if d and os.path.isdir(d)), "/tmp")
    return os.path.join(tmp, f"pfs-{uid}")


def socket_dir(create: bool = True) -> str | None:
    """:func:`socket_path_base`, only if it is a directory of this user's that nobody else may enter;
    None otherwise (the command then runs in its own process)."""
    uid = os.getuid()
    base = socket_path_base()
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
    with open(f"{proc}/stat", "rb") as f:
        stat_fields = f.read().rpartition(b")")[2].split()
    # nice (19), rt_priority (40), policy (41), counted from 1 with pid and comm before ")"
    fields["sched"] = [int(stat_fields[16]), int(stat_fields[37]), int(stat_fields[38])]
    with open(f"{proc}/oom_score_adj", "rb") as f:
        fields["oom_score_adj"] = int(f.read())
    with open(f"{proc}/limits", encoding="ascii", errors="replace") as f:
        fields["limits"] = f.read()
    fields["ioprio"] = ioprio(int(pid) if pid != "self" else 0)
    return fields


def ioprio(pid: int) -> int | None:
    """The I/O scheduling class and level of ``pid`` (0: this process), None if it cannot be read."""
    import ctypes
    import platform

    number = _IOPRIO_GET.get(platform.machine())
    if number is None:
        return None
    value = int(ctypes.CDLL(None, use_errno=True).syscall(number, 1, pid))  # IOPRIO_WHO_PROCESS
    return None if value < 0 else value


def import_path() -> list[str]:
    """``sys.path`` without a working directory: not ``sys.path[0]`` (the script's directory, or the
    working directory of ``python -m``/``-c``) unless ``-P``, and no relative entry (relative to the cwd)."""
    entries = sys.path if sys.flags.safe_path else sys.path[1:]
    return [entry for entry in entries if os.path.isabs(entry)]


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
    path = import_path()
    flags = [getattr(sys.flags, name) for name in dir(sys.flags) if not name.startswith(("_", "safe_path", "n_"))]
    return {
        "executable": sys.executable,
        "version": sys.version,
        "flags": [f for f in flags if not callable(f)],
        "xoptions": sorted(map(str, sys._xoptions.items())),
        "warnoptions": list(sys.warnoptions),
        "path": path,
        "packages": places,
        "newest": newest,
        "files": count,
        "distributions": _distributions(path),
    }


def _distributions(path: list[str]) -> list:
    """Every distribution installed where the command imports from (name and mtime of its metadata
    directory, of ``.pth`` files, of zip entries): an upgrade of click, pyarrow or DuckDB is another key."""
    found: list = []
    for entry in path:
        try:
            if os.path.isfile(entry):  # a zip or egg on the path
                st = os.stat(entry)
                found.append([entry, st.st_mtime_ns, st.st_size])
                continue
            with os.scandir(entry) as entries:
                for item in entries:
                    if item.name.endswith(_DIST_SUFFIXES):
                        st = item.stat(follow_symlinks=False)
                        found.append([entry, item.name, st.st_mtime_ns, st.st_ctime_ns])
        except OSError:
            found.append([entry, None])
    return sorted(found, key=str)


def _find(package: str) -> str | None:
    for entry in import_path():
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


def keyed_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k.startswith(_KEYED_PREFIXES) or k in _KEYED_NAMES}


def server_key(context: dict | None = None) -> str:
    """The name of the server this process may use (the same in the server that it starts);
    ``context``: this process's :func:`context_of`, when the caller has read it already."""
    mine = context if context is not None else context_of()
    keyed = {k: v for k, v in mine.items() if k not in COMPARED_ONLY}
    blob = json.dumps(
        [keyed, _install(), sorted(keyed_environment().items()), os.getuid()],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()[:24]
