"""pfs on obstore beside ``rclone`` on an S3 server (issue 45): scan, cp S3 -> local, local -> S3, S3 -> S3,
big objects, and a listing of a million keys.

The servers run in the harness's network namespace behind its delay link (``--nas``: ``/work/shared/nas``,
``nas.sh up 1000`` first; 10.201.0.2) or on loopback.  moto (this venv's ``moto_server``) serves the small and
big objects; the million-key listing is served by ``s3_listing_server.py`` (moto sorts every key of a bucket
for each page: a million keys would take it over a second a page, and as long to fill).  Each command is run
alternately (pfs, rclone, pfs, rclone: one interleaved run); per run: wall time, the CPU (user+sys) of the
tool's whole process tree (this script is a child subreaper, so workers that outlive their parent are reaped
here and counted), the server's CPU meanwhile (``/proc``), and the requests the server logged.  Ratios are
rclone's time / pfs's: above 1 means pfs is faster.  Each upload goes to a bucket of its own (moto's listings
cost O(keys in the bucket)); S3 -> S3 copies within the source bucket, where both tools copy server-side.
Usage: ``.venv/bin/python benchmarks/bench_objstore.py --nas [--objects 5000 --prefixes 100 --size 2048]
[--big 2 --big-mib 1024] [--huge 1000000] [--rounds 1] [--only scan,down,up,s3s3,big,huge] [--json FILE]``;
``bench_objstore.py --table FILE`` prints the markdown table of a ``--json`` file.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
NAS_IP = "10.201.0.2"
TICK = os.sysconf("SC_CLK_TCK")
SERVERS: set[int] = set()  # this script's server processes: not a tool's leftovers


def subreaper() -> None:
    """Orphaned descendants (a tool's workers whose parent exited first) become this process's children,
    so ``RUSAGE_CHILDREN`` counts their CPU once they are reaped (:func:`reap`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        sys.exit("bench_objstore: prctl(PR_SET_CHILD_SUBREAPER) failed")


def reap(timeout: float = 30.0) -> None:
    """Wait for every child left but the servers (a tool's orphaned workers), so their CPU is counted."""
    me, end = str(os.getpid()), time.monotonic() + timeout
    while time.monotonic() < end:
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = f.read().rsplit(")", 1)[1].split()[1]
            except OSError:
                continue
            if ppid == me and int(pid) not in SERVERS:
                left.append(int(pid))
        if not left:
            return
        for pid in left:
            with suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def host_busy() -> tuple[float, float]:
    with open("/proc/stat") as f:
        v = [float(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def rclone_config(path: Path, remote: str, endpoint: str) -> Path:
    """An rclone config naming ``remote`` as the S3 server at ``endpoint`` (the test keys pfs uses too)."""
    path.write_text(
        f"[{remote}]\ntype = s3\nprovider = Other\nendpoint = {endpoint}\naccess_key_id = testing\n"
        "secret_access_key = testing\nregion = us-east-1\n"
    )
    return path


@contextmanager
def server(cmd: list[str], log: Path, host: str, port: int, nas: bool) -> Iterator[subprocess.Popen]:
    """A server process (in the ``nas`` namespace with ``nas``), its stderr in ``log``; stopped after."""
    full = (["ip", "netns", "exec", "nas"] if nas else []) + cmd
    with log.open("w") as err:
        srv = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    SERVERS.add(srv.pid)
    try:
        for _ in range(200):
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise SystemExit(f"bench_objstore: {cmd[0]} did not listen on {host}:{port} (see {log})")
        yield srv
    finally:
        srv.terminate()
        srv.wait()
        SERVERS.discard(srv.pid)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Runner:
    """Runs one command and measures it against one server."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def run(self, cmd: list[str], srv: subprocess.Popen, log: Path, env: dict[str, str] | None = None) -> dict:
        reap()
        before = log.read_text(errors="replace").count("\n")
        s0, (b0, t0h) = proc_cpu(srv.pid), host_busy()
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        p = subprocess.run(cmd, env={**self.env, **(env or {})}, capture_output=True, text=True)
        wall = time.monotonic() - t0
        reap()
        r1, (b1, t1h) = resource.getrusage(resource.RUSAGE_CHILDREN), host_busy()
        if p.returncode != 0:
            raise SystemExit(f"bench_objstore: {cmd[:3]} -> {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        time.sleep(0.3)  # the server's last log lines
        return {
            "wall_s": round(wall, 3),
            "cpu_s": round((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), 3),
            "server_cpu_s": round(proc_cpu(srv.pid) - s0, 3),
            "requests": log.read_text(errors="replace").count("\n") - before,
            "host_busy_pct": round(100 * (b1 - b0) / max(t1h - t0h, 1), 1),
        }


def make_files(root: Path, n: int, prefixes: int, size: int) -> None:
    for i in range(n):
        p = root / f"p{i % prefixes:03d}" / f"o{i:05d}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(size))


def make_big(root: Path, n: int, mib: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    block = os.urandom(1 << 20)
    for i in range(n):
        with open(root / f"big{i}.bin", "wb") as f:
            for j in range(mib):
                f.write(block[j % 997 :] + block[: j % 997])  # each MiB differs


def table(path: Path) -> str:
    """The markdown table of a ``--json`` file (one row per job and round)."""
    rows = ["| job | pfs s | rclone s | rclone/pfs | CPU per object pfs / rclone, ms | server CPU pfs / rclone, s "
            "| requests pfs / rclone | host busy % |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for line in path.read_text().splitlines():
        r = json.loads(line)
        p, c, n = r["pfs"], r["rclone"], r["objects"]
        rows.append(
            f"| {r['job']} | {p['wall_s']:.2f} | {c['wall_s']:.2f} | **{c['wall_s'] / p['wall_s']:.2f}x** "
            f"| {1000 * p['cpu_s'] / n:.3g} / {1000 * c['cpu_s'] / n:.3g} | {p['server_cpu_s']:.2f} / "
            f"{c['server_cpu_s']:.2f} | {p['requests']:,} / {c['requests']:,} "
            f"| {p['host_busy_pct']:.0f} / {c['host_busy_pct']:.0f} |"
        )
    return "\n".join(rows)


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        print(table(Path(sys.argv[2])))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--nas", action="store_true", help="servers in the nas namespace, behind its delay link")
    ap.add_argument("--objects", type=int, default=5000)
    ap.add_argument("--prefixes", type=int, default=100)
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--big", type=int, default=2, help="big objects (0: none)")
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--huge", type=int, default=1_000_000, help="keys of the big listing (0: none)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", default="scan,down,up,s3s3,big,huge")
    ap.add_argument("--json", type=Path, help="append one line per run here")
    a = ap.parse_args()
    only = set(a.only.split(","))
    rclone = shutil.which("rclone")
    if rclone is None:
        sys.exit("bench_objstore: rclone is not installed (apt-get install rclone)")
    if a.nas and subprocess.run(["ip", "netns", "exec", "nas", "true"], capture_output=True).returncode != 0:
        sys.exit("bench_objstore: no nas namespace: run /work/shared/nas/nas.sh up 1000 first")
    subreaper()
    host = NAS_IP if a.nas else "127.0.0.1"
    work = Path(tempfile.mkdtemp(prefix="pfs-objbench-"))
    base = {k: v for k, v in os.environ.items() if not k.endswith("CA_BUNDLE")}  # rclone refuses a CA bundle here
    runner = Runner({**base, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    pfs = [str(BIN / "pfs")]
    out = a.json.open("a") if a.json else None
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"# {stamp}, servers {'in the nas namespace (' + NAS_IP + ')' if a.nas else 'on loopback'}, "
          f"load {os.getloadavg()[0]:.1f}; rclone/pfs: above 1 = pfs faster", flush=True)  # fmt: skip

    def pair(job: str, n: int, ours: Callable[[int], list[str]], theirs: Callable[[int], list[str]], srv, log,
             env=None) -> None:  # fmt: skip
        for r in range(a.rounds):
            m1 = runner.run(ours(r), srv, log, env)
            m2 = runner.run(theirs(r), srv, log, env)
            ratio = m2["wall_s"] / m1["wall_s"]
            line = (
                f"{job:16} r{r}: pfs {m1['wall_s']:.2f} s, rclone {m2['wall_s']:.2f} s -> {ratio:.2f}x; "
                f"CPU pfs {m1['cpu_s']:.2f} s rclone {m2['cpu_s']:.2f} s "
                f"(per object {1000 * m1['cpu_s'] / n:.2f} / {1000 * m2['cpu_s'] / n:.2f} ms); "
                f"server CPU {m1['server_cpu_s']:.2f} / {m2['server_cpu_s']:.2f} s; "
                f"requests {m1['requests']} / {m2['requests']}; "
                f"host busy {m1['host_busy_pct']:.0f}/{m2['host_busy_pct']:.0f} %"
            )
            print(line, flush=True)
            if out:
                out.write(json.dumps({"stamp": stamp, "job": job, "round": r, "objects": n, "nas": a.nas,
                                      "pfs": m1, "rclone": m2}) + "\n")  # fmt: skip
                out.flush()

    try:
        if "huge" in only and a.huge:
            port = free_port() if not a.nas else 9100
            ep = f"http://{host}:{port}"
            log = work / "listing.log"
            conf = rclone_config(work / "rclone-huge.conf", "huge", ep)
            cmd = [sys.executable, str(HERE / "s3_listing_server.py"), "--host", host, "--port", str(port),
                   "--bucket", "huge", "--keys", str(a.huge)]  # fmt: skip
            with server(cmd, log, host, port, a.nas) as srv:
                env = {"AWS_ENDPOINT_URL": ep, "RCLONE_CONFIG": str(conf)}
                print(f"# {a.huge:,} keys side by side (huge/flat/k0000000...), s3_listing_server.py", flush=True)
                pair(f"list {a.huge:,} keys", a.huge,
                     lambda r: pfs + ["scan", "s3://huge/flat", "-o", str(work / f"h{r}")],
                     lambda r: [rclone, "lsf", "-R", "--checkers", "64", "huge:huge/flat"], srv, log, env)  # fmt: skip
        if only & {"scan", "down", "up", "s3s3", "big"}:
            port = free_port() if not a.nas else 9000
            ep = f"http://{host}:{port}"
            log = work / "moto.log"
            conf = rclone_config(work / "rclone.conf", "moto", ep)
            runner.env.update({"AWS_ENDPOINT_URL": ep, "RCLONE_CONFIG": str(conf)})
            rc = lambda *args: subprocess.run([rclone, *args], env=runner.env, check=True, capture_output=True)  # noqa: E731
            copy = [rclone, "copy", "--transfers", "64", "--checkers", "64"]
            with server([str(BIN / "moto_server"), "-H", host, "-p", str(port)], log, host, port, a.nas) as srv:
                src = work / "src"
                make_files(src, a.objects, a.prefixes, a.size)
                rc("mkdir", "moto:bench")
                t0 = time.monotonic()
                rc("copy", "--transfers", "64", f"{src}/", "moto:bench/data")
                print(f"# {a.objects} objects of {a.size} B in {a.prefixes} prefixes, "
                      f"filled in {time.monotonic() - t0:.1f} s", flush=True)  # fmt: skip
                for r in range(a.rounds):
                    for b in (f"pu{r}", f"ru{r}"):
                        rc("mkdir", f"moto:{b}")
                n = a.objects
                if "scan" in only:
                    pair("scan", n, lambda r: pfs + ["scan", "s3://bench/data", "-o", str(work / f"m{r}")],
                         lambda r: [rclone, "lsf", "-R", "--checkers", "64", "moto:bench/data"], srv, log)  # fmt: skip
                if "down" in only:
                    pair("cp S3->local", n, lambda r: pfs + ["cp", "s3://bench/data/", str(work / f"pd{r}")],
                         lambda r: copy + ["moto:bench/data", str(work / f"rd{r}")], srv, log)  # fmt: skip
                if "up" in only:
                    pair("cp local->S3", n, lambda r: pfs + ["cp", f"{src}/", f"s3://pu{r}/"],
                         lambda r: copy + [f"{src}/", f"moto:ru{r}"], srv, log)  # fmt: skip
                if "s3s3" in only:
                    pair("cp S3->S3", n, lambda r: pfs + ["cp", "s3://bench/data/", f"s3://bench/ps{r}/"],
                         lambda r: copy + ["moto:bench/data", f"moto:bench/rs{r}"], srv, log)  # fmt: skip
                if "big" in only and a.big:
                    shutil.rmtree(work / "pd0", ignore_errors=True)
                    big = work / "bigsrc"
                    make_big(big, a.big, a.big_mib)
                    for b in ("bigdata", *(f"bu{r}{t}" for r in range(a.rounds) for t in "pr")):
                        rc("mkdir", f"moto:{b}")
                    t0 = time.monotonic()
                    rc("copy", "--transfers", "8", f"{big}/", "moto:bigdata/b")
                    print(f"# {a.big} objects of {a.big_mib} MiB, filled in {time.monotonic() - t0:.1f} s", flush=True)
                    nb = a.big
                    pair("big S3->local", nb, lambda r: pfs + ["cp", "s3://bigdata/b/", str(work / f"bd{r}p")],
                         lambda r: copy + ["moto:bigdata/b", str(work / f"bd{r}r")], srv, log)  # fmt: skip
                    for r in range(a.rounds):
                        shutil.rmtree(work / f"bd{r}p", ignore_errors=True)
                        shutil.rmtree(work / f"bd{r}r", ignore_errors=True)
                    pair("big local->S3", nb, lambda r: pfs + ["cp", f"{big}/", f"s3://bu{r}p/"],
                         lambda r: copy + [f"{big}/", f"moto:bu{r}r"], srv, log)  # fmt: skip
                    pair("big S3->S3", nb, lambda r: pfs + ["cp", "s3://bigdata/b/", f"s3://bigdata/p{r}/"],
                         lambda r: copy + ["moto:bigdata/b", f"moto:bigdata/r{r}"], srv, log)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if out:
            out.close()


if __name__ == "__main__":
    main()
