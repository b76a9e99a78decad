"""What the CLI says, kept true: plural words, du's errors column, verify's differences in a pipe, a refused
scheduler port reported at once, and --scheduler's help saying what happens without one."""

from __future__ import annotations

import socket
import time

from .conftest import make_tree, run_pfs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_file_is_one_file_and_du_shows_zero_errors(tmp_path):
    src = make_tree(tmp_path / "src", {"d/a": b"1"})
    scanned = run_pfs("scan", src, "-o", tmp_path / "m", check=True)
    assert "(1 file, 1 directory, 0 symlinks" in scanned.stdout, scanned.stdout
    copied = run_pfs("cp", "-r", src, tmp_path / "dst", check=True)
    assert ": 1 file, " in copied.stdout and "1 directory" in copied.stdout, copied.stdout
    du = run_pfs("du", tmp_path / "m", check=True)
    header, row = du.stdout.splitlines()[1:3]
    assert header.split("\t")[-1] == "errors" and row.split("\t")[-1] == "0", du.stdout


def test_verify_differences_into_a_pipe_are_lines_not_a_box(tmp_path):
    src = make_tree(tmp_path / "src", {"a": b"1", "b": b"2"})
    dst = make_tree(tmp_path / "dst", {"a": b"1", "b": b"X"})
    proc = run_pfs("verify", src, dst)
    assert proc.returncode == 1, proc.stderr
    assert not any(c in proc.stdout for c in "┃│━─┏"), proc.stdout
    assert "different\tb" in proc.stdout.splitlines(), proc.stdout


def test_workers_reports_a_refused_port_at_once():
    port = _free_port()
    t0 = time.monotonic()
    proc = run_pfs("workers", "--scheduler", f"tcp://127.0.0.1:{port}")
    took = time.monotonic() - t0
    assert proc.returncode == 2 and "connection refused" in proc.stderr, proc.stderr
    assert took < 15, took  # Dask's client alone retries a refused port for its 30 s connect timeout


def test_scheduler_help_says_what_happens_without_one():
    scan_help = run_pfs("scan", "--help", check=True).stdout
    assert "start a local cluster." not in scan_help and "only for a job that lasts" in " ".join(scan_help.split())
    assert "Required" in run_pfs("workers", "--help", check=True).stdout
    assert "manifest is read here" in " ".join(run_pfs("query", "--help", check=True).stdout.split())


def test_resume_with_nothing_to_resume_says_so_in_one_line(tmp_path):
    src = make_tree(tmp_path / "src", {"d/a": b"1"})
    first = run_pfs("scan", src, "-o", tmp_path / "m", "--resume", check=True)
    warned = [line for line in first.stderr.splitlines() if line.startswith("pfs: warning:")]
    assert len(warned) == 1 and "no journal of an interrupted run to resume: starting afresh" in warned[0], first.stderr
    again = run_pfs("scan", src, "-o", tmp_path / "m", "--resume", check=True)
    warned = [line for line in again.stderr.splitlines() if line.startswith("pfs: warning:")]
    assert len(warned) == 1 and "nothing was rescanned" in warned[0] and "--overwrite" in warned[0], again.stderr
    copied = run_pfs("cp", "-r", "--resume", src, tmp_path / "dst", check=True)
    warned = [line for line in copied.stderr.splitlines() if line.startswith("pfs: warning:")]
    assert len(warned) == 1 and "no journal of an interrupted run" in warned[0], copied.stderr


def test_cp_preview_of_a_directory_whose_time_changed_predicts_no_failure(tmp_path):
    """``cp -n -i`` where only a directory's mtime differs: not "1 changed (would fail ...)"; the copy succeeds."""
    import os

    src = make_tree(tmp_path / "src", {"d/f": b"a"})
    run_pfs("cp", "-r", f"{src}/", tmp_path / "dst", check=True)
    os.utime(src / "d", (1_577_836_800, 1_577_836_800))  # 2020-01-01
    preview = run_pfs("cp", "-r", "-n", "-i", f"{src}/", tmp_path / "dst", check=True)
    assert ".d..t...... d/" in preview.stdout.splitlines(), preview.stdout
    assert "0 changed" in preview.stdout and "1 directory whose times or mode are set" in preview.stdout, preview.stdout
    run_pfs("cp", "-r", f"{src}/", tmp_path / "dst", check=True)  # and the real run succeeds, as predicted
    assert os.stat(tmp_path / "dst" / "d").st_mtime == 1_577_836_800
