"""Shared helpers for the benchmark scripts: cold caches, timing a command, host load, tables."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAS = Path(os.environ.get("PFS_NAS", REPO.parent / "shared" / "nas"))  # the harness (../shared/nas of the main clone)
PFS = [str(REPO / ".venv" / "bin" / "pfs")]


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies from /proc/stat, for the host busy % over a run."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


NAS_PROCESSES = ("glusterfsd", "glusterfs", "glusterd", "netdelay", "sshd", "sftp-server", "sshfs")


def _proc_stat(wanted) -> dict[int, list[str]]:
    """``/proc/PID/stat`` fields after the command name, of every process ``wanted(pid, name)`` keeps."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
            if wanted(pid, text[text.index("(") + 1 : text.rindex(")")]):
                out[int(pid)] = text[text.rindex(")") + 2 :].split()
        except OSError:
            continue
    return out


def process_cpu(names: tuple[str, ...] = NAS_PROCESSES) -> dict[int, float]:
    """CPU seconds (user + system) so far of every process whose command name is in ``names``, by pid:
    the NAS harness's bricks, FUSE clients and delay link, which share the host's cores with the tool."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = _proc_stat(lambda _pid, name: name in names)
    return {pid: (int(f[11]) + int(f[12])) / tick for pid, f in stats.items()}


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


SERVED_CPU = re.compile(r"^pfs: server job cpu ([0-9.]+) s$", re.M)


def measured_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with ``PFS_SERVER_CPU=1``: a ``pfs`` command served by a warm server
    (``dask_pfs.warm``) runs in a child of that server, outside the client's process tree; with this set the
    client prints the CPU of its own served child (the server's ``wait4`` of it) on stderr."""
    return {**(os.environ if env is None else env), "PFS_SERVER_CPU": "1"}


def served_cpu(stderr: str | bytes | None) -> float:
    """CPU seconds of the served children that the ``pfs`` clients writing ``stderr`` reported (``measured_env``).
    Only the children that ran these commands count: not other users' servers, nor other commands meanwhile."""
    if isinstance(stderr, bytes):
        stderr = stderr.decode(errors="replace")
    return sum(float(m) for m in SERVED_CPU.findall(stderr or ""))


class CpuMeter:
    """CPU seconds used during a ``with`` block: by the commands it ran and waited for (``cpu_s``: all their
    processes, plus what ``count_served`` adds for commands a warm server ran) and by the NAS harness
    meanwhile (``nas_cpu_s``; new processes count from zero)."""

    def __enter__(self) -> CpuMeter:
        self._children, self._nas = children_cpu(), process_cpu()
        self._served = 0.0
        return self

    def __exit__(self, *exc) -> None:
        self._own = children_cpu() - self._children
        self.nas_cpu_s = sum(cpu - self._nas.get(pid, 0.0) for pid, cpu in process_cpu().items())

    def count_served(self, stderr: str | bytes | None) -> None:
        """Add the CPU of the served children reported on ``stderr`` of commands run with ``measured_env``."""
        self._served += served_cpu(stderr)

    @property
    def cpu_s(self) -> float:
        return self._own + self._served

    def fields(self) -> dict:
        return {"cpu_s": round(self.cpu_s, 2), "nas_cpu_s": round(self.nas_cpu_s, 2)}


def drop_caches(path: str) -> str:
    """Cold caches: remount the NAS clients for paths under /mnt/nas*, else drop the kernel caches."""
    if path.startswith("/mnt/nas") and (NAS / "nas.sh").exists():
        r = subprocess.run([str(NAS / "nas.sh"), "remount"], capture_output=True, text=True)
        if r.returncode == 0:
            time.sleep(1)
            return "remount"
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "drop_caches"
    except OSError:
        return "warm"


@dataclass
class Run:
    tool: str
    seconds: float
    busy: float
    caches: str
    rc: int
    max_rss_kb: int | None = None
    stdout: str = ""  # only with capture=True (pfs --json summaries, find's lines)
    stderr: str = ""
    timed_out: bool = False  # killed at ``timeout``: ``seconds`` is a lower bound
    cpu_s: float | None = None  # the command's own CPU seconds (user + system, all its processes)
    nas_cpu_s: float | None = None  # the NAS harness's CPU seconds meanwhile (common.NAS_PROCESSES)


def timed(
    tool: str,
    cmd: list[str] | str,
    cache_path: str | None,
    shell: bool = False,
    capture: bool = False,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> Run:
    """Run ``cmd`` once (cold unless ``cache_path`` is None) and time it; ``capture`` keeps its stdout.

    ``timeout``: kill the command's whole process group after that many seconds (a serial tool at 5 ms
    can take longer than the network client stays up); the run's seconds are then a lower bound.
    """
    caches = drop_caches(cache_path) if cache_path else "warm"
    b0, t0c = cpu_times()
    t0 = time.monotonic()
    wrapped = ["/usr/bin/time", "-f", "%M", "-o", "/tmp/pfs-bench-rss"] + (["sh", "-c", cmd] if shell else list(cmd))
    out = subprocess.PIPE if capture else subprocess.DEVNULL
    with CpuMeter() as meter:
        proc = subprocess.Popen(
            wrapped, stdout=out, stderr=subprocess.PIPE, text=True, env=measured_env(env), start_new_session=True
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            timed_out = True
        meter.count_served(stderr)
    seconds = time.monotonic() - t0
    b1, t1c = cpu_times()
    try:
        rss = int(Path("/tmp/pfs-bench-rss").read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        rss = None
    if timed_out:
        print(f"  {tool}: killed after {timeout:g} s", file=sys.stderr)
    elif proc.returncode not in (0, 1):
        print(f"  {tool}: exit {proc.returncode}: {(stderr or '').strip()[-300:]}", file=sys.stderr)
    busy = 100 * (b1 - b0) / max(t1c - t0c, 1)
    return Run(
        tool, seconds, busy, caches, proc.returncode, rss, stdout or "", stderr or "", timed_out, **meter.fields()
    )


def loadavg() -> float:
    return os.getloadavg()[0]


def table(rows: list[Run], baseline: str, n_files: int) -> str:
    base = next((r.seconds for r in rows if r.tool == baseline), None)
    out = [
        f"| tool | seconds | files/s | x vs {baseline} | host busy % | caches |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        ratio = f"{base / r.seconds:.2f}" if base else "-"
        out.append(
            f"| `{r.tool}` | {r.seconds:.2f} | {n_files / r.seconds:,.0f} | {ratio} | {r.busy:.0f} | {r.caches} |"
        )
    return "\n".join(out)


def quote(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


@contextlib.contextmanager
def moto_server(log: Path) -> Iterator[str]:
    """A moto S3 server (this venv's ``moto_server``) on a free loopback port, its log (the requests it
    served, which benchmarks count) in ``log``; yields its endpoint URL and stops it after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with log.open("w") as err:
        srv = subprocess.Popen(
            [Path(sys.executable).parent / "moto_server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        time.sleep(3)
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.terminate()
        srv.wait()
