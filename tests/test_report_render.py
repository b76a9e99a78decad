"""benchmarks/report_render.py: the benchmark report from a fixed raw .jsonl (no NAS, nothing timed).

The fixture (tests/data/report-raw.jsonl) holds one tree at 1 and 5 ms: scan, rm, cp beside their serial
tools and pfutils, pstat probes, a --threads sweep, one failed run and one run without a remount.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
RAW = Path(__file__).resolve().parent / "data" / "report-raw.jsonl"


@pytest.fixture(scope="module")
def bench_modules():
    sys.path.insert(0, str(BENCH))
    try:
        import report_actions
        import report_render

        yield report_render, report_actions
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def report(bench_modules, tmp_path_factory) -> tuple[str, Path]:
    render = bench_modules[0].render
    out = tmp_path_factory.mktemp("report") / "RESULTS-report.md"
    rows = [json.loads(line) for line in RAW.read_text().splitlines()]
    return render(rows, out), out


def test_cells_are_medians_with_min_max_ratios_and_fraction_of_probe(report):
    text, out = report
    assert out.read_text() == text
    # scan at 1 ms: pfs 5/7 s (median 6 -> 3,333 files/s, 21,111 entries), find 20/22 s (3.50x),
    # probe best 4,000 (0.83x)
    # (pfs job s 4/5 from --json; auto-tuning settled at 40 and 60)
    scan_1ms = (
        "| bal20k | 1 | 6.00 (5.00-7.00) | 21.0 (20.0-22.0) | 4.50 (4.00-5.00) | 3,333 | 3,518 | 3.50x | 0.83x | 50 |"
    )
    assert scan_1ms in text
    # rm at 5 ms: the failed pfutils run is left out of its cell and listed below
    # (and no prm probe at 5 ms: "of probe" is "-", not a fraction of the lstat probe)
    assert "| bal20k | 5 | 20.0 | 150.0 | - | - | 1,000 | 1,056 | 7.50x | - | - | - |" in text
    assert "- 2026-11-22T10:23:00+0000 5 ms bal20k rm pfutils: exit 1: boom" in text
    assert "| bal20k | 1 | 400 | 1,500 | 4,000 | 4,000 at 64 |" in text
    assert "**not after a remount: 1 of 21 runs**" in text
    assert "min 50 %, median 50 %, max 90 %" in text


def test_targets_are_judged(report):
    text, _ = report
    assert "| scan: pfs >= 80 % of pstat | bal20k | 1 ms | 0.83x | **met** |" in text
    # rm's ceiling is prm.py --stat (2,500 files removed/s): 2,000 / 2,500
    assert "| rm: pfs >= 80 % of prm | bal20k | 1 ms | 0.80x | **met** |" in text
    # cp reads every file: its ceiling is pstat -R (best 1,000 reads/s at 32), not lstat: 666.7 / 1,000
    assert "| cp: pfs >= 80 % of pread | bal20k | 1 ms | 0.67x | missed |" in text
    assert "| bal20k | 1 | 500 | 1,000 | 1,000 at 32 |" in text  # the read probe's own table
    assert "| scan: pfs >= 8x find | bal20k | 5 ms | 11.88x | **met** |" in text
    assert "| rm: pfs >= 10x rm -rf | bal20k | 5 ms | 7.50x | missed |" in text
    assert "du: pfs" not in text  # not measured: no target row, no section


def test_sweep_shows_where_auto_tuning_settled(report):
    text, _ = report
    assert "| scan | bal20k | 1 | 1,100 | 2,998 | 3,300 | 48 |" in text


def test_every_linked_plot_is_a_png(report):
    text, out = report
    linked = re.findall(r"\]\((plots/[^)]+\.png)\)", text)
    assert sorted(linked) == [
        "plots/concurrency-scan-bal20k-1ms.png",
        "plots/rtt-cp.png",
        "plots/rtt-rm.png",
        "plots/rtt-scan.png",
    ]
    for rel in linked:
        data = (out.parent / rel).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, rel
    assert sorted(p.name for p in (out.parent / "plots").iterdir()) == sorted(Path(r).name for r in linked)


def test_settled_from_json_or_from_the_log(bench_modules):
    concurrency = bench_modules[1].concurrency
    nested = {"copy": {"concurrency": {"mode": "auto", "settled": 36}}}
    assert concurrency(nested, "") == {"mode": "auto", "settled": 36}
    log = "pfs.concurrency INFO concurrency settled at 24 operations in flight (pid 7)\n... settled at 54 ..."
    assert concurrency({}, log) == {"mode": "auto", "settled": 54, "from": "log"}
    assert concurrency({}, "nothing") is None


def test_a_serial_run_killed_at_the_timeout_is_a_lower_bound(bench_modules, tmp_path):
    """rm -rf at 5 ms killed after 300 s, pfs 25 s: the cell and the target say "> 12.00x", not "-"."""
    render = bench_modules[0].render
    base = {"kind": "run", "rtt_ms": 5.0, "tree": "bal20k", "action": "rm", "files": 20000, "entries": 21111}
    base |= {"caches": "remount", "load": 1.0, "host_busy": 50, "ts": "2026-11-23T14:00:00+0000"}
    rows = [
        base | {"tool": "pfs", "threads": "auto", "run": 0, "seconds": 25.0, "files_per_s": 800.0, "ok": True},
        base
        | {"tool": "rm", "threads": None, "run": 0, "seconds": 300.0, "files_per_s": 66.7, "ok": False}
        | {"timed_out": True, "note": "killed after 300 s: its time is a lower bound"},
    ]
    text = render(rows, tmp_path / "RESULTS-report.md")
    assert "| rm: pfs >= 10x rm -rf | bal20k | 5 ms | > 12.00x | **met** (lower bound) |" in text
    assert "| bal20k | 5 | 25.0 | > 300 (killed) |" in text
    assert "rm rm: killed after 300 s: its time is a lower bound" in text


def test_timed_kills_the_whole_command_at_the_timeout(tmp_path):
    """The serial tool runs under /usr/bin/time: the kill must reach it, not only the wrapper."""
    sys.path.insert(0, str(BENCH))
    try:
        from common import timed
    finally:
        sys.path.remove(str(BENCH))
    pidfile = tmp_path / "pid"
    run = timed("sleeper", f"echo $$ > {pidfile}; exec sleep 60", None, shell=True, timeout=1.0)
    assert run.timed_out and 1.0 <= run.seconds < 10
    pid = int(pidfile.read_text())

    def state() -> str:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            return "gone"

    deadline = time.monotonic() + 5  # SIGKILL is delivered, the exit itself can lag a moment
    while state() not in ("gone", "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state() in ("gone", "Z"), "the grandchild outlived the timeout"
    ok = timed("quick", ["true"], None, timeout=30)
    assert not ok.timed_out and ok.rc == 0


def test_cpu_section_shows_when_a_run_is_bound_by_the_host(bench_modules):
    """Two cp runs whose CPU, with the NAS's, fills both cores for about the wall time: the table says so."""
    render = bench_modules[0]
    run = {"kind": "run", "action": "cp", "tool": "pfs", "tree": "bal20k", "rtt_ms": 1.0, "files": 20_000, "ok": True}
    rows = [
        {"kind": "config", "cpus": 2},
        run | {"seconds": 20.0, "cpu_s": 18.0, "nas_cpu_s": 22.0, "host_busy": 88},
        run | {"seconds": 22.0, "cpu_s": 20.0, "nas_cpu_s": 24.0, "host_busy": 92},
        run | {"seconds": 9.0, "cpu_s": None, "nas_cpu_s": None, "ok": True},  # an older row: no CPU, left out
        {"kind": "probe", "tool": "pstat", "threads": 64, "tree": "bal20k", "rtt_ms": 1.0, "ops": 20_000}
        | {"seconds": 9.0, "cpu_s": 1.6, "nas_cpu_s": 17.0, "ok": True},
    ]
    text = "\n".join(render.cpu_section(rows))
    assert "| cp | pfs | bal20k | 1 | 21.0 | 19.0 | 950 | 23.0 | 21.0 | 90 |" in text
    assert "| probe | pstat at 64 | bal20k | 1 | 9.0 | 1.6 | 80 | 17.0 | 9.3 | - |" in text
    assert render.cpu_section([r for r in rows if r["kind"] != "config"]) == []  # no core count: no table


@pytest.fixture
def bench_common():
    sys.path.insert(0, str(BENCH))
    try:
        import common

        yield common
    finally:
        sys.path.remove(str(BENCH))


SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass"


@pytest.fixture
def busy_server_lookalike():
    """A busy process whose command line names dask_pfs.warm, as another user's pfs warm server's does:
    a benchmark's meter must not charge its CPU to the command it measures."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN.format(s=30), "-m", "dask_pfs.warm.server"])
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()


def test_timed_measures_the_commands_own_cpu(bench_common, busy_server_lookalike):
    busy = bench_common.timed("spin", [sys.executable, "-c", SPIN.format(s=0.4)], None)
    idle = bench_common.timed("sleep", ["sleep", "0.4"], None)
    assert busy_server_lookalike.poll() is None  # it was busy all along
    assert busy.cpu_s >= 0.35 and idle.cpu_s < 0.1, (busy.cpu_s, idle.cpu_s)
    assert busy.nas_cpu_s is not None and busy.nas_cpu_s >= 0


def test_timed_counts_the_served_child_that_ran_the_command(bench_common, tmp_path, busy_server_lookalike):
    """A command a warm server runs is charged its own served child's CPU (reported by its client),
    not the CPU of the other servers on the host."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_text("x")
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    env = bench_common.measured_env({**os.environ, "XDG_RUNTIME_DIR": str(run_dir), "PFS_SERVER": "on"})
    pfs = [sys.executable, "-m", "dask_pfs"]
    try:
        subprocess.run([*pfs, "cluster", "start"], env=env, cwd="/", check=True, capture_output=True, timeout=60)
        run = bench_common.timed("scan", [*pfs, "scan", str(tree), "-o", str(tmp_path / "m")], None, env=env)
        assert run.rc == 0, run.stderr
        served = bench_common.served_cpu(run.stderr)
        assert served > 0, run.stderr  # it was served, and its client said what its child cost
        assert served <= run.cpu_s < served + 2.0, (served, run.cpu_s)
    finally:
        subprocess.run([*pfs, "cluster", "stop"], env=env, cwd="/", capture_output=True, timeout=60)
