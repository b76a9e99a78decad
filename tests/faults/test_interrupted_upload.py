"""Ctrl-C during a copy to S3 (a moto server on loopback): the driver aborts every multipart upload
it opened (``dask_pfs/copy/bigfiles.py``, ``abort_open``), so no upload is left holding parts."""

from __future__ import annotations

import glob
import os
import signal
import time
from pathlib import Path

from ..conftest import make_tree
from .harness import finish, kill_group, start_pfs

MiB = 1 << 20
BUCKET = "interrupted-upload"


def journaled_uploads(cache: Path) -> int:
    """Multipart upload ids the job's journal holds (``<chunk>.mpu`` records)."""
    lines = [
        line for f in glob.glob(f"{cache}/**/done.jsonl", recursive=True) for line in Path(f).read_text().splitlines()
    ]
    return sum('.mpu"' in line for line in lines)


def test_ctrl_c_aborts_the_open_multipart_uploads(tmp_path, s3_server, s3fs_fs):
    src = make_tree(tmp_path / "src", {"big0.bin": os.urandom(32 * MiB), "big1.bin": os.urandom(32 * MiB), "s": "s"})
    s3fs_fs.makedirs(BUCKET, exist_ok=True)
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "FSSPEC_S3_ENDPOINT_URL": s3_server["client_kwargs"]["endpoint_url"],  # what s3fs in pfs connects to
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    # 16 MiB ranges of 8 MiB parts, read at 4 MB/s: the two uploads stay open for ~16 s
    args = ["cp", f"{src}/", f"s3://{BUCKET}/dst", "--no-progress", "--split-size", "16MiB", "--max-bandwidth", "4MB/s"]
    proc = start_pfs(*args, env=env, log=tmp_path / "cp.log")
    try:
        opened: list = []
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            opened = s3fs_fs.list_multipart_uploads(BUCKET)
            if len(opened) == 2 and journaled_uploads(tmp_path / "cache") == 2:
                break  # both uploads open, and the driver has their ids (it journals them when it does)
            time.sleep(0.1)
        assert proc.poll() is None and len(opened) == 2, f"the job did not have both uploads open: {opened}"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground process group
        rc, out = finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert rc == 130 and ("pfs: interrupted" in out or "pfs: aborted" in out), out  # the driver took the Ctrl-C
    assert s3fs_fs.list_multipart_uploads(BUCKET) == [], "an interrupted job left multipart uploads open"
    s3fs_fs.invalidate_cache()
    assert not [p for p in s3fs_fs.find(BUCKET) if p.endswith(".bin")], "a big file was completed after all"
