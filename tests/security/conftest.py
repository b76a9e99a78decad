"""The standing adversarial suite (issue 27): every attack here once worked on main; each test keeps it
from working again.  Run by ``make test`` (plain pytest); marker ``security``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dask_pfs.cli import run


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/security/" in str(item.fspath):
            item.add_marker(pytest.mark.security)


def snapshot(root: Path) -> dict[bytes, tuple]:
    """Everything an attack could change below (and at) ``root``: names, kinds, modes, owners, times."""
    out: dict[bytes, tuple] = {}
    base = os.fsencode(root)
    s = os.lstat(base)
    out[b"."] = (s.st_mode, s.st_uid, s.st_gid, s.st_mtime_ns, s.st_size)
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            s = os.lstat(full)
            out[os.path.relpath(full, base)] = (s.st_mode, s.st_uid, s.st_gid, s.st_mtime_ns, s.st_size)
    return out


def outside_dir(path: Path) -> Path:
    """A directory an attacker points a link at: mode 700, times of 2020, one file inside."""
    path.mkdir()
    (path / "keep.txt").write_text("mine")
    os.chmod(path, 0o700)
    os.utime(path, (1577836800, 1577836800))
    return path


def cli(capsys, *argv) -> tuple[int, str, str]:
    """``pfs ARGV`` in this process; (exit code, stdout, stderr)."""
    code = run([os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str, exit_code: int = 2) -> None:
    assert code == exit_code, (code, err)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("  ", "log of"))]
    assert "Traceback" not in err, err
    assert lines and lines[-1].startswith("pfs: error: "), err
