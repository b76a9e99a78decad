"""Manifest directories: the completion marker, opening for reading, and safe clean-up.

A manifest is a directory of ``part-*.parquet`` files plus ``_manifest.json``, written last.
No marker means the scan failed or was interrupted: readers refuse such a directory unless
asked to read it anyway (then they warn).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import warnings
from dataclasses import dataclass, field
from typing import Any

import fsspec

from operators.schema import MARKER_NAME, PART_PREFIX, PART_SUFFIX, SCHEMA, SCHEMA_VERSION

from . import __version__
from .errors import IncompleteManifestError, PfsError

JOURNAL_PREFIX = ".pfs-journal-"  # a job's journal kept in the manifest directory (docs/journal.md)


def _fs(url: str, storage_options: dict | None = None):
    """The file system of ``url``; ``storage_options`` are for remote ones (a local path takes none)."""
    local = fsspec.utils.get_protocol(url) in ("file", "local")
    return fsspec.core.url_to_fs(url, **({} if local else storage_options or {}))


@dataclass
class Manifest:
    """An opened manifest directory; ``storage_options`` open it (an object store's credentials)."""

    url: str
    info: dict[str, Any]
    complete: bool
    storage_options: dict | None = None
    _remote_parts: list[str] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def root(self) -> str:
        return self.info["root"]

    @property
    def is_local(self) -> bool:
        return fsspec.utils.get_protocol(self.url) in ("file", "local")

    @property
    def local_dir(self) -> str:
        """The absolute directory of a local manifest."""
        return os.path.abspath(self.url.removeprefix("file://"))

    @property
    def table_name(self) -> str:
        """The name a manifest on an object store is registered under (``dask_pfs.sql.connect``)."""
        return "pfs_manifest_" + hashlib.sha1(self.url.encode()).hexdigest()[:12]

    @property
    def parts_glob(self) -> str:
        """What DuckDB's ``read_parquet`` takes (local manifests)."""
        return f"{self.local_dir}/{PART_PREFIX}*{PART_SUFFIX}"

    @functools.cached_property
    def _fs_path(self):
        return _fs(self.url, self.storage_options)

    def part_files(self) -> list[str]:
        """The part files, sorted; listed once for a manifest on an object store (a complete one does
        not change), every time for a local one (cheap, and a streamed copy reads one being written)."""
        if not self.is_local and self._remote_parts is not None:
            return self._remote_parts
        fs, path = self._fs_path
        names = sorted(fs.glob(f"{path.rstrip('/')}/{PART_PREFIX}*{PART_SUFFIX}"))
        if not self.is_local:
            self._remote_parts = names
        return names

    def dataset(self):
        """A ``pyarrow.dataset`` over the part files."""
        import pyarrow.dataset as ds

        fs, _ = self._fs_path
        return ds.dataset(self.part_files(), schema=SCHEMA, format="parquet", filesystem=fs)

    def relation_sql(self, filename: bool = False) -> str:
        """A DuckDB table expression over the parts (works for an empty manifest too); ``filename``
        adds the column of that name: the part each row is in (local manifests).  A manifest on
        an object store is a table registered by ``dask_pfs.sql.connect``."""
        files = self.part_files()
        if not files:
            cols = ", ".join(f'NULL::{_duck_type(f)} AS "{f.name}"' for f in SCHEMA)
            return f"(SELECT {cols}{', NULL::VARCHAR AS filename' if filename else ''} WHERE false)"
        if not self.is_local:
            if filename:
                raise PfsError(f"{self.url}: the part of each row is known only for local manifests")
            return self.table_name
        return f"read_parquet({sql_str(self.parts_glob)}{', filename = true' if filename else ''})"

    # As frames (``dask_pfs.frames``): filter with Dask, pandas or pyarrow, then pass the result to
    # copy/remove/verify as ``selection=``.

    def query(self, where: str | None = None, select: str | None = None, order: str | None = None,
              limit: int | None = None):  # fmt: skip
        """The rows matching the SQL condition ``where``: a lazy ``duckdb.DuckDBPyRelation``."""
        from .frames import query

        return query(self, where, select, order, limit)

    def to_arrow(self, where: str | None = None, columns: list[str] | None = None):
        """The (selected) rows as a ``pyarrow.Table``."""
        from .frames import to_arrow

        return to_arrow(self, where, columns)

    def to_pandas(self, where: str | None = None, columns: list[str] | None = None):
        """The (selected) rows as a ``pandas.DataFrame``."""
        from .frames import to_pandas

        return to_pandas(self, where, columns)

    def to_dask(self, columns: list[str] | None = None, **read_parquet):
        """A ``dask.dataframe`` over the part files (``read_parquet`` options pass through)."""
        from .frames import to_dask

        return to_dask(self, columns, **read_parquet)


def _duck_type(field) -> str:
    import pyarrow as pa

    t = field.type
    if pa.types.is_dictionary(t) or pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_binary(t):
        return "BLOB"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ"
    if pa.types.is_unsigned_integer(t):
        return "UBIGINT"
    return "BIGINT"


def sql_str(s: str) -> str:
    """A DuckDB string literal."""
    return "'" + s.replace("'", "''") + "'"


def has_marker(url: str, storage_options: dict | None = None) -> bool:
    fs, path = _fs(url, storage_options)
    return fs.exists(f"{path.rstrip('/')}/{MARKER_NAME}")


def open_manifest(
    url: str | os.PathLike, allow_incomplete: bool = False, storage_options: dict | None = None
) -> Manifest:
    """Open a manifest; refuse one without a completion marker unless ``allow_incomplete``.

    ``storage_options`` open a manifest on an object store (credentials, endpoint); the
    :class:`Manifest` keeps them for its later reads."""
    url = os.fspath(url)
    fs, path = _fs(url, storage_options)
    if not fs.isdir(path):
        raise PfsError(f"{url}: no such manifest directory")
    marker = f"{path.rstrip('/')}/{MARKER_NAME}"
    if not fs.exists(marker):
        if not allow_incomplete:
            raise IncompleteManifestError(
                f"{url}: no {MARKER_NAME}: the scan that wrote it failed or was interrupted "
                "(rerun the scan, or pass --allow-incomplete to read it anyway)"
            )
        warnings.warn(f"{url}: incomplete manifest (no {MARKER_NAME})", stacklevel=2)
        return Manifest(url, {"root": None, "complete": False}, False, storage_options)
    with fs.open(marker, "r") as f:
        info = json.load(f)
    version = info.get("schema_version")
    if version != SCHEMA_VERSION:
        raise PfsError(f"{url}: manifest schema version {version}, this pfs reads version {SCHEMA_VERSION}")
    return Manifest(url, info, True, storage_options)


def prepare_output(url: str, overwrite: bool, storage_options: dict | None = None) -> None:
    """Make the output directory, refusing to clobber an existing manifest unless ``overwrite``."""
    fs, path = _fs(url, storage_options)
    path = path.rstrip("/")
    if fs.exists(path):
        if not fs.isdir(path):
            raise PfsError(f"{url}: exists and is not a directory")
        existing = fs.ls(path, detail=False)
        if existing:
            looks_like_manifest = any(
                os.path.basename(p).startswith((PART_PREFIX, MARKER_NAME, ".part-", JOURNAL_PREFIX)) for p in existing
            )
            if not looks_like_manifest:
                raise PfsError(f"{url}: directory is not empty and holds no manifest; refusing to write there")
            if not overwrite:
                raise PfsError(
                    f"{url}: already holds a manifest; pass --overwrite to replace it"
                    + ("" if fs.exists(f"{path}/{MARKER_NAME}") else " (or --resume to finish the interrupted scan)")
                )
            remove_manifest_files(url, storage_options=storage_options)
            for p in existing:  # journals of jobs on the old manifest (an interrupted scan, an rm)
                if os.path.basename(p.rstrip("/")).startswith(JOURNAL_PREFIX):
                    fs.rm(p, recursive=True)
    fs.makedirs(path, exist_ok=True)


def remove_manifest_files(url: str, keep: set[str] | None = None, storage_options: dict | None = None) -> int:
    """Delete the marker, part files and temp parts (except names in ``keep``); return the count."""
    fs, path = _fs(url, storage_options)
    removed = 0
    for p in fs.ls(path.rstrip("/"), detail=False):
        name = os.path.basename(p.rstrip("/"))
        is_ours = name == MARKER_NAME or name.startswith((PART_PREFIX, ".part-"))
        if is_ours and (keep is None or name not in keep):
            fs.rm(p)
            removed += 1
    return removed


def write_marker(url: str, info: dict[str, Any], storage_options: dict | None = None) -> None:
    """Write ``_manifest.json`` last (temp name + rename where the file system has one)."""
    fs, path = _fs(url, storage_options)
    info = {
        "format": "pfs-manifest",
        "schema_version": SCHEMA_VERSION,
        "pfs_version": __version__,
        "host": socket.gethostname(),
        **info,
    }
    final = f"{path.rstrip('/')}/{MARKER_NAME}"
    data = json.dumps(info, indent=2, sort_keys=False, default=str)
    if fs.protocol in ("file", "local") or "file" in fs.protocol:
        tmp = final + ".tmp"
        with open(tmp, "w") as f:
            f.write(data)
        os.replace(tmp, final)
    else:
        with fs.open(final, "w") as f:
            f.write(data)
