# %% [markdown]
# # Select with Dask, act with pfs
#
# Scan a tree into a manifest, pick files with ``dask.dataframe`` the way you would filter any
# table, look at what was picked, then hand the selection to ``pfs`` to copy (and verify) exactly
# those files.  The frame only *selects*: pfs semi-joins it with the manifest, so the paths, sizes
# and safety checks are the manifest's own.  Cells are marked ``# %%``; it also runs as a script:
#
#     python examples/notebook_select_copy.py SRC MANIFEST DEST [SUFFIX] [MIN_BYTES]
#
# e.g. every ``.h5`` file of at least 1 MiB.  Set ``PFS_SCHEDULER=tcp://host:8786`` to use a
# running cluster; otherwise an embedded one is started.  Nothing runs at import time (embedded
# workers re-import the main module).

# %%
from __future__ import annotations

import sys

import dask.dataframe as dd
from distributed import Client

from dask_pfs import connect, copy, open_manifest, scan, verify
from dask_pfs.runtime.progress import human_bytes


# %% 1. Scan (pruned: version-control and cache directories are never listed)
def run_scan(client: Client, src: str, manifest: str) -> None:
    from operators.scan.prune import Prune

    result = scan(src, manifest, client, overwrite=True, prune=Prune(exclude=(".git/", "__pycache__/")))
    print(f"scanned {result.root}: {result.counts['entries']:,} entries, {result.counts['pruned']:,} left out")


# %% 2. Select with dask.dataframe
def select(manifest: str, suffix: str, min_bytes: int) -> dd.DataFrame:
    files = open_manifest(manifest).to_dask(columns=["path", "path_raw", "name", "type", "size", "mtime"])
    return files[(files.type == "file") & files.name.str.endswith(suffix) & (files["size"] >= min_bytes)]


# %% 3. Look at the selection: count and bytes per top-level directory
def summarise(picked: dd.DataFrame) -> None:
    top = picked.assign(top=picked.path.str.split("/").str[0])
    table = top.groupby("top")["size"].agg(["count", "sum"]).compute().sort_values("sum", ascending=False)
    print(f"selected {int(table['count'].sum()):,} files, {human_bytes(int(table['sum'].sum()))}")
    for name, row in table.iterrows():
        print(f"  {name:<30} {int(row['count']):>8,} files  {human_bytes(int(row['sum'])):>10}")


# %% 4. Copy exactly the selection, then verify it by content
def copy_selection(client: Client, manifest: str, picked: dd.DataFrame, dest: str) -> int:
    result = copy(None, dest, manifest=manifest, selection=picked, client=client)
    print(f"copied {result.counts['files']:,} files, {human_bytes(result.counts['bytes'])} -> {dest}")
    check = verify(None, dest, src_manifest=manifest, selection=picked, client=client)  # sums only the selection
    print(f"verified: {check.counts['same']:,} the same, {check.failed:,} differing")
    return max(result.exit_code, check.exit_code)


# %% Run
if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__ or "usage: notebook_select_copy.py SRC MANIFEST DEST [SUFFIX] [MIN_BYTES]")
    src, manifest, dest = sys.argv[1:4]
    suffix = sys.argv[4] if len(sys.argv) > 4 else ".h5"
    min_bytes = int(sys.argv[5]) if len(sys.argv) > 5 else 1 << 20
    with connect() as client, client.as_current():  # the Dask DataFrame runs on the same cluster
        run_scan(client, src, manifest)
        picked = select(manifest, suffix, min_bytes)
        summarise(picked)
        sys.exit(copy_selection(client, manifest, picked, dest))
