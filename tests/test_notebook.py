"""pfs from a notebook, in a real Jupyter kernel (nbclient + ipykernel): the live progress display and its
summary (``dask_pfs.runtime.progress.NotebookProgress``), and nothing on a pipe when no reporter is given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]


def make_tree(root: Path, n: int = 50) -> None:
    (root / "a").mkdir(parents=True)
    for i in range(n):
        (root / "a" / f"f{i:02d}").write_bytes(b"x" * (i + 1))


def run_notebook(nb, cwd: Path, timeout: int = 300):
    """Execute ``nb`` in a fresh python3 kernel of this environment; return it with its outputs."""
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env_path) if p)  # the kernel inherits it
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
    return nb


def displays(cell) -> list[dict]:
    return [o["data"] for o in cell.outputs if o["output_type"] in ("display_data", "update_display_data")]


@pytest.mark.timeout(600)
def test_scan_in_notebook_shows_progress_and_summary(tmp_path):
    """``scan(src, out)`` with no progress argument: a display in the cell, its last state the summary."""
    make_tree(tmp_path / "t")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"from dask_pfs import scan\nr = scan({str(tmp_path / 't')!r}, 'm')")]
    run_notebook(nb, tmp_path)
    shown = displays(nb.cells[0])
    assert len(shown) == 1, nb.cells[0].outputs  # one display, updated in place
    text = shown[0]["text/plain"]
    assert text.startswith(f"scan {tmp_path / 't'}: done: 51 entries, 1.2 KiB"), text
    assert "<pre>" in shown[0]["text/html"]


def test_no_progress_on_a_pipe(tmp_path):
    """Not a notebook, stderr not a terminal: nothing is drawn (a batch job's output stays clean)."""
    make_tree(tmp_path / "t")
    code = "import sys; from dask_pfs import scan; scan(sys.argv[1], sys.argv[2])"
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "t"), str(tmp_path / "m")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == "", (done.stdout, done.stderr)


NOTEBOOK = REPO / "examples" / "pfs_notebook.ipynb"
JOBS = ("scan ", "copy ", "checksum ")  # the titles of the notebook's three jobs' displays


def job_displays(nb) -> list[str]:
    return [d["text/plain"] for cell in nb.cells if cell.cell_type == "code" for d in displays(cell)]


@pytest.mark.timeout(900)
def test_example_notebook_runs_in_a_kernel(tmp_path):
    """examples/pfs_notebook.ipynb, run again: scan, pandas and DuckDB (the user's connection) filters, copy and
    verify of the selection; each job shows its display ending in its summary.  Its saved outputs show the same
    (scripts/make-notebook.py wrote them by running it)."""
    saved = nbformat.read(NOTEBOOK, as_version=4)
    shown = job_displays(saved)
    assert [s.split(" ", 1)[0] + " " for s in shown] == list(JOBS), shown
    assert all(": done: " in s for s in shown), shown
    assert any("<table><caption>pfs manifest</caption>" in str(c.outputs) for c in saved.cells if c.cell_type == "code")

    fresh = nbformat.read(NOTEBOOK, as_version=4)
    for cell in fresh.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    run_notebook(fresh, tmp_path, timeout=600)
    shown = job_displays(fresh)
    assert [s.split(" ", 1)[0] + " " for s in shown] == list(JOBS) and all(": done: " in s for s in shown), shown
    results = [
        o for c in fresh.cells if c.cell_type == "code" for o in c.outputs if o["output_type"] == "execute_result"
    ]
    text = [r["data"]["text/plain"] for r in results]
    assert any("'same': 9" in t and "'different': 0" in t for t in text), text  # verify: the 9 picked files
    assert any("'files': 9" in t and "'failed': 0" in t for t in text), text  # copy
    assert any("ann" in t and "bob" in t for t in text), text  # the DuckDB join with the user's table
