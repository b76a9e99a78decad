"""Real multi-node runs: client hosts in network namespaces, each with a Dask worker and its own
glusterfs mount of the ../shared/nas volume (scripts/multinode.sh), the scheduler and driver in the
root namespace.  Every job (scan, cp both ways, rm of a tree and of a manifest, sync --delete, verify,
diff, --resume after a host's worker is SIGKILLed) must give what a run on one host gives, with tasks
on every host (the scheduler's task stream, queried with DuckDB); a root swapped under the job is
refused on every host.  Each host's mount has its own ``st_dev``: the root identity must not depend
on it (operators.root_identity).

    make test-multinode          # sets everything up, runs these, brings the hosts down (.ci/run)
    # or by hand:
    /work/shared/nas/nas.sh up 1000 && scripts/multinode.sh up 3
    .venv/bin/python -m pytest -m multinode tests/test_multinode.py

``PFS_REQUIRE_MULTINODE=1`` (``make test-multinode`` sets it) turns a skip (hosts not up) into a failure.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .conftest import PFS, REPO, run_pfs

pytestmark = pytest.mark.multinode

SCRIPT = REPO / "scripts" / "multinode.sh"
NAS_DIR = Path(os.environ.get("NAS_HARNESS", REPO.parent / "shared" / "nas"))
MNT = os.environ.get("MN_MOUNT", "/mnt/nas-mn")
SRC = f"{MNT}/mn-src2"
TREE = ["--files", "600", "--shape", "balanced", "--fanout", "5", "--depth", "3"]  # 600 files, 156 dirs
FILES = 600
HOST_NET = ipaddress.ip_network("10.202.0.0/24")
REQUIRED = os.environ.get("PFS_REQUIRE_MULTINODE", "").strip() == "1"


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces and mounts)"
    if not (NAS_DIR / "mktree.py").exists() or not os.path.ismount("/mnt/nas"):
        return f"the NAS harness is not up: run {NAS_DIR}/nas.sh up 1000"
    status = subprocess.run([SCRIPT, "status"], capture_output=True, text=True, timeout=60)
    if status.returncode != 0:
        down = [line for line in status.stdout.splitlines() if "DOWN" in line]
        return f"multinode hosts not up ({'; '.join(down) or status.stderr.strip()}): run {SCRIPT} up 3"
    return None


def _skip(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"multinode test cannot run (PFS_REQUIRE_MULTINODE=1): {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster():
    """(scheduler address, client, sorted worker addresses) of the running multinode cluster."""
    reason = _skip_reason()
    if reason:
        _skip(reason)
    from distributed import Client

    env = subprocess.run([SCRIPT, "env"], capture_output=True, text=True, check=True).stdout
    scheduler = dict(line.split("=", 1) for line in env.split())["PFS_SCHEDULER"]
    client = Client(scheduler, timeout="10s", set_as_default=False)
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    if len(workers) < 2:
        client.close()
        _skip(f"needs >= 2 worker hosts, the scheduler has {len(workers)}: run {SCRIPT} up 3")
    yield scheduler, client, workers
    client.close()


def _mktree(dest: str, *extra: str) -> None:
    cmd = [sys.executable, str(NAS_DIR / "mktree.py"), dest, *TREE, "-j", "32", *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def _check(dest: str) -> None:
    """``dest`` holds the seeded tree byte for byte (mktree.py --check)."""
    _mktree(dest, "--check")


@pytest.fixture(scope="module")
def source_tree(cluster) -> str:
    """The seeded source tree on the shared volume, made once (mktree.py, a few seconds at 1 ms RTT)."""
    done = f"{MNT}/.mn-src2.done"
    if not os.path.exists(done):
        shutil.rmtree(SRC, ignore_errors=True)
        _mktree(SRC)
        Path(done).touch()
    return SRC


@pytest.fixture(scope="module")
def work(cluster):
    """A fresh directory on the volume and one on the local disk for this module's outputs."""
    name = uuid.uuid4().hex[:8]
    vol, local = Path(f"{MNT}/mn-out/{name}"), Path(f"/var/tmp/pfs-mn-{name}")
    vol.mkdir(parents=True)
    local.mkdir(parents=True)
    yield vol, local
    scheduler = cluster[0]
    removed = run_pfs("rm", vol, "-y", "--scheduler", scheduler, "--no-progress", timeout=600)
    shutil.rmtree(vol, ignore_errors=True)
    shutil.rmtree(local, ignore_errors=True)
    assert removed.returncode == 0, removed.stderr


@pytest.fixture(scope="module")
def one_host(source_tree, work) -> list[tuple]:
    """The source tree's rows as a run on one host gives them (no scheduler: the embedded cluster)."""
    out = work[1] / "one-host-scan"
    run_pfs("scan", source_tree, "-o", out, "--json", "--no-progress", env={"PFS_SCHEDULER": ""}, check=True)
    rows = _rows(str(out))
    assert sum(1 for r in rows if r[1] == "file") == FILES
    return rows


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


def _hosts_per_op(records: list[dict]) -> dict[str, list[str]]:
    """{op: sorted workers that ran its tasks} from task-stream records (``pfs-OP-...`` keys), by DuckDB."""
    import duckdb
    import pyarrow as pa

    table = pa.table({"key": [str(r["key"]) for r in records], "worker": [str(r["worker"]) for r in records]})
    with duckdb.connect() as con:
        con.register("tasks", table)
        rows = con.execute(
            "SELECT regexp_extract(key, '^pfs-([a-z]+)-', 1) AS op, list(DISTINCT worker ORDER BY worker) "
            "FROM tasks WHERE regexp_matches(key, '^pfs-[a-z]+-') GROUP BY op ORDER BY op"
        ).fetchall()
    return dict(rows)


@contextlib.contextmanager
def on_every_host(cluster, *ops: str):
    """Assert that tasks of each of ``ops`` (none: of any kind, taken together) ran on every host while
    the block ran.  A small job's scan may fit in one task: its ops are not required one by one."""
    from distributed import get_task_stream

    _, client, workers = cluster
    with get_task_stream(client=client) as stream:
        yield
    ran = _hosts_per_op(stream.data)
    if not ops:
        ran["any"] = sorted({w for hosts in ran.values() for w in hosts})
    for op in ops or ("any",):
        assert ran.get(op) == workers, f"pfs-{op} tasks ran on {ran.get(op)}, not on every host {workers} ({ran})"


def pfs(cluster, *args, ok: tuple[int, ...] = (0,), timeout: float = 600) -> subprocess.CompletedProcess:
    done = run_pfs(*args, "--scheduler", cluster[0], "--no-progress", timeout=timeout)
    assert done.returncode in ok, f"pfs {' '.join(map(str, args))} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def test_each_host_has_its_own_network_and_mount(cluster, source_tree):
    """Every host sees the tree through its own mount (its own st_dev) and the same inode numbers."""
    _, client, workers = cluster

    def probe(mnt: str = MNT, tree: str = source_tree) -> dict:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split(" - ")[1].split()[0] for line in f if line.split()[4] == mnt]
        return {
            "netns": os.stat("/proc/self/ns/net").st_ino,
            "mntns": os.stat("/proc/self/ns/mnt").st_ino,
            "dev": os.stat(mnt).st_dev,
            "ino": os.stat(tree).st_ino,
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
    assert {p["ino"] for p in seen.values()} == {me["ino"]}  # what the root identity compares across hosts


def test_scan_across_hosts_matches_one_host(cluster, source_tree, work, one_host):
    with on_every_host(cluster, "scan"):
        pfs(cluster, "scan", source_tree, "-o", work[0] / "scan", "--json")
    assert _rows(str(work[0] / "scan")) == one_host
    # -x compares each entry's device with the root's: this host's device, not the driver's
    pfs(cluster, "scan", source_tree, "-o", work[0] / "scan-x", "-x")
    assert _rows(str(work[0] / "scan-x")) == one_host
    # the driver itself a task on one of the hosts: it pins the root there, the others check against it
    pfs(cluster, "scan", source_tree, "-o", work[0] / "scan-driver", "--driver", "cluster")
    assert _rows(str(work[0] / "scan-driver")) == one_host


def test_cp_both_ways_across_hosts(cluster, source_tree, work, one_host):
    """Volume -> local disk, then local disk -> volume: byte for byte, the same rows as the source."""
    vol, local = work
    with on_every_host(cluster, "cp"):
        pfs(cluster, "cp", source_tree, local / "copy", "--chunk-files", "20")
    _check(str(local / "copy"))
    with on_every_host(cluster, "cp"):
        pfs(cluster, "cp", local / "copy", vol / "back", "--chunk-files", "20")
    _check(str(vol / "back"))
    pfs(cluster, "scan", vol / "back", "-o", local / "back-scan")
    assert _rows(str(local / "back-scan")) == one_host


def test_hard_links_scanned_by_different_hosts_stay_linked(cluster, source_tree, work):
    """A manifest groups hard links by (dev, ino): rows scanned on different hosts carry one device
    number (the job's), so a copy keeps links between files that different hosts listed."""
    vol, local = work
    tree = vol / "links"
    pfs(cluster, "cp", source_tree, tree, "--chunk-files", "50")
    tops = sorted(p for p in tree.iterdir() if p.is_dir())
    pairs = []
    for i, top in enumerate(tops):
        first = sorted(p for p in top.rglob("*") if p.is_file())[0]
        other = tops[(i + 1) % len(tops)] / f"link-{i}"
        os.link(first, other)
        pairs.append((first.relative_to(tree), other.relative_to(tree)))
    with on_every_host(cluster, "scan"):
        pfs(cluster, "scan", tree, "-o", local / "links-scan")
    import pyarrow.dataset as ds

    devs = set(ds.dataset(str(local / "links-scan"), format="parquet").to_table(columns=["dev"]).column(0).to_pylist())
    assert devs == {os.stat(tree).st_dev}, devs  # the driver's numbering, whichever host scanned the row
    pfs(cluster, "cp", "--manifest", local / "links-scan", local / "links-copy", "--chunk-files", "20")
    for a, b in pairs:
        assert os.stat(local / "links-copy" / a).st_ino == os.stat(local / "links-copy" / b).st_ino, (a, b)


def test_sync_with_delete_across_hosts(cluster, source_tree, work, one_host):
    """A stale copy (a file changed, a file and a directory extra, a file missing) made a mirror."""
    vol, local = work
    dst = vol / "mirror"
    pfs(cluster, "cp", source_tree, dst, "--chunk-files", "50")
    files = sorted(p for p in dst.rglob("*") if p.is_file())
    files[0].write_bytes(b"changed")
    files[1].unlink()
    (dst / "extra-dir" / "sub").mkdir(parents=True)
    (dst / "extra-dir" / "sub" / "x").write_text("x")
    (files[2].parent / "extra-file").write_text("y")
    with on_every_host(cluster):
        done = pfs(cluster, "sync", source_tree, dst, "--delete", "--chunk-files", "20", "--json")
    summary = json.loads(done.stdout)
    assert summary, done.stdout
    assert not (dst / "extra-dir").exists() and not (files[2].parent / "extra-file").exists()
    _check(str(dst))
    pfs(cluster, "scan", dst, "-o", local / "mirror-scan")
    assert _rows(str(local / "mirror-scan")) == one_host


def test_verify_and_diff_across_hosts(cluster, source_tree, work, tmp_path):
    """verify of the volume tree against its local copy: the same; after a change, the one difference;
    diff of the tree and the changed copy: the same answer as on one host."""
    local = work[1]
    copy = local / "verify-copy"
    pfs(cluster, "cp", source_tree, copy, "--chunk-files", "50")
    with on_every_host(cluster):
        pfs(cluster, "verify", source_tree, copy, "--json")
    victim = sorted(p for p in copy.rglob("*") if p.is_file() and p.stat().st_size > 8)[0]
    data = bytearray(victim.read_bytes())
    data[0] ^= 0xFF
    victim.write_bytes(bytes(data))  # same size; mtime differs too
    out = tmp_path / "diff.parquet"
    # diff of this small tree is two scans, which may fit on fewer hosts than three (as a small scan may):
    # the hosts are asserted over the verify and the diff of the changed copy together
    with on_every_host(cluster):
        done = pfs(cluster, "verify", source_tree, copy, "--json", ok=(1,))
        diffed = pfs(cluster, "diff", source_tree, copy, "-o", out, "--json", ok=(1,))
    rel = str(victim.relative_to(copy))
    summary = json.loads(done.stdout)
    assert summary["counts"]["different"] == 1 and summary["samples"] == [[rel, "different"]], done.stdout
    assert diffed.returncode == 1
    one = run_pfs("diff", source_tree, copy, "-o", tmp_path / "one.parquet", "--json", env={"PFS_SCHEDULER": ""})
    assert one.returncode == 1, one.stderr
    import pyarrow.parquet as pq

    changed = pq.read_table(out).to_pylist()
    assert [r["path"] for r in changed] == [rel], changed
    assert changed == pq.read_table(tmp_path / "one.parquet").to_pylist()


def test_rm_tree_and_manifest_across_hosts(cluster, source_tree, work):
    vol, local = work
    for name in ("rm-tree", "rm-manifest"):
        pfs(cluster, "cp", source_tree, vol / name, "--chunk-files", "50")
    with on_every_host(cluster, "rm"):
        done = pfs(cluster, "rm", vol / "rm-tree", "-y", "--json")
    assert not (vol / "rm-tree").exists(), done.stdout
    pfs(cluster, "scan", vol / "rm-manifest", "-o", local / "rm-manifest-scan")
    with on_every_host(cluster, "rm"):
        pfs(cluster, "rm", "--manifest", local / "rm-manifest-scan", "-y", "--chunk-files", "50", "--json")
    assert list((vol / "rm-manifest").iterdir()) == []  # as on one host: the rows go, the root stays


def test_a_swapped_root_is_refused_on_every_host(cluster, work):
    """The driver pins the root; another directory renamed into its place on the shared volume is
    refused by every host (its first task: operators.root_identity), nothing removed or read there;
    the unswapped root is accepted on every host (on main: refused for its per-host device)."""
    _, client, workers = cluster
    vol = work[0]
    tree, other = vol / "swap-t", vol / "swap-other"
    for d, text in ((tree, "mine"), (other, "other")):
        (d / "d").mkdir(parents=True)
        (d / "d" / "f").write_text(text)
    from operators.remove.tasks import RemoveSpec

    def attempt(spec=None, root: str = str(tree)) -> str:
        from operators.checksum import checksum_local_files
        from operators.root_identity import RootChangedError
        from operators.scan.task import ScanSpec, scan_chunk

        try:
            sums = checksum_local_files(root, [b"d/f"], root_id=spec.root_id)
            scan = ScanSpec("file", root, "/nonexistent/out", root_id=spec.root_id)
            from operators.root_identity import check_root

            check_root(scan.root, scan.root_id)
            assert scan_chunk  # the scan task's own check is check_root (operators/scan/task.py)
            return "read " + str(sums[0][0])
        except RootChangedError as exc:
            return "refused " + str(exc)

    spec = RemoveSpec(protocol="file", root=str(tree)).pinned()  # every host pins its mount below
    unseen = RemoveSpec(protocol="file", root=str(tree)).pinned()  # a job no host has seen yet
    assert all(r == "read True" for r in client.run(attempt, spec).values()), client.run(attempt, spec)
    os.rename(tree, vol / "swap-was")
    os.rename(other, tree)
    time.sleep(2)  # each host's FUSE client keeps names for 1 s (entry timeout): the old root until then
    for job in (spec, unseen):
        seen = client.run(attempt, job)
        assert sorted(seen) == workers
        assert all(r.startswith("refused") and "inode" in r for r in seen.values()), seen

    def remove(spec=unseen):
        from operators.remove.backends import LocalRemover
        from operators.root_identity import RootChangedError

        try:
            counts = LocalRemover(spec).unlink_chunk([("d/f", None, "file", None, None)])
            return f"removed {counts.removed_files}"
        except RootChangedError:
            return "refused"

    assert set(client.run(remove).values()) == {"refused"}
    assert (tree / "d" / "f").read_text() == "other" and (vol / "swap-was" / "d" / "f").read_text() == "mine"


def test_resume_after_a_hosts_worker_is_killed(cluster, source_tree, work):
    """SIGKILL one host's worker process mid-copy (last: it comes back at another address); the run
    ends (done by the others, or failed), and ``--resume`` completes it: the copy is the source byte for byte."""
    scheduler, client, workers = cluster
    dst = work[1] / "resumed"
    args = ["cp", source_tree, dst, "--chunk-files", "10", "--scheduler", scheduler, "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([*PFS, *map(str, args)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    victim = workers[-1]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # until the copy has files on the way
        if dst.exists() and sum(1 for _ in dst.rglob("*")) > 150:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the copy ended before a worker could be killed: make the tree bigger"
    pid = client.run(os.getpid, workers=[victim])[victim]  # the worker process (its host's nanny restarts it)
    os.kill(pid, signal.SIGKILL)
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = proc.returncode
    deadline = time.monotonic() + 120  # the host's nanny starts a new worker process
    while time.monotonic() < deadline and len(client.scheduler_info(n_workers=-1)["workers"]) < len(workers):
        time.sleep(0.5)
    pfs(cluster, "cp", source_tree, dst, "--resume", "--chunk-files", "50")
    _check(str(dst))
    assert first in (0, 1), (first, out, err)
