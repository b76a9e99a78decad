"""Rate caps: token buckets in real time, the job-wide op cap over the 2-worker cluster, the CLI options."""

from __future__ import annotations

import threading
import time

import click
import pytest
from click.testing import CliRunner

from operators import ratelimit
from operators.ratelimit import LeasedBucket, Limits, TokenBucket, parse_bandwidth
from tests.conftest import make_balanced


def test_token_bucket_paces_many_threads():
    bucket = TokenBucket(1000, burst=10)
    t = time.monotonic()
    threads = [threading.Thread(target=lambda: [bucket.take() for _ in range(75)]) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.monotonic() - t
    assert 0.55 <= elapsed <= 0.75, elapsed  # 600 tokens at 1000/s, 10 saved up


def test_leased_bucket_draws_batches_from_a_shared_bucket():
    """Two "processes" leasing from one bucket together stay at its rate, not twice it."""
    shared = TokenBucket(500, burst=5)
    calls = []

    def lease(n: float) -> float:
        calls.append(n)
        return shared.reserve(n)

    a, b = LeasedBucket(lease, batch=10), LeasedBucket(lease, batch=10)
    t = time.monotonic()
    workers = [threading.Thread(target=lambda w=w: [w.take() for _ in range(200)]) for w in (a, b, a, b)]
    for th in workers:
        th.start()
    for th in workers:
        th.join()
    elapsed = time.monotonic() - t
    assert 1.45 <= elapsed <= 1.9, elapsed  # 800 ops at 500/s
    assert len(calls) <= 82  # one lease per 10 ops, not one per op


@pytest.mark.parametrize(
    "text,value",
    [("200MB/s", 200e6), ("1.5GiB/s", 1.5 * 2**30), ("500k", 500e3), ("1000", 1000), ("64 MiB/sec", 64 * 2**20)],
)
def test_parse_bandwidth(text, value):
    assert parse_bandwidth(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["fast", "-1MB/s", "0", "10 MB/h"])
def test_parse_bandwidth_refuses(text):
    with pytest.raises(ValueError):
        parse_bandwidth(text)


def test_no_cap_costs_nothing():
    ratelimit.configure(None)
    t = time.perf_counter()
    for _ in range(100_000):
        ratelimit.take_ops()
    assert time.perf_counter() - t < 0.5


def test_max_ops_per_second_caps_the_whole_job(dask_client, tmp_path):
    """500 ops/s over both worker processes: the scan's measured entry rate is 500 within 10 %."""
    from dask_pfs.scan.api import scan

    warm = tmp_path / "warm"
    make_balanced(warm, dirs=4, files_per_dir=4)
    for i in range(2):  # both workers import the Parquet writer before the timed run
        scan(warm, tmp_path / f"w{i}", dask_client)
    root = tmp_path / "t"
    entries = make_balanced(root, dirs=34, files_per_dir=50)  # 1,768 entries: ~3.5 s at 500/s
    result = scan(root, tmp_path / "m", dask_client, limits=Limits(ops_per_second=500))
    assert result.counts["entries"] == entries
    rate = entries / result.seconds
    assert 450 <= rate <= 550, (rate, result.seconds, result.tasks)
    t = time.monotonic()  # the cap is lifted when the job ends
    scan(root, tmp_path / "m2", dask_client)
    assert time.monotonic() - t < 3


def test_max_bandwidth_caps_copy_reads(dask_client, tmp_path):
    from dask_pfs.copy import copy

    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"f{i}").write_bytes(bytes([i]) * 1_000_000)
    t = time.monotonic()
    result = copy(src, tmp_path / "dst", client=dask_client, limits=Limits(bytes_per_second=2_000_000))
    elapsed = time.monotonic() - t
    assert result.counts["files"] == 4 and (tmp_path / "dst" / "f3").read_bytes() == bytes([3]) * 1_000_000
    assert elapsed >= 1.6, elapsed  # 4 MB at 2 MB/s, 0.5 MB saved up
    assert elapsed < 15


def test_cli_options_reach_cluster_options():
    from dask_pfs.cli import cluster_options

    seen = {}

    @click.command()
    @cluster_options
    def cmd(cluster, threads, progress) -> None:
        seen["cluster"] = cluster

    runner = CliRunner()
    ok = runner.invoke(cmd, ["--max-ops-per-second", "300", "--max-bandwidth", "200MB/s"])
    assert ok.exit_code == 0, ok.output
    assert seen["cluster"].limits == Limits(300, 200e6)
    assert runner.invoke(cmd, []).exit_code == 0 and seen["cluster"].limits is None
    bad = runner.invoke(cmd, ["--max-bandwidth", "lots"])
    assert bad.exit_code == 2 and "max-bandwidth" in bad.output


def test_capped_scan_starts_no_cluster(tmp_path):
    """A scan whose ops/s cap sets its pace past the driver's 10 s alone starts no workers (they would only
    wait on the same cap): the manifest records the driver as the one worker.  Before, a cluster of 2 joined."""
    import json

    from dask_pfs import scan

    root = tmp_path / "src"
    for d in range(60):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(20):
            (root / f"d{d}" / f"f{f}").write_bytes(b"x")
    result = scan(root, tmp_path / "m", max_ops_per_second=100)  # 1,260 entries: over 10 s at 100/s
    assert result.counts["entries"] == 1260 and result.seconds > 10
    options = json.loads((tmp_path / "m" / "_manifest.json").read_text())["options"]
    # the driver alone: 0 workers when its own walk finished the tree, 1 when it ran the rest as the one worker
    assert options["workers"] <= 1 and len(result.concurrency["per_worker"]) == 1, (options, result.concurrency)
