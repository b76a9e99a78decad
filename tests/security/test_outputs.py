"""Outputs and what is printed (issue 27, the smaller items): a read-only or full output directory
is one line and resumable, failure logs stay in pfs's own directory, a file name cannot fake output
lines, and a plain-TCP scheduler on the network is warned about."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
import warnings

import pytest

from dask_pfs.clusters.security import InsecureSchedulerWarning, warn_if_open
from dask_pfs.scan import engine as scan_engine  # dask_pfs.scan is the public function, not the package
from dask_pfs.scan import journal as scan_journal

from ..conftest import make_tree, run_pfs, tree_digest
from ..faults.harness import can_mount_tmpfs, tmpfs
from .conftest import cli, one_line_error


def test_scan_into_a_read_only_directory_then_resume(tmp_path):
    src = make_tree(tmp_path / "src", {"d/f": "x", "g": "y"})
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    proc = run_pfs("scan", src, "-o", ro / "m", "--no-progress", drop_dac=True)
    one_line_error(proc.returncode, proc.stderr)
    assert "Permission denied" in proc.stderr
    os.chmod(ro, 0o755)
    again = run_pfs("scan", src, "-o", ro / "m", "--no-progress", "--resume", drop_dac=True)
    assert again.returncode == 0, again.stderr
    assert json.loads((ro / "m" / "_manifest.json").read_text())["counts"]["entries"] == 3


def test_a_full_disk_under_write_marker_then_resume(tmp_path, capsys, scheduler_address, monkeypatch):
    """The disk fills the moment the marker is written (a filler takes every free block): exit 1, one
    line; with room again, ``--resume`` writes the marker."""
    if os.geteuid() != 0 or not can_mount_tmpfs(tmp_path):
        pytest.skip("needs root and a tmpfs")
    src = make_tree(tmp_path / "src", {"d/f": "x", "g": "y"})
    real = scan_engine.write_marker

    def fill_then_write(url, info, storage_options=None):
        with open(os.path.join(url, "..", "filler"), "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        return real(url, info, storage_options)

    with tmpfs(tmp_path / "mnt", "4m") as mnt:
        monkeypatch.setattr(scan_engine, "write_marker", fill_then_write)
        code, _, err = cli(capsys, "scan", src, "-o", mnt / "m", "--scheduler", scheduler_address)
        one_line_error(code, err, exit_code=1)
        assert "marker could not be written" in err and "--resume" in err
        assert not (mnt / "m" / "_manifest.json").exists() and not (mnt / "m" / "_manifest.json.tmp").exists()
        monkeypatch.setattr(scan_engine, "write_marker", real)
        os.unlink(mnt / "filler")
        code, _, err = cli(capsys, "scan", src, "-o", mnt / "m", "--resume", "--scheduler", scheduler_address)
        assert code == 0, err
        assert json.loads((mnt / "m" / "_manifest.json").read_text())["counts"]["entries"] == 3


def test_a_full_disk_under_the_copys_journal_then_resume(tmp_path, capsys, scheduler_address, monkeypatch):
    """cp's scan keeps its manifest and journal inside the destination's journal: the disk fills as that
    journal is started: exit 1, one line (not a traceback); with room again, ``--resume`` finishes."""
    if os.geteuid() != 0 or not can_mount_tmpfs(tmp_path):
        pytest.skip("needs root and a tmpfs")
    src = make_tree(tmp_path / "src", {"d/f": "x", "g": "y"})
    real = scan_journal.start
    with tmpfs(tmp_path / "mnt", "4m") as mnt:

        def fill_then_start(*args, **kwargs):
            with open(mnt / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 65536)
            return real(*args, **kwargs)

        monkeypatch.setattr(scan_journal, "start", fill_then_start)
        argv = ("cp", f"{src}/", mnt / "dst", "--scheduler", scheduler_address)
        code, _, err = cli(capsys, *argv)
        one_line_error(code, err, exit_code=1)
        assert "journal could not be written" in err and "--resume" in err
        monkeypatch.setattr(scan_journal, "start", real)
        os.unlink(mnt / "filler")
        code, _, err = cli(capsys, *argv, "--resume")
        assert code == 0, err
        assert tree_digest(mnt / "dst") == tree_digest(src)


def test_failure_lines_escape_control_characters(tmp_path, capsys, scheduler_address):
    """A name with a newline would print as two lines (one of them forged); it prints as one."""
    forged = "a\npfs: all 1000 files copied, nothing failed\x1b[2K"
    src = make_tree(tmp_path / "src", {forged: "x", "ok": "y"})
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / forged).mkdir()  # a directory where the file goes: that entry fails
    (dst / forged / "inside").write_text("z")
    code, _, err = cli(capsys, "cp", f"{src}/", dst, "--overwrite", "--scheduler", scheduler_address)
    assert code == 1, err
    assert not any(line.startswith("pfs: all 1000") for line in err.splitlines()), err
    assert "a\\npfs: all 1000" in err and "\x1b" not in err


def test_failure_logs_live_in_pfs_own_directory(tmp_path, capsys, scheduler_address, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    in_tmp = set(glob.glob(os.path.join(tempfile.gettempdir(), "pfs-*-failures-*")))
    src = make_tree(tmp_path / "src", {"f": "x"})
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "f").mkdir()  # fails every run
    for _ in range(2):
        code, _, err = cli(capsys, "cp", f"{src}/", dst, "--overwrite", "--scheduler", scheduler_address)
        assert code == 1, err
    logs = list((tmp_path / "cache").rglob("*failures*.parquet"))
    assert len(logs) == 1 and str(logs[0]) in err  # one per job, replaced by each run
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "pfs-*-failures-*"))) == in_tmp


@pytest.mark.parametrize(
    "address, warned",
    [
        ("tcp://127.0.0.1:8786", False),
        ("tcp://[::1]:8786", False),
        ("localhost:8786", False),
        ("tls://10.0.0.5:8786", False),
        ("tcp://10.0.0.5:8786", True),
        ("tcp://scheduler.example:8786", True),
        ("ws://192.168.1.2:8786", True),
    ],
)
def test_a_plain_tcp_scheduler_on_the_network_is_warned_about(address, warned):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warn_if_open(address)
    assert any(issubclass(w.category, InsecureSchedulerWarning) for w in seen) == warned


def test_the_cli_says_it_before_connecting(tmp_path):
    """Through the CLI: the warning is printed before the (here unreachable) scheduler is dialled."""
    src = make_tree(tmp_path / "src", {"f": "x"})
    env = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}
    proc = run_pfs("scan", src, "-o", tmp_path / "m", "--scheduler", "tcp://192.0.2.1:1", env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "anyone who can reach it can run code" in proc.stderr, proc.stderr
