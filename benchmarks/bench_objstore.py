"""pfs on obstore beside ``rclone`` on one moto S3 server (issue 45): scan, cp S3 -> local, cp local -> S3.

A moto server on loopback in its own process (not counted); N small objects; each command run alternately
(pfs, rclone, pfs, rclone, ...: one interleaved run), each tool's wall time and CPU (user+sys of its
process tree) and the requests the server logged.  rclone's config is the one in STACK-NOTES (``type = s3``,
``provider = Other``).  Prints ratios (rclone's time / pfs's: above 1 means pfs is faster).  On a loaded
host give only these ratios and say so.  Optional: run it inside the harness's delay link (../shared/nas).
Usage: ``.venv/bin/python benchmarks/bench_objstore.py [--objects 2000] [--rounds 2] [--size 2048]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import moto_server  # benchmarks/ is on sys.path when this script runs

BIN = Path(sys.executable).parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--prefixes", type=int, default=40)
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    rclone = shutil.which("rclone")
    if rclone is None:
        sys.exit("bench_objstore: rclone is not installed (apt-get install rclone)")
    work = Path(tempfile.mkdtemp(prefix="pfs-objbench-"))
    log = work / "moto.log"
    try:
        with moto_server(log) as ep:
            conf = work / "rclone.conf"
            conf.write_text(
                f"[moto]\ntype = s3\nprovider = Other\nendpoint = {ep}\naccess_key_id = testing\n"
                "secret_access_key = testing\nregion = us-east-1\n"
            )
            base = {
                k: v for k, v in os.environ.items() if not k.endswith("CA_BUNDLE")
            }  # rclone refuses a CA bundle here
            env = {**base, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_ENDPOINT_URL": ep, "RCLONE_CONFIG": str(conf)}  # fmt: skip
            src = work / "src"
            for i in range(a.objects):
                p = src / f"p{i % a.prefixes:03d}" / f"o{i:05d}"
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(os.urandom(a.size))
            subprocess.run([rclone, "mkdir", "moto:bench"], env=env, check=True)
            subprocess.run([rclone, "copy", "--transfers", "64", f"{src}/", "moto:bench/data"], env=env, check=True)

            def run(name: str, cmd: list) -> tuple[float, float, int]:
                before = log.read_text().count("\n")
                r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
                p = subprocess.run(cmd, env=env, capture_output=True, text=True)
                wall, r1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
                assert p.returncode == 0, f"{name}: {p.stdout[-2000:]}{p.stderr[-2000:]}"
                requests = log.read_text().count("\n") - before
                return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), requests

            pfs = [str(BIN / "pfs")]
            jobs = {
                "scan": (
                    lambda r: pfs + ["scan", "s3://bench/data", "-o", str(work / f"m{r}")],
                    lambda r: [rclone, "lsf", "-R", "--checkers", "64", "moto:bench/data"],
                ),
                "cp S3->local": (
                    lambda r: pfs + ["cp", "s3://bench/data/", str(work / f"pd{r}")],
                    lambda r: [
                        rclone,
                        "copy",
                        "--transfers",
                        "64",
                        "--checkers",
                        "64",
                        "moto:bench/data",
                        str(work / f"rd{r}"),
                    ],
                ),
                "cp local->S3": (
                    lambda r: pfs + ["cp", f"{src}/", f"s3://bench/pu{r}"],
                    lambda r: [rclone, "copy", "--transfers", "64", "--checkers", "64", f"{src}/", f"moto:bench/ru{r}"],
                ),
            }
            print(f"{a.objects} objects of {a.size} B in {a.prefixes} prefixes, moto on loopback; one interleaved run")
            for job, (ours, theirs) in jobs.items():
                for r in range(a.rounds):
                    w1, c1, q1 = run(f"pfs {job}", ours(r))
                    w2, c2, q2 = run(f"rclone {job}", theirs(r))
                    print(f"{job:13} round {r}: rclone/pfs wall {w2 / w1:.2f}x; CPU pfs {c1:.2f} s rclone {c2:.2f} s "
                          f"(per object pfs {1000 * c1 / a.objects:.2f} ms, rclone {1000 * c2 / a.objects:.2f} ms); "
                          f"requests pfs {q1} rclone {q2}", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
