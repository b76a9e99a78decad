"""Real multi-node runs: client hosts in network namespaces, each with a Dask worker and its own
glusterfs mount of the ../shared/nas volume (scripts/multinode.sh), the scheduler and driver in the
root namespace. A scan and a copy across them must give what a local run gives, and every host must
have run tasks (the scheduler's task stream, queried with DuckDB).

    /work/shared/nas/nas.sh up 1000 && scripts/multinode.sh up 3
    .venv/bin/python -m pytest -m multinode tests/test_multinode.py
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .conftest import REPO, run_pfs

pytestmark = pytest.mark.multinode

SCRIPT = REPO / "scripts" / "multinode.sh"
NAS_DIR = Path(os.environ.get("NAS_HARNESS", "/work/shared/nas"))
MNT = os.environ.get("MN_MOUNT", "/mnt/nas-mn")
SRC = f"{MNT}/mn-src"
TREE = ["--files", "3000", "--shape", "balanced", "--fanout", "8", "--depth", "3"]
HOST_NET = ipaddress.ip_network("10.202.0.0/24")


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces and mounts)"
    if not (NAS_DIR / "nas.sh").exists() or not os.path.ismount("/mnt/nas"):
        return f"the NAS harness is not up: run {NAS_DIR}/nas.sh up 1000"
    status = subprocess.run([SCRIPT, "status"], capture_output=True, text=True, timeout=60)
    if status.returncode != 0:
        down = [line for line in status.stdout.splitlines() if "DOWN" in line]
        return f"multinode hosts not up ({'; '.join(down) or status.stderr.strip()}): run {SCRIPT} up 3"
    return None


@pytest.fixture(scope="module")
def cluster():
    """(scheduler address, client, sorted worker addresses) of the running multinode cluster."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from distributed import Client

    env = subprocess.run([SCRIPT, "env"], capture_output=True, text=True, check=True).stdout
    scheduler = dict(line.split("=", 1) for line in env.split())["PFS_SCHEDULER"]
    client = Client(scheduler, timeout="10s", set_as_default=False)
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    if len(workers) < 2:
        client.close()
        pytest.skip(f"needs >= 2 worker hosts, the scheduler has {len(workers)}: run {SCRIPT} up 3")
    yield scheduler, client, workers
    client.close()


@pytest.fixture(scope="module")
def source_tree(cluster) -> str:
    """The seeded source tree on the shared volume, made once (mktree.py, ~7 s at 1 ms RTT)."""
    done = f"{MNT}/.mn-src.done"
    if not os.path.exists(done):
        shutil.rmtree(SRC, ignore_errors=True)
        subprocess.run([sys.executable, NAS_DIR / "mktree.py", SRC, *TREE, "-j", "32"], check=True, timeout=300)
        Path(done).touch()
    return SRC


def _rows(manifest: str) -> list[tuple]:
    """Sorted (path, type, size, mtime ns) of a manifest, read with DuckDB."""
    from dask_pfs.manifests.manifest import open_manifest
    from dask_pfs.manifests.sql import connect

    m = open_manifest(manifest)
    con = connect(m)  # the manifest is a relation of the connection made for it
    try:
        return con.execute(f"SELECT path, type, size, epoch_ns(mtime) FROM {m.relation_sql()} ORDER BY path").fetchall()
    finally:
        con.close()


def test_each_host_has_its_own_network_and_mount(cluster, source_tree):
    """Every host sees the tree through its own mount; ``source_tree`` makes the tree, so this test passes
    alone or first (it used to expect a directory only a later test's fixture created)."""
    _, client, workers = cluster

    def probe(mnt: str = MNT, tree: str = source_tree) -> dict:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split(" - ")[1].split()[0] for line in f if line.split()[4] == mnt]
        return {
            "netns": os.stat("/proc/self/ns/net").st_ino,
            "mntns": os.stat("/proc/self/ns/mnt").st_ino,
            "dev": os.stat(mnt).st_dev,
            "fstype": mounts[-1] if mounts else None,
            "sees_tree": os.path.isdir(tree),
        }

    seen = client.run(probe)
    me = probe()
    assert sorted(seen) == workers
    for addr in workers:
        assert ipaddress.ip_address(addr.split("://")[1].rsplit(":", 1)[0]) in HOST_NET
    assert all(p["fstype"] == "fuse.glusterfs" and p["sees_tree"] for p in seen.values()), seen
    for key in ("netns", "mntns", "dev"):  # one network, mount namespace and FUSE mount per host
        values = {p[key] for p in seen.values()} | {me[key]}
        assert len(values) == len(workers) + 1, (key, seen, me)


def test_scan_and_copy_across_hosts_match_a_local_run(cluster, source_tree, tmp_path):
    import duckdb
    import pyarrow as pa
    from distributed import get_task_stream

    scheduler, client, workers = cluster
    out = f"{MNT}/mn-out/{uuid.uuid4().hex[:8]}"
    on_cluster = ("--scheduler", scheduler, "--json", "--no-progress")
    seconds = {}
    try:
        with get_task_stream(client=client) as stream:
            t0 = time.monotonic()
            run_pfs("scan", source_tree, "-o", f"{out}/scan", *on_cluster, check=True)
            seconds["scan"] = time.monotonic() - t0
            t0 = time.monotonic()
            run_pfs("cp", "--manifest", f"{out}/scan", f"{out}/dst", "--chunk-files", "100", *on_cluster, check=True)
            seconds["cp"] = time.monotonic() - t0
            run_pfs("scan", f"{out}/dst", "-o", f"{out}/dst-scan", *on_cluster, check=True)
        t0 = time.monotonic()
        local = tmp_path / "local"
        run_pfs("scan", source_tree, "-o", local, "--json", "--no-progress", env={"PFS_SCHEDULER": ""}, check=True)
        seconds["local scan"] = time.monotonic() - t0
        print(f"\n{len(workers)} hosts: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))

        expected = _rows(str(local))
        assert sum(1 for r in expected if r[1] == "file") == 3000
        assert _rows(f"{out}/scan") == expected
        assert _rows(f"{out}/dst-scan") == expected
        check = [sys.executable, NAS_DIR / "mktree.py", f"{out}/dst", *TREE, "--check", "-j", "16"]
        verified = subprocess.run(check, capture_output=True, text=True, timeout=300)
        assert verified.returncode == 0, verified.stdout + verified.stderr

        records = pa.table(
            {"key": [str(r["key"]) for r in stream.data], "worker": [str(r["worker"]) for r in stream.data]}
        )
        with duckdb.connect() as con:
            con.register("tasks", records)
            per_op = con.execute(
                "SELECT regexp_extract(key, '^pfs-(scan|cp)-', 1) AS op, list(DISTINCT worker ORDER BY worker), "
                "count(*) FROM tasks WHERE regexp_matches(key, '^pfs-(scan|cp)-') GROUP BY op ORDER BY op"
            ).fetchall()
        assert [op for op, _, _ in per_op] == ["cp", "scan"], per_op
        for op, ran_on, count in per_op:
            assert ran_on == workers, f"{op}: {count} tasks ran on {ran_on}, not on every host {workers}"
    finally:
        removed = run_pfs("rm", out, "-y", "--scheduler", scheduler, "--no-progress")
        if os.path.exists(out):
            shutil.rmtree(out, ignore_errors=True)
        assert removed.returncode == 0, removed.stderr
