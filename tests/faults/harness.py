"""Real faults for the fault-injection suite: a pfs process group to SIGKILL, a small tmpfs to fill,
and checks of what a fault must never leave behind (docs/reliability.md)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds

from ..conftest import PFS, REPO


def start_pfs(*args: object, env: dict | None = None, log: Path) -> subprocess.Popen:
    """``pfs ARGS`` in a new session (its own process group: the driver, the embedded scheduler and
    every worker process), output to ``log``."""
    # the command's own process, not a warm server's child: these tests find the driver, its scheduler and
    # workers under it, and stop or kill them (tests/test_warm_server.py kills a served command's client)
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_SERVER": "off", **(env or {})}
    out = open(log, "wb")  # noqa: SIM115 (closed when the process is reaped)
    proc = subprocess.Popen(
        [*PFS, *map(str, args)], stdout=out, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
    )
    proc.log_file = out  # type: ignore[attr-defined]
    return proc


def finish(proc: subprocess.Popen, timeout: float = 180) -> tuple[int, str]:
    """Wait for ``proc``; its exit code and output."""
    try:
        rc = proc.wait(timeout)
    finally:
        proc.log_file.close()  # type: ignore[attr-defined]
    return rc, Path(proc.log_file.name).read_text(errors="replace")  # type: ignore[attr-defined]


def kill_group(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGKILL the whole process group of ``proc`` and wait until none of it is left (a forked
    worker still alive would keep the destination's lock)."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    proc.wait(timeout)
    proc.log_file.close()  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process group {pgid} still alive {timeout} s after SIGKILL")


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``where`` for the block (unmounted however the block ends)."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def grow(mount: Path, size: str) -> None:
    """Free space the way an operator would: make the file system bigger (``mount -o remount``)."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)


def can_mount_tmpfs(tmp: Path) -> bool:
    probe = tmp / "probe-mount"
    probe.mkdir(exist_ok=True)
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True)
    if ok.returncode:
        return False
    subprocess.run(["umount", str(probe)], check=False)
    return True


def leftovers(root: Path) -> list[str]:
    """Temp files, journals and lock files a finished job must not leave in ``root``."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            if ".pfs-tmp-" in name or name.startswith(".pfs-journal-"):
                out.append(os.path.join(dirpath, name))
    return out


def manifest_paths(manifest: Path) -> list[bytes]:
    """Every row's path (bytes) of a manifest directory, duplicates kept."""
    table = ds.dataset(str(manifest), format="parquet").to_table(columns=["path", "path_raw"])
    paths, raws = table.column("path").to_pylist(), table.column("path_raw").to_pylist()
    return [raw if raw is not None else os.fsencode(p) for p, raw in zip(paths, raws, strict=True)]


def tree_paths(root: Path) -> set[bytes]:
    """Every entry below ``root`` (relative), directories included, the root itself not."""
    base = os.fsencode(root)
    out = set()
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), base))
    return out


class Latfs:
    """One latfs mount of ``backing`` on ``mnt``; its daemon's pid from ``run/pid``."""

    def __init__(self, binary: Path, backing: Path, mnt: Path, run: Path) -> None:
        self.binary, self.backing, self.mnt, self.run = binary, backing, mnt, run
        mnt.mkdir(exist_ok=True)

    def mount(self, rtt_us: int, *options: str) -> None:
        (self.run / "pid").unlink(missing_ok=True)
        args = [str(self.binary), "--rtt-us", str(rtt_us), "--run-dir", str(self.run), *options]
        args += [str(self.backing), str(self.mnt)]
        subprocess.run(args, check=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):  # not there yet, or still being written
                self.pid = int((self.run / "pid").read_text())
                return
            time.sleep(0.05)
        raise AssertionError(f"latfs did not start on {self.mnt}")

    def unmount(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
        subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True)  # whatever state it is in
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)

    def stats(self) -> dict[str, int]:
        """The mount's request counters (``op_NAME``, ``ops``), rewritten now (SIGUSR1) and read back."""
        path = self.run / "stats"

        def read() -> dict[str, int]:
            with contextlib.suppress(OSError):
                return {k: int(float(v)) for k, _, v in (line.partition(" ") for line in path.read_text().splitlines())}
            return {}

        seq = read().get("seq", 0)
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while (now := read()).get("seq", 0) <= seq and time.monotonic() < deadline:
            time.sleep(0.02)
        return now
