"""The fault suite's CI policy (tests/faults/conftest.py): a fault test that cannot run here skips on a
developer's host but fails in CI (``CI`` set) or with ``PFS_REQUIRE_FAULTS=1``; xfails stay xfails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from .conftest import REPO

PROBE = """
import pytest


def test_needs_fuse():
    pytest.skip("needs /dev/fuse (probe)")


@pytest.mark.xfail(reason="probe", strict=True)
def test_known_failure():
    raise AssertionError
"""


@pytest.mark.parametrize(
    ("env", "outcome"),
    [
        ({"CI": "", "PFS_REQUIRE_FAULTS": ""}, "1 skipped, 1 xfailed"),
        ({"CI": "false", "PFS_REQUIRE_FAULTS": ""}, "1 skipped, 1 xfailed"),
        ({"CI": "true", "PFS_REQUIRE_FAULTS": ""}, "1 failed, 1 xfailed"),
        ({"CI": "", "PFS_REQUIRE_FAULTS": "1"}, "1 failed, 1 xfailed"),
    ],
    ids=["developer", "ci-false", "ci", "required"],
)
def test_unrunnable_fault_tests_fail_in_ci(tmp_path, env, outcome):
    faults = tmp_path / "tests" / "faults"
    faults.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "faults" / "conftest.py", faults / "conftest.py")
    (faults / "test_probe.py").write_text(PROBE)
    quiet = ["-q", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestUnknownMarkWarning"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *quiet, "--rootdir", str(tmp_path), str(faults)],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **env}, timeout=120,
    )  # fmt: skip
    assert outcome in run.stdout, run.stdout + run.stderr
    if outcome.startswith("1 failed"):
        assert "fault test cannot run here" in run.stdout and "needs /dev/fuse (probe)" in run.stdout, run.stdout
