"""Issue 43: a command served by the warm server is indistinguishable from the same command in its own
process, or it runs in its own process.  One test per reproduction of the issue (numbered as there), and
one differential test that runs the same commands served and with ``PFS_SERVER=off`` under each context."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import DROP_DAC, PFS, make_balanced, tree_digest
from .test_warm_server import _alive, paced_cp, pfs, served, start, warm, within

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc, pidfds, Landlock")
assert warm  # the fixture, used by name

BLOCK_SIGNALS = (
    "import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT}); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def sh(env: dict, script: str, *args, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``bash -c SCRIPT bash ARGS...``: a context a user's shell would give the command."""
    return subprocess.run(
        ["bash", "-c", script, "bash", *map(str, args)], env=env, cwd=cwd, capture_output=True, timeout=timeout
    )


def manifest(env: dict, tmp_path: Path, files: int = 3) -> Path:
    src = tmp_path / "src"
    make_balanced(src, dirs=1, files_per_dir=files)
    out = tmp_path / "m"
    pfs({**env, "PFS_SERVER": "off"}, "scan", src, "-o", out, "--no-progress", check=True)
    return out


def server_children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0].decode()
    except OSError:
        return "gone"


class Shell:
    """An interactive bash on a pseudo-terminal (job control, Ctrl-Z, ``fg``, a background job)."""

    def __init__(self, env: dict, cwd: Path) -> None:
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(cwd)
            os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], {**env, "PS1": "$ ", "TERM": "dumb"})
        self.pid, self.fd, self.out = pid, fd, b""

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def expect(self, pattern: str, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern.encode())
        while not regex.search(self.out):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if select.select([self.fd], [], [], left)[0]:
                try:
                    self.out += os.read(self.fd, 65536)
                except OSError:
                    return bool(regex.search(self.out))
        return True

    def close(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def command_line(*args) -> str:
    return " ".join(f"'{a}'" for a in [*PFS, *map(str, args)])


# 1
def test_01_an_argument_naming_a_descriptor_is_the_clients_descriptor(warm, tmp_path):
    m = manifest(warm, tmp_path)
    expected = pfs({**warm, "PFS_SERVER": "off"}, "query", m, "--format", "csv", "--select", "path").stdout
    start(warm)
    out = tmp_path / "out.csv"
    for spelling in (["--output=/dev/fd/3"], ["-o/dev/fd/3"], ["--output=/proc/self/fd/3"], ["-o", "/dev//./fd/3"]):
        args = [*PFS, "query", m, "--format", "csv", "--select", "path", *spelling]
        proc = sh(warm, 'exec "$@" 3>"$0.out"'.replace("$0.out", str(out)), *args)
        assert proc.returncode == 0 and not served(proc), (spelling, proc.stderr)
        assert out.read_bytes() == expected, spelling
    after = pfs(warm, "query", m, "--select", "count(*)")
    assert after.returncode == 0 and after.stdout.split()[-1] == b"5", after.stderr  # no part overwritten


# 2
def test_02_a_background_rm_does_not_read_the_terminal(warm, tmp_path):
    start(warm)
    victim = tmp_path / "victim"
    make_balanced(victim, dirs=1, files_per_dir=2)
    shell = Shell(warm, tmp_path)
    try:
        assert shell.expect(r"\$ ")
        shell.send(command_line("rm", victim) + " &\n")
        time.sleep(3)
        shell.send("echo typed-$((40+2))\n")
        assert shell.expect("typed-42"), shell.out  # the shell got its line, not the background command
        shell.send("y\n")
        time.sleep(2)
        shell.send("jobs -l; echo listed-$((1+1))\n")
        assert shell.expect("listed-2")
        assert re.search(rb"Stopped.*\(tty input\)|Stopped", shell.out), shell.out
        assert victim.is_dir() and len(list(victim.rglob("*.dat"))) == 2
    finally:
        shell.close()


LANDLOCK_THEN_EXEC = """
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
handled = (1 << 1) | (1 << 4) | (1 << 5) | (1 << 7) | (1 << 8)  # write file, remove dir/file, make reg/dir
attr = ctypes.create_string_buffer(struct.pack("Q", handled))
fd = libc.syscall(444, attr, 8, 0)  # landlock_create_ruleset: no rule, so all of these are denied
assert fd >= 0, os.strerror(ctypes.get_errno())
assert libc.syscall(446, fd, 0) == 0, os.strerror(ctypes.get_errno())  # restrict_self (root: no no_new_privs)
os.execv(sys.argv[1], sys.argv[1:])
"""

HAND_MADE = """
import json, os, socket, sys
path, key, server = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_UNIX); s.connect(path)
try:
    proof = os.open(f"/proc/{server}/fdinfo/0", os.O_RDONLY)
except OSError:
    proof = os.open("/proc/self/fdinfo/0", os.O_RDONLY)  # all a confined process can offer
request = {"op": "run", "key": key, "argv": ["pfs", "rm", "--yes", sys.argv[4]], "env": dict(os.environ),
           "umask": 18, "streams": [0, 1, 2]}
try:
    socket.send_fds(s, [json.dumps(request).encode() + b"\\n"], [0, 1, 2, os.open(".", os.O_RDONLY), proof])
except BrokenPipeError:
    pass
print(s.makefile().readline())
"""


def landlock_available() -> bool:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1) >= 1


# 3
@pytest.mark.skipif(not landlock_available(), reason="no Landlock in this kernel")
def test_03_confinement_the_server_cannot_see_is_never_served(warm, tmp_path):
    server = start(warm)
    sock_path = Path(warm["XDG_RUNTIME_DIR"]) / "pfs" / f"{server['key']}.sock"
    victim = tmp_path / "victim"
    make_balanced(victim, dirs=1, files_per_dir=2)
    confined = [sys.executable, "-c", LANDLOCK_THEN_EXEC, sys.executable]
    # through the pfs client: it runs in its own, confined process
    proc = subprocess.run([*confined, *PFS[1:], "rm", "--yes", str(victim)], env=warm, capture_output=True)
    assert not served(proc) and proc.returncode != 0, proc.stderr
    assert len(list(victim.rglob("*.dat"))) == 2
    # a hand-made request with the key from the socket's name: refused before anything runs
    args = ["-c", HAND_MADE, str(sock_path), server["key"], str(server["pid"]), str(victim)]
    reply = json.loads(subprocess.run([*confined, *args], env=warm, capture_output=True, timeout=60).stdout)
    assert reply["op"] == "refused" and "proof" in reply["why"], reply
    assert len(list(victim.rglob("*.dat"))) == 2
    # a hard file-size limit (the non-root `ulimit -f 1`), and a seccomp filter
    limited = ["bash", "-c", 'ulimit -f 1 && exec "$@"', "bash", sys.executable]
    answer = subprocess.run([*limited, *args], env=warm, capture_output=True, timeout=60)
    assert answer.stdout.strip(), answer.stderr
    reply = json.loads(answer.stdout)
    assert reply["op"] == "refused" and "limits" in reply["why"], reply
    assert len(list(victim.rglob("*.dat"))) == 2
    filtered = subprocess.run(
        [*DROP_DAC[:1], "--no-new-privs", *PFS, "--version"], env=warm, capture_output=True, timeout=60
    )
    assert filtered.returncode == 0 and not served(filtered)  # no_new_privs differs from the server's


# 4
def test_04_the_server_never_imports_from_the_working_directory(warm, tmp_path):
    untrusted = tmp_path / "untrusted"
    untrusted.mkdir()
    marker = tmp_path / "planted-ran"
    (untrusted / "duckdb.py").write_text(f"import os\nopen({str(marker)!r}, 'a').write(f'{{os.getpid()}}\\n')\n")
    env = {**warm, "PFS_SERVER": "on"}
    first = subprocess.run([*PFS, "--version"], env=env, cwd=untrusted, capture_output=True, timeout=60)
    assert first.returncode == 0, first.stderr

    def up() -> bool:
        return any(s.get("this_environment") for s in json.loads(pfs(env, "cluster", "status", "--json").stdout))

    assert within(60, up)
    server = next(s for s in json.loads(pfs(env, "cluster", "status", "--json").stdout) if s["this_environment"])
    cmdline = Path(f"/proc/{server['pid']}/cmdline").read_bytes().split(b"\0")
    assert str(untrusted).encode() not in b"\0".join(cmdline)
    assert not marker.exists() or str(server["pid"]) not in marker.read_text().split()
    m = manifest(warm, tmp_path)
    proc = pfs(env, "query", m, "--select", "count(*)", cwd=untrusted)
    assert proc.returncode == 0 and served(proc), proc.stderr
    assert not marker.exists() or str(server["pid"]) not in marker.read_text().split()


# 5
def test_05_ctrl_z_and_fg_stop_and_resume_the_served_command(warm, tmp_path):
    src = tmp_path / "src"
    make_balanced(src, dirs=4, files_per_dir=50)
    server = start(warm)
    shell = Shell(warm, tmp_path)
    try:
        assert shell.expect(r"\$ ")
        cmd = command_line("cp", f"{src}/", tmp_path / "c", "--no-progress", "--max-ops-per-second", "100")
        shell.send(cmd + "\n")
        assert within(30, lambda: server_children(server["pid"]) != [])
        child = server_children(server["pid"])[0]
        time.sleep(1)
        shell.send("\x1a")  # Ctrl-Z
        assert shell.expect("Stopped"), shell.out
        assert within(10, lambda: state(child) == "T")
        copied = len(list((tmp_path / "c").rglob("*.dat")))
        time.sleep(1.5)
        assert len(list((tmp_path / "c").rglob("*.dat"))) == copied  # nothing moves while stopped
        shell.send("fg\n")
        shell.send("echo rc=$?\n")  # read by the shell once the job ends (a stopped list loses its tail)
        assert shell.expect("rc=0", timeout=120), shell.out
        assert len(list((tmp_path / "c").rglob("*.dat"))) == 200
    finally:
        shell.close()


def test_05_a_killed_stopped_client_leaves_no_stopped_child_and_the_server_idles_out(warm, tmp_path):
    src = tmp_path / "src"
    make_balanced(src, dirs=4, files_per_dir=50)
    env = {**warm, "PFS_SERVER_IDLE": "3"}
    server = start(env)
    cmd = [*PFS, "cp", f"{src}/", str(tmp_path / "c"), "--no-progress", "--max-ops-per-second", "50"]
    # its own process group under this one (not orphaned: SIGTSTP stops it, as a script's job)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0)
    assert within(30, lambda: server_children(server["pid"]) != [])
    child = server_children(server["pid"])[0]
    proc.send_signal(signal.SIGTSTP)  # no terminal: kill -TSTP, then -CONT
    assert within(10, lambda: state(child) == "T")
    proc.send_signal(signal.SIGCONT)
    assert within(10, lambda: state(child) not in ("T", "gone"))
    proc.send_signal(signal.SIGSTOP)
    assert within(10, lambda: state(child) == "T")
    proc.kill()
    proc.wait()
    assert within(20, lambda: state(child) == "gone")
    assert within(60, lambda: not _alive(server["pid"]))


# 6
def test_06_nohup_and_an_ignored_sigint_are_kept(warm, tmp_path):
    src = tmp_path / "src"
    make_balanced(src, dirs=2, files_per_dir=50)
    start(warm)
    cp = [*PFS, "cp", f"{src}/", "DST", "--no-progress", "--max-ops-per-second", "50"]
    for name, script in (
        ("hup", 'nohup "$@" >/dev/null 2>&1 & pid=$!; sleep 1; kill -HUP $pid; wait $pid; echo rc=$?'),
        ("int", '"$@" >/dev/null 2>&1 & pid=$!; sleep 1; kill -INT $pid; wait $pid; echo rc=$?'),  # sh: & ignores INT
    ):
        dst = tmp_path / name
        proc = sh(warm, script, *[str(dst) if a == "DST" else a for a in cp], timeout=180)
        assert proc.stdout.strip() == b"rc=0", (name, proc.stdout, proc.stderr)
        assert len(list(dst.rglob("*.dat"))) == 100


# 7
def test_07_priorities_affinity_and_blocked_signals_are_not_taken_from_the_server(warm, tmp_path):
    m = manifest(warm, tmp_path)
    start(warm)
    niced = sh(warm, 'exec nice -n 15 taskset -c 0 "$@"', *PFS, "query", m, "--select", "count(*)")
    assert niced.returncode == 0 and not served(niced), niced.stderr
    pfs(warm, "cluster", "stop", check=True)
    other = {**warm}
    sh(other, 'exec nice -n 19 ionice -c3 "$@"', *PFS, "cluster", "start").check_returncode()
    plain = pfs(warm, "query", m, "--select", "count(*)")
    assert plain.returncode == 0 and not served(plain), plain.stderr  # runs at nice 0, here
    pfs(warm, "cluster", "stop", check=True)
    assert within(30, lambda: not list((Path(warm["XDG_RUNTIME_DIR"]) / "pfs").glob("*.sock")))
    subprocess.run([sys.executable, "-c", BLOCK_SIGNALS, *PFS, "cluster", "start"], env=warm, check=True)
    src = tmp_path / "src2"
    make_balanced(src, dirs=2, files_per_dir=100)
    t0 = time.monotonic()
    args = [*PFS, "cp", f"{src}/", tmp_path / "c", "--no-progress", "--max-ops-per-second", "20"]
    timed = sh(warm, 'exec timeout 3 "$@"', *args)
    assert timed.returncode == 124 and served(timed), timed.stderr  # SIGTERM reached the served child
    assert time.monotonic() - t0 < 30


# 8
def test_08_a_refused_output_is_one_error_line_in_both_modes(warm, tmp_path):
    m = manifest(warm, tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chown(locked, 65534, 65534)
    sh(warm, 'exec "$@"', *DROP_DAC, *PFS, "cluster", "start").check_returncode()
    for mode in ("on", "off"):
        env = {**warm, "PFS_SERVER": mode}
        proc = sh(env, 'exec "$@"', *DROP_DAC, *PFS, "query", m, "--format", "csv", "-o", locked / "x.csv")
        lines = proc.stderr.decode().splitlines()
        errors = [line for line in lines if not line.startswith("pfs: server job cpu")]
        assert proc.returncode == 2 and len(errors) == 1 and errors[0].startswith("pfs: error:"), (mode, lines)
        # the one writer refuses the directory (another user's) before the open would: either names why
        assert "ermission denied" in errors[0] or "belongs to uid 65534" in errors[0], errors
        assert served(proc) == (mode == "on")
        full = sh(env, 'exec "$@" > /dev/full', *PFS, "query", m, "--format", "csv", "--select", "path")
        errors = [line for line in full.stderr.decode().splitlines() if "server job cpu" not in line]
        assert full.returncode == 2 and errors == ["pfs: error: standard output: no space left on device"], (
            mode,
            full.stderr,
        )


# 9
def test_09_a_closed_stdout_is_not_the_control_socket(warm, tmp_path):
    src = tmp_path / "src"
    make_balanced(src, dirs=1, files_per_dir=2)
    start(warm)
    results = {}
    for mode in ("on", "off"):
        proc = sh({**warm, "PFS_SERVER": mode}, 'exec "$@" >&-', *PFS, "scan", src, "-o", tmp_path / mode)
        results[mode] = proc.returncode
        assert not served(proc)
    assert results["on"] == results["off"]


# 10
def test_10_the_key_covers_every_installed_distribution(warm, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    env = {**warm, "PYTHONPATH": f"{warm['PYTHONPATH']}:{site}"}
    key = [sys.executable, "-c", "from dask_pfs.warm import identity; print(identity.server_key())"]
    before = subprocess.run(key, env=env, capture_output=True, check=True).stdout
    (site / "somelib-1.0.dist-info").mkdir()
    upgraded = subprocess.run(key, env=env, capture_output=True, check=True).stdout
    assert upgraded != before
    (site / "somelib-1.0.dist-info").rename(site / "somelib-1.1.dist-info")
    assert subprocess.run(key, env=env, capture_output=True, check=True).stdout not in (before, upgraded)


# 11
def test_11_idle_connections_hold_up_nobody(warm, tmp_path):
    m = manifest(warm, tmp_path)
    server = start(warm)
    path = str(Path(warm["XDG_RUNTIME_DIR"]) / "pfs" / f"{server['key']}.sock")
    idle = []
    for _ in range(3):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        idle.append(s)
    proc = pfs(warm, "query", m, "--select", "count(*)")
    assert proc.returncode == 0 and served(proc), proc.stderr
    for s in idle:  # still open: the server has not had to give up on them to serve the query
        s.setblocking(False)
        with pytest.raises(BlockingIOError):
            s.recv(1)
        s.close()


# 12
def test_12_settings_servers_and_a_dying_server(warm, tmp_path):
    m = manifest(warm, tmp_path)
    start(warm)
    for tz in ("UTC", "Asia/Tokyo", "America/New_York", "Europe/Paris", "Australia/Sydney"):
        proc = pfs({**warm, "TZ": tz}, "query", m, "--select", "count(*)")
        assert proc.returncode == 0 and served(proc), proc.stderr
    assert len(list((Path(warm["XDG_RUNTIME_DIR"]) / "pfs").glob("*.sock"))) == 1
    bad = pfs({**warm, "PFS_SERVER_IDLE": "abc"}, "query", m, "--select", "count(*)")
    assert bad.returncode == 2 and bad.stderr.decode().splitlines() == [
        "pfs: error: PFS_SERVER_IDLE='abc': expected a positive number of seconds"
    ]
    bad_start = pfs({**warm, "PFS_SERVER_IDLE": "abc"}, "cluster", "start")
    assert bad_start.returncode == 2 and len(bad_start.stderr.splitlines()) == 1, bad_start.stderr
    # a runtime directory the server's files cannot be written to
    run_dir = tmp_path / "ro-run"
    (run_dir / "pfs").mkdir(parents=True, mode=0o700)
    run_dir.chmod(0o700)
    (run_dir / "pfs").chmod(0o500)
    ro = subprocess.run(
        [*DROP_DAC, *PFS, "cluster", "start"],
        env={**warm, "XDG_RUNTIME_DIR": str(run_dir)},
        capture_output=True,
        timeout=60,
    )
    assert ro.returncode == 2 and ro.stderr.startswith(b"pfs: error: cannot start a server"), ro.stderr
    assert len(ro.stderr.splitlines()) == 1 and b"Traceback" not in ro.stderr
    # the server killed mid-command: the command's own exit status
    src = tmp_path / "src2"
    make_balanced(src, dirs=2, files_per_dir=50)
    server = next(s for s in json.loads(pfs(warm, "cluster", "status", "--json").stdout) if s["this_environment"])
    proc = paced_cp(warm, src, tmp_path / "c", ops_per_second=50)
    assert within(30, lambda: server_children(server["pid"]) != [])
    os.kill(server["pid"], signal.SIGKILL)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert len(list((tmp_path / "c").rglob("*.dat"))) == 100


# The differential test: the same commands served (PFS_SERVER=on, a server running) and in their own
# process (PFS_SERVER=off) under each context; exit status, stdout, stderr and effects on disk compared.
CONTEXTS = {
    "plain": 'exec "$@"',
    "nohup": 'exec nohup "$@"',
    "nice ionice taskset": 'exec nice -n 10 ionice -c3 taskset -c 0 "$@"',
    "ignored signals": 'trap "" INT USR1; exec "$@"',
    "blocked signals": f'exec {sys.executable} -c "{BLOCK_SIGNALS}" "$@"',
    "closed stdin": 'exec "$@" <&-',
    "closed stdout": 'exec "$@" >&-',
    "closed stderr": 'exec "$@" 2>&-',
    "ulimit -f": 'ulimit -f 1; exec "$@"',
    "LC_ALL and TZ": 'LC_ALL=C.UTF-8 TZ=Asia/Tokyo exec "$@"',
    "fd 3 output": 'exec "$@" 3>fd3.out',
}


def _outcome(proc: subprocess.CompletedProcess, cwd: Path) -> tuple:
    def same(text: bytes) -> bytes:  # this run's directory and timings aside
        text = text.replace(os.fsencode(cwd), b"CWD")
        return re.sub(rb"in [0-9.]+ s \([0-9.]+ MB/s", b"in T s (R MB/s", text)

    err = b"\n".join(line for line in proc.stderr.splitlines() if b"pfs: server job cpu" not in line)
    disk = {}
    for rel, kind in tree_digest(cwd).items():  # a job's journal: its random name and its own record aside
        journal = re.sub(rb"\.pfs-journal-[0-9a-f]+", b".pfs-journal-ID", rel)
        disk[journal] = kind[:1] if journal != rel else kind
    return proc.returncode, same(proc.stdout), same(err), disk


def test_differential_served_and_own_process_agree_under_every_context(warm, tmp_path):
    src = tmp_path / "src"
    make_balanced(src, dirs=2, files_per_dir=20)
    m = tmp_path / "m"
    pfs({**warm, "PFS_SERVER": "off"}, "scan", src, "-o", m, "--no-progress", check=True)
    start(warm)
    # LC_ALL and TZ are in a server's key: started here, not left to the first command's background start
    # (on a loaded host that server was not up before the context's last command: nothing served to compare)
    start({**warm, "LC_ALL": "C.UTF-8", "TZ": "Asia/Tokyo"})
    commands = {
        "query": ["query", m, "--format", "csv", "--select", "path, size", "--order", "path"],
        "query fd 3": ["query", m, "--format", "csv", "--select", "path", "--output=/dev/fd/3"],
        "cp": ["cp", f"{src}/", "copy", "--no-progress"],
    }
    served_somewhere = set()
    for context, wrapper in CONTEXTS.items():
        for name, args in commands.items():
            outcomes = {}
            for mode in ("on", "off"):
                cwd = tmp_path / "runs" / f"{len(served_somewhere)}-{context}-{name}-{mode}".replace(" ", "_")
                cwd.mkdir(parents=True)
                proc = sh({**warm, "PFS_SERVER": mode}, wrapper, *PFS, *args, cwd=cwd)
                if served(proc):
                    served_somewhere.add(context)
                outcomes[mode] = _outcome(proc, cwd)
            assert outcomes["on"] == outcomes["off"], (context, name)
    assert {"plain", "LC_ALL and TZ"} <= served_somewhere  # the comparison did compare served commands
    assert not served_somewhere & {"nohup", "ignored signals", "blocked signals", "closed stdout", "ulimit -f"}


def test_differential_on_a_terminal_background_job_and_ctrl_z_fg(warm, tmp_path):
    src = tmp_path / "src"
    make_balanced(src, dirs=2, files_per_dir=50)
    m = tmp_path / "m"
    pfs({**warm, "PFS_SERVER": "off"}, "scan", src, "-o", m, "--no-progress", check=True)
    start(warm)
    results = {}
    for mode in ("on", "off"):
        shell = Shell({**warm, "PFS_SERVER": mode}, tmp_path)
        try:
            assert shell.expect(r"\$ ")
            query = command_line("query", m, "--format", "csv", "--select", "path", "--order", "path")
            shell.send(f"{query} > bg.{mode} 2> bg-err.{mode} & wait $!; echo bg-rc=$?\n")
            assert shell.expect(r"bg-rc=\d+"), shell.out
            cp = command_line("cp", f"{src}/", f"copy-{mode}", "--no-progress", "--max-ops-per-second", "50")
            shell.send(f"{cp}\n")
            time.sleep(2)
            shell.send("\x1a")
            assert shell.expect("Stopped"), shell.out
            shell.send("fg\n")
            shell.send("echo cp-rc=$?\n")
            assert shell.expect(r"cp-rc=\d+", timeout=120), shell.out
            rcs = re.findall(rb"(bg|cp)-rc=(\d+)", shell.out)
        finally:
            shell.close()
        errors = (tmp_path / f"bg-err.{mode}").read_bytes().splitlines()
        results[mode] = (
            rcs,
            (tmp_path / f"bg.{mode}").read_bytes(),
            [e for e in errors if b"server job cpu" not in e],
            tree_digest(tmp_path / f"copy-{mode}"),
        )
    assert results["on"] == results["off"]


def test_a_command_in_a_make_recipe_is_served(warm, tmp_path):
    """GNU make runs its recipes with the C library's reserved signals (32 and 33) ignored; no program can
    use them, so a command run by ``make`` (as ``make test`` runs the suite in CI) is served like any other.
    Before, every such command ran in its own process ("a signal is ignored")."""
    m = manifest(warm, tmp_path)
    start(warm)
    makefile = tmp_path / "Makefile"
    command = " ".join(f"'{a}'" for a in [*PFS, "query", str(m), "--select", "count(*)"])
    makefile.write_text(f"run:\n\t@grep SigIgn /proc/self/status >&2\n\t@{command}\n")
    done = subprocess.run(["make", "-s", "-f", str(makefile)], env=warm, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ignored = int(re.search(rb"SigIgn:\s*([0-9a-f]+)", done.stderr).group(1), 16)
    assert ignored & (1 << 31), "this make passes signal 32 on ignored: the case this test is about"
    assert served(done), done.stderr
