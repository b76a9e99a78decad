"""The warm server (dask_pfs.warm): commands run in its forked children exactly as in their own process,
and nobody but the same user with the same credentials and confinement can make it run anything."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import DROP_DAC, PFS, REPO, make_balanced

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SO_PEERCRED, pidfds and /proc")


@pytest.fixture
def warm(tmp_path: Path):
    """An environment with its own private runtime directory; its servers stop when it is removed."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k not in ("PFS_SERVER", "PFS_SERVER_DEBUG")}
    env.update({"XDG_RUNTIME_DIR": str(run_dir), "PYTHONPATH": str(REPO), "PFS_SERVER_CPU": "1", "PFS_SERVER": "on"})
    yield env
    for sock in (run_dir / "pfs").glob("*.sock"):
        sock.unlink()


def pfs(env: dict, *args, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*PFS, *map(str, args)], env=env, cwd=cwd, capture_output=True, timeout=120, **kw)


def start(env: dict) -> dict:
    pfs(env, "cluster", "start", check=True)
    status = json.loads(pfs(env, "cluster", "status", "--json", check=True).stdout)
    return next(s for s in status if s.get("this_environment"))


def served(proc: subprocess.CompletedProcess) -> bool:
    return b"pfs: server job cpu" in proc.stderr


def test_a_command_runs_in_the_server_with_the_clients_cwd_streams_and_exit_code(warm, tmp_path):
    src = tmp_path / "src"
    make_balanced(src, dirs=2, files_per_dir=3)
    server = start(warm)
    ok = pfs(warm, "scan", "src", "-o", "m", "--no-progress", cwd=tmp_path)  # relative to the client's cwd
    assert ok.returncode == 0, ok.stderr
    assert served(ok) and b": 10 entries" in ok.stdout
    assert (tmp_path / "m" / "_manifest.json").is_file()
    bad = pfs(warm, "scan", "missing", "-o", "m2", cwd=tmp_path)
    assert bad.returncode == 2 and served(bad)
    assert f"pfs: error: {tmp_path}/missing: no such file or directory".encode() in bad.stderr
    after = next(s for s in json.loads(pfs(warm, "cluster", "status", "--json").stdout) if s["this_environment"])
    assert after["pid"] == server["pid"] and after["served"] == server["served"] + 2


def test_environment_umask_and_non_utf8_names_reach_the_command(warm, tmp_path):
    src = tmp_path / "src"
    (src / os.fsdecode(b"caf\xe9")).mkdir(parents=True)
    (src / os.fsdecode(b"caf\xe9") / "f").write_text("x")
    start(warm)
    narrow = pfs({**warm, "COLUMNS": "50"}, "scan", "--help")
    wide = pfs({**warm, "COLUMNS": "150"}, "scan", "--help")
    assert served(narrow) and served(wide)
    assert max(map(len, narrow.stdout.splitlines())) <= 50 < max(map(len, wide.stdout.splitlines()))
    out = tmp_path / "out"
    proc = subprocess.run(
        ["sh", "-c", 'umask 077 && exec "$@"', "sh", *PFS, "cp", str(src) + "/", str(out), "--no-progress"],
        env=warm,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0 and served(proc), proc.stderr
    assert (out / os.fsdecode(b"caf\xe9") / "f").read_text() == "x"
    made = tmp_path / "made"
    proc = subprocess.run(
        ["sh", "-c", 'umask 077 && exec "$@"', "sh", *PFS, "scan", str(src), "-o", str(made), "--no-progress"],
        env=warm,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0 and served(proc)
    assert (made / "_manifest.json").stat().st_mode & 0o077 == 0  # the client's umask, not the server's 022


def test_ctrl_c_reaches_the_command_and_a_killed_client_kills_it(warm, tmp_path):
    src = tmp_path / "src"
    make_balanced(src, dirs=20, files_per_dir=100)
    server = start(warm)
    proc = paced_cp(warm, src, tmp_path / "c1", ops_per_second=50)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"pfs: interrupted" in err and b"Traceback" not in err and b"server job cpu" in err
    proc = paced_cp(warm, src, tmp_path / "c2", ops_per_second=50)
    time.sleep(3)
    assert _running(warm) == 1, proc.poll() is not None and proc.stderr.read()
    proc.kill()
    proc.wait()
    assert within(20, lambda: _running(warm) == 0)  # the child and its helpers went with their client
    assert _alive(server["pid"])


def paced_cp(env: dict, src: Path, dst: Path, ops_per_second: int) -> subprocess.Popen:
    """A copy slow enough to still be running when the test acts on it."""
    cmd = [*PFS, "cp", f"{src}/", str(dst), "--no-progress", "--max-ops-per-second", str(ops_per_second)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def within(seconds: float, done) -> bool:
    """Whether ``done()`` comes true within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _running(env: dict) -> int:
    status = json.loads(pfs(env, "cluster", "status", "--json").stdout)
    return next(s for s in status if s["this_environment"])["running"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_process_without_a_capability_never_runs_in_a_server_that_has_it(warm, tmp_path):
    """setpriv drops CAP_DAC_OVERRIDE: its pfs must get its own server, and a hand-made request from it to
    the full-capability server is refused before anything runs."""
    src = tmp_path / "src"
    (src / "locked").mkdir(parents=True)
    (src / "locked" / "f").write_text("x")
    (src / "locked").chmod(0)
    full = start(warm)
    dropped = subprocess.run(
        [*DROP_DAC, *PFS, "scan", str(src), "-o", str(tmp_path / "m"), "--no-progress"],
        env=warm,
        capture_output=True,
        timeout=120,
    )
    assert dropped.returncode == 1, dropped.stderr  # the unreadable directory is a counted failure
    sock_path = Path(warm["XDG_RUNTIME_DIR"]) / "pfs" / f"{full['key']}.sock"
    probe = (
        "import json, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
        "try:\n    s.sendall(json.dumps({'op': 'run', 'key': sys.argv[2], 'argv': ['pfs', '--version'], 'env': {},"
        " 'umask': 18, 'streams': []}).encode() + b'\\n')\n"
        "except BrokenPipeError:\n    pass  # the server answers and closes before reading a request it refuses\n"
        "print(s.makefile().readline())\n"
    )
    answer = subprocess.run(
        [*DROP_DAC, sys.executable, "-c", probe, str(sock_path), full["key"]], capture_output=True, timeout=60
    )
    assert answer.stdout, answer.stderr
    reply = json.loads(answer.stdout)
    assert reply["op"] == "refused" and "CapEff" in reply["why"], reply
    (src / "locked").chmod(0o755)


def test_another_user_is_refused_even_when_the_directory_lets_them_in(warm):
    """The 0700 directory keeps other users out; behind it the server checks SO_PEERCRED's uid too."""
    run_dir = Path(tempfile.mkdtemp(prefix="pfs-test-users-"))  # in /tmp: reachable once its mode allows
    env = {**warm, "XDG_RUNTIME_DIR": str(run_dir)}
    try:
        server = start(env)
        sock_path = run_dir / "pfs" / f"{server['key']}.sock"
        probe = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print('connect', e.errno); sys.exit()\n"
            'try:\n    s.sendall(b\'{"op": "status"}\\n\')\nexcept BrokenPipeError:\n    pass\n'
            "print(s.makefile().readline().strip())\n"
        )
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", probe]
        kept_out = subprocess.run([*nobody, str(sock_path)], capture_output=True, text=True, timeout=60)
        assert kept_out.stdout.strip() == "connect 13", kept_out  # EACCES
        run_dir.chmod(0o711)
        (run_dir / "pfs").chmod(0o711)
        sock_path.chmod(0o777)
        let_in = subprocess.run([*nobody, str(sock_path)], capture_output=True, text=True, timeout=60)
        assert let_in.stdout, let_in.stderr
        reply = json.loads(let_in.stdout)
        assert reply["op"] == "refused" and "uid 65534" in reply["why"], reply
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)  # its server leaves with its socket


def test_a_socket_planted_by_a_process_with_fewer_capabilities_is_not_used(warm, tmp_path):
    """A capability-dropped process of the same user listens under the full-capability client's key:
    the client checks the server's credentials from /proc, does not send it the command, runs it itself."""
    key = subprocess.run(
        [sys.executable, "-c", "from dask_pfs.warm import identity; print(identity.server_key())"],
        env=warm,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    where = Path(warm["XDG_RUNTIME_DIR"]) / "pfs"
    where.mkdir(mode=0o700, exist_ok=True)
    planted = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)\n"
        "print('ready', flush=True)\n"
        "c, _ = s.accept(); c.settimeout(5)\n"
        "try:\n    data = c.recv(65536)\nexcept OSError:\n    data = b''\n"
        "print('got', len(data), flush=True)\n"
    )
    fake = subprocess.Popen(
        [*DROP_DAC, sys.executable, "-c", planted, str(where / f"{key}.sock")], stdout=subprocess.PIPE, text=True
    )
    assert fake.stdout.readline().strip() == "ready"
    src = tmp_path / "src"
    make_balanced(src, dirs=1, files_per_dir=2)
    proc = pfs(warm, "scan", src, "-o", tmp_path / "m", "--no-progress")
    assert proc.returncode == 0 and not served(proc), proc.stderr  # ran in its own process
    assert fake.communicate(timeout=30)[0].strip() == "got 0"  # nothing was sent to the impostor


def test_an_unsafe_directory_means_no_server_and_the_command_still_runs(warm, tmp_path):
    run_dir = Path(warm["XDG_RUNTIME_DIR"])
    (run_dir / "pfs").mkdir(mode=0o777)
    (run_dir / "pfs").chmod(0o777)  # group/other-writable: anyone could plant a socket
    src = tmp_path / "src"
    make_balanced(src, dirs=1, files_per_dir=2)
    for _ in range(2):
        proc = pfs(warm, "scan", src, "-o", tmp_path / "m", "--overwrite", "--no-progress")
        assert proc.returncode == 0 and not served(proc), proc.stderr
    assert list((run_dir / "pfs").iterdir()) == []
    status = pfs(warm, "cluster", "status")
    assert status.returncode == 2 and b"no private directory" in status.stderr


def test_idle_server_leaves_and_cleans_up(warm):
    env = {**warm, "PFS_SERVER_IDLE": "1"}
    server = start(env)
    assert within(30, lambda: not _alive(server["pid"]))
    assert list((Path(warm["XDG_RUNTIME_DIR"]) / "pfs").iterdir()) == []


def test_stop_lets_a_running_command_finish(warm, tmp_path):
    src = tmp_path / "src"
    make_balanced(src, dirs=4, files_per_dir=50)
    server = start(warm)
    proc = paced_cp(warm, src, tmp_path / "c", ops_per_second=100)
    time.sleep(1.5)
    stop = pfs(warm, "cluster", "stop")
    assert b"stopping (1 commands running)" in stop.stdout
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"server job cpu" in err, err
    assert len(list((tmp_path / "c").rglob("*.dat"))) == 200
    assert within(10, lambda: not _alive(server["pid"]))


def test_pfs_server_off_and_paths_of_descriptors_run_here(warm, tmp_path):
    start(warm)
    off = pfs({**warm, "PFS_SERVER": "off"}, "--version")
    assert off.returncode == 0 and not served(off)
    own_fd = pfs(warm, "scan", "/dev/fd/7", "-o", tmp_path / "m")  # the client's descriptor, not the server's
    assert not served(own_fd)
