"""Every test here injects a real fault (marker ``faults``; run by ``make test``, ~2-3 min)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/faults/" in str(item.fspath):
            item.add_marker(pytest.mark.faults)


@pytest.fixture
def root_only():
    if os.geteuid() != 0:
        pytest.skip("needs root (mounts a tmpfs / FUSE file system)")
