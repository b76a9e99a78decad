# %% [markdown]
# # Bulk scan from a notebook
#
# Scan a tree on a Dask cluster into a Parquet manifest, summarise it with DuckDB, and plot the
# file-size distribution and the biggest top-level directories.  Cells are marked ``# %%``
# (Jupyter, VS Code and jupytext open this file as a notebook); it also runs as a script:
#
#     python examples/notebook_scan.py /lustre/project /tmp/project-manifest [plot.png]
#
# Set ``PFS_SCHEDULER=tcp://host:8786`` to use a running cluster instead of an embedded one.
# Each step is a function and the last cell calls them: an embedded cluster's worker processes
# re-import the main module, so nothing may run at import time outside ``__main__``.

# %%
from __future__ import annotations

import os
import sys

import duckdb
import matplotlib

matplotlib.use("Agg")  # files, not windows: this also runs headless
import matplotlib.pyplot as plt

from dask_pfs import ScanResult, open_manifest, scan
from dask_pfs.runtime.progress import human_bytes

TOP = 10


# %% 1. Scan (an embedded LocalCluster unless PFS_SCHEDULER is set)
def run_scan(root: str, manifest: str) -> ScanResult:
    result = scan(root, manifest, overwrite=True)
    print(f"scanned {result.root}: {result.counts['entries']:,} entries in {result.seconds:.1f} s")
    return result


# %% 2. Summaries with DuckDB, straight from the Parquet parts (no file list in Python)
def summarise(manifest: str) -> dict:
    con = duckdb.connect()  # the notebook's own DuckDB: a manifest is plain Parquet
    con.read_parquet(open_manifest(manifest).part_files()).create_view("rows")  # the paths as values, not SQL
    rows = "rows"
    files, dirs, size, errors = con.execute(
        f"SELECT count(*) FILTER (WHERE type = 'file'), count(*) FILTER (WHERE type = 'directory'), "
        f"coalesce(sum(size) FILTER (WHERE type = 'file'), 0), count(*) FILTER (WHERE error IS NOT NULL) FROM {rows}"
    ).fetchall()[0]
    by_ext = con.execute(
        f"SELECT CASE WHEN strpos(name, '.') > 1 THEN lower(regexp_extract(name, '\\.([^.]*)$', 1)) "
        f"ELSE '(none)' END AS ext, count(*) AS files, sum(size) AS bytes FROM {rows} WHERE type = 'file' "
        f"GROUP BY ext ORDER BY bytes DESC, ext LIMIT {TOP}"
    ).fetchall()
    top_dirs = con.execute(  # files directly below the root are counted together
        f"SELECT CASE WHEN strpos(path, '/') = 0 THEN '(root files)' ELSE split_part(path, '/', 1) END AS top, "
        f"count(*) AS files, sum(size) AS bytes FROM {rows} WHERE type = 'file' "
        f"GROUP BY top ORDER BY bytes DESC, top LIMIT {TOP}"
    ).fetchall()
    counted = dict(
        con.execute(  # power-of-two size bins; -1 holds empty files
            f"SELECT CASE WHEN size = 0 THEN -1 ELSE floor(log2(size))::INT END AS bin, count(*) "
            f"FROM {rows} WHERE type = 'file' GROUP BY bin"
        ).fetchall()
    )
    bins = [(b, counted.get(b, 0)) for b in range(min(counted), max(counted) + 1)] if counted else []
    print(f"files {files:,}  directories {dirs:,}  size {human_bytes(size)}  errors {errors:,}")
    print("by extension:")
    for ext, n, nbytes in by_ext:
        print(f"  {ext:>10}  {n:>10,} files  {human_bytes(nbytes):>10}")
    print("top directories:")
    for name, n, nbytes in top_dirs:
        print(f"  {name:<30} {n:>10,} files  {human_bytes(nbytes):>10}")
    return {"files": files, "bytes": size, "by_ext": by_ext, "top_dirs": top_dirs, "bins": bins}


# %% 3. Plot: size histogram and top directories
def plot(summary: dict, title: str, path: str) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), layout="constrained")
    bins = summary["bins"]
    left.bar(range(len(bins)), [n for _, n in bins], color="#4c72b0")
    labels = ["0 B" if b < 0 else human_bytes(2**b) for b, _ in bins]
    left.set_xticks(range(len(bins)), labels, rotation=60, ha="right", fontsize=8)
    left.set_xlabel("file size (lower bound of a power-of-two bin)")
    left.set_ylabel("files")
    left.set_title(f"File sizes: {summary['files']:,} files, {human_bytes(summary['bytes'])}")
    top = summary["top_dirs"][::-1]
    bars = right.barh([name for name, _, _ in top], [nbytes / 2**20 for _, _, nbytes in top], color="#dd8452")
    right.bar_label(bars, [human_bytes(nbytes) for _, _, nbytes in top], padding=3, fontsize=8)
    right.set_xlabel("MiB")
    right.set_title(f"Top {len(top)} directories under {title}")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot written to {path}")


# %% Run
if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    manifest = sys.argv[2] if len(sys.argv) > 2 else "/tmp/pfs-notebook-manifest"
    out = sys.argv[3] if len(sys.argv) > 3 else "pfs-scan-summary.png"
    run_scan(root, manifest)
    plot(summarise(manifest), os.path.basename(root.rstrip("/")) or root, out)
