"""A ``pfs cp`` that finds everything already copied says so: 0 made, N already there (issue 46: a no-op copy
reported 390 directories)."""

from __future__ import annotations

import json

from dask_pfs import copy

from .conftest import make_tree, run_pfs

DIRS = 130  # d<i>/e/f: 390 directories, 130 files


def test_a_noop_copy_reports_nothing_made(tmp_path):
    src = make_tree(tmp_path / "src", {f"d{i}/e/f/x": str(i).encode() for i in range(DIRS)})
    first = run_pfs("cp", f"{src}/", tmp_path / "dst", check=True).stdout
    assert f"{DIRS} files" in first and f"{3 * DIRS} directories made," in first, first
    again = run_pfs("cp", f"{src}/", tmp_path / "dst", check=True).stdout
    assert "0 files, 0 B, 0 directories made (390 there already)" in again, again
    assert f"{DIRS} skipped" in again, again
    summary = json.loads(run_pfs("cp", f"{src}/", tmp_path / "dst", "--json", check=True).stdout)
    assert summary["counts"]["dirs"] == 0 and summary["counts"]["dirs_existing"] == 3 * DIRS, summary

    (src / "new/sub").mkdir(parents=True)
    result = copy(f"{src}/", tmp_path / "dst")  # the API's counts: only what this run made
    assert (result.counts["dirs"], result.counts["dirs_existing"], result.counts["files"]) == (2, 3 * DIRS, 0)
    assert result.counts["skipped"] == DIRS


def test_a_phased_copy_into_a_new_destination_counts_what_it_made(tmp_path):
    src = make_tree(tmp_path / "src", {f"d{i}/x": b"1" for i in range(20)})
    result = copy(f"{src}/", tmp_path / "dst", stream=False)
    assert (result.counts["dirs"], result.counts["dirs_existing"]) == (20, 0)
