#!/usr/bin/env python3
"""Write examples/pfs_notebook.ipynb from its cells below and run it in a real Jupyter kernel (nbclient),
so the committed notebook carries its outputs: the progress displays, the summaries, the tables.

    .venv/bin/python scripts/make-notebook.py        # rewrite examples/pfs_notebook.ipynb

tests/test_notebook.py runs the committed notebook's cells again and checks both.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "examples" / "pfs_notebook.ipynb"

CELLS = [
    (
        "markdown",
        """# pfs from a notebook: scan, filter, copy, verify

Scan a tree into a Parquet manifest, filter its rows with **pandas** and with **DuckDB on your own
connection** (joined with a table of your own), copy exactly the selection, and verify the copy by content.
Each job shows a live line while it runs and its summary when it ends. With no scheduler (`PFS_SCHEDULER`
unset) small jobs run in this kernel's process; a job that lasts starts a local Dask cluster on its own.

The first cell makes a small sample tree; set `PFS_EXAMPLE_SRC` to scan a tree of your own instead.""",
    ),
    (
        "code",
        """import os
import tempfile
from pathlib import Path

import duckdb

from dask_pfs import copy, open_manifest, scan, verify

work = Path(tempfile.mkdtemp(prefix="pfs-example-"))
src = Path(os.environ.get("PFS_EXAMPLE_SRC") or work / "data")
if "PFS_EXAMPLE_SRC" not in os.environ:  # a sample tree: 3 instruments, a few runs each, and a .git to leave out
    for instrument in ("cryo", "lidar", "xray"):
        for run in range(4):
            d = src / instrument / f"run{run}"
            d.mkdir(parents=True)
            (d / "frames.h5").write_bytes(b"h" * (2000 * (run + 1)))
            (d / "notes.txt").write_text(f"{instrument} run {run}")
    (src / ".git").mkdir()
    (src / ".git" / "config").write_text("[core]")
manifest, dest = work / "manifest", work / "staged"
src""",
    ),
    ("markdown", "## 1. Scan (the same options as `pfs scan`, as plain keywords)"),
    (
        "code",
        """scanned = scan(src, manifest, exclude=[".git/"])
scanned.counts""",
    ),
    (
        "code",
        """m = open_manifest(manifest)
m  # a notebook shows the manifest's summary""",
    ),
    ("markdown", "## 2. Filter with pandas"),
    (
        "code",
        """files = m.to_pandas(where="type = 'file'")
picked = files[files.name.str.endswith(".h5") & (files["size"] >= 4000)]
picked[["path", "size"]]""",
    ),
    ("markdown", "## 3. Filter with DuckDB, on your own connection, joined with your own data"),
    (
        "code",
        """con = duckdb.connect()
owners = "VALUES ('cryo', 'ann'), ('lidar', 'bob'), ('xray', 'ann')"  # your own data
con.execute(f"CREATE TABLE owners AS SELECT * FROM ({owners}) t(instrument, owner)")
m.query("type = 'file'", select="path, size", con=con).create_view("files")
con.sql(\"\"\"
    SELECT owner, count(*) AS files, sum(size)::BIGINT AS bytes
    FROM files JOIN owners ON split_part(path, '/', 1) = instrument
    GROUP BY owner ORDER BY owner
\"\"\").df()""",
    ),
    ("markdown", "## 4. Copy exactly the pandas selection, then verify it by content"),
    (
        "code",
        """copied = copy(None, dest, manifest=manifest, selection=picked)
copied.counts""",
    ),
    (
        "code",
        """checked = verify(None, dest, src_manifest=manifest, selection=picked)
assert checked.exit_code == 0, checked.samples
checked.counts""",
    ),
]


def notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
        for kind, text in CELLS
    ]
    return nb


def execute(nb: nbformat.NotebookNode, cwd: str, timeout: int = 600) -> nbformat.NotebookNode:
    """Run ``nb`` in a fresh python3 kernel of this interpreter, with pfs importable from this checkout."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), old) if p)
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return nb


def main() -> None:
    with tempfile.TemporaryDirectory() as cwd:
        nb = execute(notebook(), cwd)
    nbformat.write(nb, OUT)
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
