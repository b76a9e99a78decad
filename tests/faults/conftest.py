"""Every test here injects a real fault (marker ``faults``; run by ``make test``, ~2-3 min).

Some need root, ``/dev/fuse`` or libfuse3 and skip where those are missing (a developer's laptop).
In CI (``CI`` set, as CI services and ``.ci/run`` environments do) or with ``PFS_REQUIRE_FAULTS=1``
such a skip is a failure instead: docs/reliability.md promises these faults run on every
``make test``, so a CI host that cannot run them must say so, not pass quietly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

# no import from the package: tests/test_fault_policy.py runs this file alone in a scratch tree
REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/faults/" in str(item.fspath):
            item.add_marker(pytest.mark.faults)


def faults_required() -> bool:
    """True where a fault test that cannot run must fail: CI, or ``PFS_REQUIRE_FAULTS=1``."""
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return ci or os.environ.get("PFS_REQUIRE_FAULTS", "").strip() == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and "tests/faults/" in str(item.fspath) and faults_required():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"fault test cannot run here (CI or PFS_REQUIRE_FAULTS=1 requires it): {reason}"


@pytest.fixture
def root_only():
    if os.geteuid() != 0:
        pytest.skip("needs root (mounts a tmpfs / FUSE file system)")


@pytest.fixture(scope="session")
def latfs_binary(tmp_path_factory) -> Path:
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("needs root and /dev/fuse")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True)
    if flags.returncode or not shutil.which("cc"):
        pytest.skip("needs gcc and libfuse3-dev (scripts/ensure-tools.sh installs them)")
    out = tmp_path_factory.mktemp("latfs") / "latfs"
    cmd = ["cc", "-O2", "-o", str(out), str(REPO / "benchmarks/latfs/latfs.c"), *flags.stdout.split()]
    subprocess.run(cmd, check=True)
    return out
