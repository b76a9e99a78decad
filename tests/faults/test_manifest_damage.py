"""A manifest part truncated or overwritten on disk: ``rm --manifest``, ``cp --manifest`` and ``query``
exit 2 naming the part, and nothing is removed or copied."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import threading
from collections.abc import Iterator

import pytest

from dask_pfs import scan
from dask_pfs.scan.engine import ScanTuning

from ..conftest import make_balanced, run_pfs, tree_digest


def truncate(part: str) -> None:
    os.truncate(part, os.path.getsize(part) * 2 // 3)


def overwrite_middle(part: str) -> None:
    """64 bytes of the middle of the part (a data page) replaced; the footer is intact."""
    size = os.path.getsize(part)
    with open(part, "r+b") as f:
        f.seek(size // 3)
        old = f.read(64)
        f.seek(size // 3)
        f.write(bytes(b ^ 0x5A for b in old))


@pytest.fixture(scope="module")
def scanned(tmp_path_factory, dask_client):
    base = tmp_path_factory.mktemp("damage")
    tree = base / "tree"
    make_balanced(tree, dirs=12, files_per_dir=100, size=10)
    m = base / "m"
    scan(tree, m, client=dask_client, tuning=ScanTuning(max_entries=100, max_dirs_per_task=1))
    return tree, m


@contextlib.contextmanager
def scheduler_probe() -> Iterator[tuple[str, list]]:
    """A TCP listener on loopback given to pfs as its Dask scheduler: it records every connection (a
    job that got as far as its cluster) and answers none.  The engines check a manifest before
    :func:`dask_pfs.runtime.submitter.job_client`, the one place that connects to a scheduler or starts the
    embedded cluster, so a job refused "before any cluster starts" never connects here."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    seen: list = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except TimeoutError:
                continue
            seen.append(addr)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}", seen
    finally:
        stop.set()
        thread.join()
        server.close()


# a job that did connect gives up on the probe in seconds, not Dask's 30 s
PROBE_ENV = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s"}


def refused_by_every_command(tmp_path, m, needle: str) -> None:
    """``rm --manifest``, ``cp --manifest`` and ``query`` on ``m`` exit 2 with ``needle`` in their one
    line, rm and cp before any cluster: the scheduler they are given never hears from them."""
    with scheduler_probe() as (address, seen):
        cluster = ["--scheduler", address, "--driver", "local", "--no-progress"]
        for args in (
            ["rm", "--manifest", m, "--where", "type = 'file'", "--yes", *cluster],
            ["cp", "--manifest", m, tmp_path / "dst", *cluster],
            ["query", m, "--where", "size > 0", "--limit=1"],
        ):
            proc = run_pfs(*args, env=PROBE_ENV)
            out = proc.stdout + proc.stderr
            assert proc.returncode == 2, f"{args[0]}: {out}"
            assert needle in out and "Traceback" not in out, f"{args[0]}: {out}"
        assert not seen, f"a refused job connected to its scheduler {len(seen)} times"


@pytest.mark.parametrize("damage", [truncate, overwrite_middle], ids=["truncated", "overwritten"])
def test_damaged_part_refused_by_rm_cp_and_query(tmp_path, scanned, damage):
    tree, pristine = scanned
    m = tmp_path / "m"
    shutil.copytree(pristine, m)
    parts = sorted(glob.glob(f"{m}/part-*.parquet"))
    victim = parts[len(parts) // 2]
    damage(victim)
    before = tree_digest(tree)
    refused_by_every_command(tmp_path, m, f"{os.path.basename(victim)}: damaged manifest part")
    assert tree_digest(tree) == before  # nothing removed
    assert not (tmp_path / "dst").exists()  # nothing copied


def test_missing_part_refused_by_rm_cp_and_query(tmp_path, scanned):
    tree, pristine = scanned
    m = tmp_path / "m"
    shutil.copytree(pristine, m)
    parts = sorted(glob.glob(f"{m}/part-*.parquet"))
    gone = parts[len(parts) // 2]
    os.unlink(gone)
    refused_by_every_command(tmp_path, m, f"part {os.path.basename(gone)} is missing")
    with open(m / "_manifest.json") as f:
        assert (
            f"{len(parts) - 1} part files where the scan wrote {len(parts)}" in run_pfs("query", m, "--limit=1").stderr
        ), f.read()
    assert len(tree_digest(tree)) == 12 * 102
    assert not (tmp_path / "dst").exists()
