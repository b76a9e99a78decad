"""cp local -> S3 -> local of small files with user xattrs, ``--xattrs`` against ``--no-xattrs`` (A B A B).

A moto S3 server on loopback in its own process (not counted); per command: wall seconds, CPU (user+sys of
the pfs process tree) and, from the server's log, the HEAD requests on the copied objects.  Usage:
``.venv/bin/python benchmarks/bench_s3_meta.py [--files 400] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import moto_server  # benchmarks/ is on sys.path when this script runs

BIN = Path(sys.executable).parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pfs-s3meta-"))
    log = work / "moto.log"
    with moto_server(log) as ep:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ENDPOINT_URL": ep}
        import s3fs

        s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": ep}).makedirs("bench")
        src = work / "src"
        src.mkdir()
        for i in range(a.files):
            p = src / f"f{i:04d}"
            p.write_bytes(b"x" * 1000)
            os.setxattr(p, "user.a", b"1")
            os.setxattr(p, "user.bin", bytes(range(16)))

        def run(*args: str) -> tuple[float, float]:
            r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
            p = subprocess.run([BIN / "pfs", *args], env=env, capture_output=True, text=True)
            wall, r1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
            assert p.returncode == 0, p.stdout + p.stderr
            return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

        for rnd in range(a.rounds):
            for mode in ("--xattrs", "--no-xattrs"):
                key = f"{mode.strip('-')}{rnd}"
                up = run("cp", mode, f"{src}/", f"s3://bench/{key}")
                down = run("cp", mode, f"s3://bench/{key}/", str(work / key))
                heads = len(re.findall(rf"HEAD /bench/{key}/f", log.read_text()))
                line = f"up {up[0]:.2f} s wall {up[1]:.2f} s CPU; down {down[0]:.2f} s wall {down[1]:.2f} s CPU"
                print(f"{mode:12} round {rnd}: {line}; HEAD on objects {heads}", flush=True)


if __name__ == "__main__":
    main()
