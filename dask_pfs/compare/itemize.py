"""Change lines in the style of ``rsync --itemize-changes`` (``-i``), read from a sync plan.

One line per entry that is (or would be) changed, ``YXcstpoguax PATH``:

* ``Y``: ``>`` a file is received (copied), ``c`` a directory, symlink or special file is created
  or changed, ``.`` only its attributes change, ``*`` a message (``*deleting``);
* ``X``: ``f`` file, ``d`` directory, ``L`` symlink, ``S`` special file;
* then ``+++++++++`` for a new entry, else one letter per attribute that differs (``.`` when
  not): ``c`` checksum, ``s`` size, ``t`` modification time, ``p`` permissions, ``a`` ACL
  presence, ``x`` extended attributes (a sync comparing attributes); ``o``, ``g``, ``u`` (owner,
  group, atime) are never compared and stay ``.``.

The plan (``dask_pfs.compare.plan``) is read with pyarrow, a batch at a time: a plan of a hundred million
rows streams.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow.parquet as pq

HELP = (
    "Print a change line per entry, like rsync -i: YXcstpoguax PATH; Y: > file copied, c created "
    "(directory, symlink), . attributes only, * message (*deleting); X: f file, d directory, "
    "L symlink, S special; then +++++++++ for new, or c checksum, s size, t time, p permissions "
    "a ACL, x xattrs (. unchanged)."
)
COLUMNS = ["path", "src_type", "dst_type", "size", "dst_size", "mtime", "dst_mtime", "checksum", "dst_checksum",
           "action"]  # fmt: skip
ATTR_COLUMNS = ["xattrs_differ", "acl_differs"]  # plans of a pfs before attributes have none
KIND = {"file": "f", "directory": "d", "symlink": "L"}
DELETING = "*deleting  "


def itemize(plan_file: str, *, delete: bool, replace_changed: bool = True) -> Iterator[str]:
    """Change lines of the plan's rows, in path order: copies, type changes and (with ``delete``)
    extras; ``replace_changed=False`` (``--ignore-existing``) leaves changed entries out."""
    table = pq.ParquetFile(plan_file)
    columns = COLUMNS + [c for c in ATTR_COLUMNS if c in table.schema_arrow.names]
    for batch in table.iter_batches(columns=columns, batch_size=10_000):
        for row in batch.to_pylist():
            yield from _lines(row, delete, replace_changed)


def _lines(r: dict, delete: bool, replace_changed: bool) -> Iterator[str]:
    action, path = r["action"], r["path"]
    if action == "new":
        yield f"{_new(r['src_type'])} {_name(path, r['src_type'])}"
    elif action == "extra" and delete:
        yield f"{DELETING} {_name(path, r['dst_type'])}"
    elif action == "type-changed" and replace_changed:
        yield f"{DELETING} {_name(path, r['dst_type'])}"
        yield f"{_new(r['src_type'])} {_name(path, r['src_type'])}"
    elif action == "changed" and replace_changed:
        yield f"{_changed(r)} {_name(path, r['src_type'])}"


def _new(kind: str | None) -> str:
    x = KIND.get(kind or "", "S")
    return (">" if x == "f" else "c") + x + "+" * 9


def _changed(r: dict) -> str:
    x = KIND.get(r["src_type"] or "", "S")
    c = (
        "c"
        if r["checksum"] is not None and r["dst_checksum"] is not None and r["checksum"] != r["dst_checksum"]
        else "."
    )
    s = "s" if r["size"] != r["dst_size"] and x == "f" else "."
    t = "t" if r["mtime"] != r["dst_mtime"] else "."
    a = "a" if r.get("acl_differs") else "."
    xa = "x" if r.get("xattrs_differ") else "."
    p = "p" if x == "d" and t == "." and a == xa == "." else "."  # a directory changes by mtime or mode
    y = ">" if x == "f" else "c" if x == "L" else "."
    return f"{y}{x}{c}{s}{t}{p}...{a}{xa}"


def _name(path: str, kind: str | None) -> str:
    return f"{path}/" if kind == "directory" else path


__all__ = ["HELP", "itemize"]
