"""Manifest directories and the selections jobs read from them.

A manifest is a directory of ``part-*.parquet`` files plus ``_manifest.json``, written last.
No marker means the scan failed or was interrupted: readers refuse such a directory unless
asked to read it anyway (then they warn).  A :class:`Selection` is the rows a ``--where``
condition picks: what ``cp``, ``rm``, ``verify``, ``sync`` and the Airflow provider count and
stream, out of core, in DuckDB.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dask_pfs.errors import IncompleteManifestError, Named, NotAManifestError, OutputError, PfsError, QueryError
from dask_pfs.manifests.caps import Cap
from dask_pfs.manifests.relations import MANIFEST_PREFIX
from dask_pfs.manifests.root import root_identity
from dask_pfs.manifests.sql import Filter, file_table, literal, read_also, utf8, where_filter, write_parquet
from dask_pfs.manifests.sql import connect as locked
from dask_pfs.manifests.sql_probe import probe_manifest
from dask_pfs.manifests.sql_run import deadline
from dask_pfs.options import named
from dask_pfs.places import local_path, protocol_of
from dask_pfs.version import __version__
from operators.core import localfs, outputs
from operators.schema import (
    MARKER_NAME,
    PART_PREFIX,
    PART_SUFFIX,
    READABLE_VERSIONS,
    SCHEMA,
    SCHEMA_VERSION,
)

if TYPE_CHECKING:
    import duckdb

JOURNAL_PREFIX = ".pfs-journal-"  # a job's journal kept in the manifest directory (docs/journal.md)
BATCH_ROWS = 20_000  # rows per record batch streamed out of DuckDB


# Where pfs reads and writes manifests: local (and mounted) directories, object stores, SFTP.  Any other fsspec
# protocol is refused: ``http://`` would turn a manifest argument into a GET its query string steers anywhere.
MANIFEST_PROTOCOLS = ("file", "local", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "sftp", "ssh")


def check_manifest_protocol(url: str) -> str:
    """The protocol of a manifest URL, or PfsError (one line, credentials redacted) for one pfs does not
    read manifests from (:data:`MANIFEST_PROTOCOLS`)."""
    protocol = protocol_of(os.fspath(url))
    if protocol not in MANIFEST_PROTOCOLS:
        raise PfsError(
            f"manifest {url}: protocol {protocol!r} is not one pfs keeps manifests on "
            "(a local path or file://, s3://, gs://, az:// or abfs://, sftp://)"
        )
    return protocol


def _fs(url: str, storage_options: dict | None = None):
    """The file system of ``url``; ``storage_options`` are for remote ones (a local path takes none)."""
    local = check_manifest_protocol(url) in ("file", "local")
    return localfs.url_to_fs(url, **({} if local else storage_options or {}))


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
        return protocol_of(self.url) in ("file", "local")

    @property
    def local_dir(self) -> str:
        """The absolute directory of a local manifest."""
        path = local_path(self.url)  # the one reading of a place (dask_pfs.urls)
        assert path is not None, self.url
        return path

    @property
    def table_name(self) -> str:
        """The name of the manifest's rows on a connection made for it (``dask_pfs.manifests.sql.connect``)."""
        return MANIFEST_PREFIX + hashlib.sha1(self.url.encode("utf-8", "surrogateescape")).hexdigest()[:12]

    @property
    def parts_glob(self) -> str:
        """The pattern DuckDB's ``read_parquet`` takes (local manifests): the directory matched as it is."""
        return f"{literal(self.local_dir)}/{PART_PREFIX}*{PART_SUFFIX}"

    @functools.cached_property
    def _fs_path(self):
        return _fs(self.url, self.storage_options)

    def part_files(self) -> list[str]:
        """The part files, sorted; listed once for a manifest on an object store (a complete one does
        not change), every time for a local one (cheap, and a streamed copy reads one being written)."""
        if not self.is_local and self._remote_parts is not None:
            return self._remote_parts
        if self.is_local:  # one directory read (fsspec's glob stats every entry: a round trip each on NFS/FUSE)
            try:
                with os.scandir(self.local_dir) as entries:
                    return sorted(
                        os.path.join(self.local_dir, e.name)
                        for e in entries
                        if e.name.startswith(PART_PREFIX) and e.name.endswith(PART_SUFFIX) and e.is_file()
                    )
            except FileNotFoundError:
                return []
        fs, path = self._fs_path
        names = sorted(fs.glob(f"{path.rstrip('/')}/{PART_PREFIX}*{PART_SUFFIX}"))
        if not self.is_local:
            self._remote_parts = names
        return names

    def dataset(self):
        """A ``pyarrow.dataset`` over the part files."""
        import pyarrow.dataset as ds

        fs = None if self.is_local else self._fs_path[0]  # local parts: pyarrow's own file system reads them
        return ds.dataset(self.part_files(), schema=SCHEMA, format="parquet", filesystem=fs)

    def tables(self) -> dict[str, str | list[str] | None]:
        """What ``dask_pfs.manifests.sql.connect`` reads under :attr:`table_name` (a local manifest): its
        parts' pattern (matched afresh by each query: a streamed copy reads parts being written), or
        None when it has no parts."""
        return {self.table_name: self.parts_glob if self.part_files() else None}

    def relation_sql(self) -> str:
        """The name of the manifest's rows on a connection ``dask_pfs.manifests.sql.connect`` made for it."""
        return self.table_name

    @property
    def has_xattrs(self) -> bool:
        """Whether the scan recorded attributes (``scan --xattrs``): else its xattrs columns are null."""
        return bool((self.info.get("options") or {}).get("xattrs"))

    # As frames (``dask_pfs.manifests.frames``): filter with Dask, pandas or pyarrow, then pass the result to
    # copy/remove/verify as ``selection=``.

    def query(self, where: str | None = None, select: str | None = None, order: str | None = None,
              limit: int | None = None, *, group_by: str | None = None, con: Any = None):  # fmt: skip
        """The rows matching the SQL condition ``where``: a lazy ``duckdb.DuckDBPyRelation``.

        ``select`` may aggregate (``"count(*), sum(size)"``); with ``group_by`` (``"type"``), per group.
        ``con``: your own DuckDB connection (``duckdb.default_connection()`` is the one ``duckdb.sql`` uses):
        the result is a relation on it, to join with your own data (read into Arrow first, so select what
        you need).  Without it, the relation lives on a connection that reads nothing but this manifest.
        A bad clause is a :class:`~dask_pfs.errors.PfsError` naming the argument.
        """
        from dask_pfs.manifests.frames import query

        return query(self, where, select, order, limit, group_by, con)

    def summary(self) -> dict[str, Any]:
        """What the scan recorded: root, when, schema version, and its counts (entries, files, bytes, errors)."""
        counts = self.info.get("counts") or {}
        return {
            "url": self.url,
            "root": self.info.get("root"),
            "complete": self.complete,
            "scanned": self.info.get("finished"),
            "schema_version": self.info.get("schema_version"),
            **{k: v for k, v in counts.items() if isinstance(v, int)},
        }

    def __repr__(self) -> str:
        s = self.summary()
        entries = f", {s['entries']:,} entries" if isinstance(s.get("entries"), int) else ""
        state = "" if self.complete else ", incomplete"
        return f"<Manifest {self.url!r} of {s['root']!r}{entries}{state}>"

    def _repr_html_(self) -> str:
        """A notebook's view: a small table of :meth:`summary`."""
        import html

        rows = []
        for key, value in self.summary().items():
            shown = f"{value / 2**30:,.2f} GiB ({value:,})" if "bytes" in key and isinstance(value, int) else value
            shown = f"{shown:,}" if isinstance(shown, int) and not isinstance(shown, bool) else shown
            rows.append(
                f"<tr><th style='text-align:left'>{html.escape(key)}</th><td>{html.escape(str(shown))}</td></tr>"
            )
        return f"<table><caption>pfs manifest</caption>{''.join(rows)}</table>"

    def to_arrow(self, where: str | None = None, columns: list[str] | None = None):
        """The (selected) rows as a ``pyarrow.Table``."""
        from dask_pfs.manifests.frames import to_arrow

        return to_arrow(self, where, columns)

    def to_pandas(self, where: str | None = None, columns: list[str] | None = None):
        """The (selected) rows as a ``pandas.DataFrame``."""
        from dask_pfs.manifests.frames import to_pandas

        return to_pandas(self, where, columns)

    def to_dask(self, columns: list[str] | None = None, **read_parquet):
        """A ``dask.dataframe`` over the part files (``read_parquet`` options pass through)."""
        from dask_pfs.manifests.frames import to_dask

        return to_dask(self, columns, **read_parquet)


class Selection:
    """The rows of a manifest (or of one Parquet file pfs wrote) that ``where`` selects.

    ``where`` is a user's condition, checked to be only that (``dask_pfs.manifests.sql.check_where``), or a
    :class:`~dask_pfs.manifests.sql.Filter` pfs built; either runs only on a connection locked to the
    manifest (``dask_pfs.manifests.sql.connect``).  Jobs never hold the rows: they count them here and
    stream them in Arrow record batches.  A bad condition is a :class:`QueryError` (exit code 2)
    before anything is done.
    """

    def __init__(
        self, manifest: Manifest, where: str | Filter | None = None, on: duckdb.DuckDBPyConnection | None = None
    ) -> None:
        """``on``: a locked connection that reads ``manifest``'s directory already (``sql.read_also``), used
        and left open (its owner closes it) when the selection reads nothing else."""
        self.manifest: Manifest | None = manifest
        self.filter = where_filter(where)
        self.option = (
            named("where") if self.filter is not None and self.filter.user else None
        )  # a user's clause: name it
        self.where = str(self.filter) if self.filter else None
        self.relation = manifest.relation_sql()
        reads = self.filter.reads if self.filter else ()
        self.owned = on is None or bool(reads) or not manifest.is_local
        probed = self.sql("count(*)") if self.filter is not None and self.filter.user else None
        if probed is not None and self.owned:  # a clause pfs did not write: first in a bounded child
            self.con = probe_manifest(manifest, probed, reads, connecting=lambda: locked(manifest, reads=reads))
            return
        if probed is not None:  # (a borrowed connection is never handed to the probe: it would close it)
            probe_manifest(manifest, probed, reads)
        if self.owned:
            self.con = locked(manifest, reads=reads)
        else:
            assert on is not None
            read_also(on, manifest)
            self.con = on

    @classmethod
    def of_file(cls, path: str) -> Selection:
        """Every row of one Parquet file pfs wrote (a frozen selection), in stored order."""
        sel = cls.__new__(cls)
        sel.manifest, sel.filter, sel.where, sel.option = None, None, None, None
        sel.con, sel.owned = locked(reads=[path]), True
        sel.relation = file_table(path)
        return sel

    def close(self) -> None:
        """Free the connection now.  A DuckDB database left to the garbage collector may be freed in a
        process forked later (an Airflow listener's process pool): its destructor then joins threads the
        child does not have and the child spins on SIGSEGV.  Owners close their selections when done; a borrowed
        connection (``on``) is its owner's to close."""
        if self.owned:
            self.con.close()

    def __enter__(self) -> Selection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def condition(self) -> str:
        return f"({self.where})" if self.where else "TRUE"

    def sql(self, columns: str = "*", also: str | None = None, order: str | None = None) -> str:
        """``SELECT columns`` of the selected rows (``also``: a further condition)."""
        sql = f"SELECT {columns} FROM {self.relation} AS m WHERE {self.condition}"
        if also:
            sql += f" AND ({also})"
        return sql + (f" ORDER BY {order}" if order else "")

    def fetch(self, sql: str, params: list | None = None) -> list[tuple]:
        """The rows of ``sql``; ``params``: the values of its ``?`` (a user's clause has none: refused)."""
        import duckdb

        try:
            with deadline(self.con):
                return self.con.execute(sql, params).fetchall()
        except duckdb.Error as exc:
            raise QueryError(str(exc).strip().splitlines()[0], self.option) from None

    def count(self, also: str | None = None, params: list | None = None) -> int:
        return int(self.fetch(self.sql("count(*)", also), params)[0][0])

    def share(self) -> tuple[int, int]:
        """(rows selected, rows of the whole manifest): what ``--max-entries`` caps."""
        n, total = self.fetch(f"SELECT count(*) FILTER (WHERE {self.condition}), count(*) FROM {self.relation} AS m")[0]
        return int(n), int(total)

    def totals(self) -> dict[str, int]:
        """Counts of the readable selected rows: ``entries`` (non-directories), ``bytes`` (theirs),
        ``file_bytes`` (regular files only), ``dirs``; and ``errors``: rows whose scan failed."""
        cols = (
            "count(*) FILTER (WHERE error IS NULL AND type <> 'directory'), "
            "coalesce(sum(size) FILTER (WHERE error IS NULL AND type <> 'directory'), 0), "
            "coalesce(sum(size) FILTER (WHERE error IS NULL AND type = 'file'), 0), "
            "count(*) FILTER (WHERE error IS NULL AND type = 'directory'), "
            "count(*) FILTER (WHERE error IS NOT NULL)"
        )
        row = self.fetch(self.sql(cols))[0]
        return dict(zip(("entries", "bytes", "file_bytes", "dirs", "errors"), map(int, row), strict=True))

    def batches(self, sql: str, rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """Stream the result of ``sql`` in record batches of at most ``rows`` rows."""
        import duckdb

        cur = self.con.cursor()
        try:
            with deadline(cur):
                reader = cur.sql(sql).to_arrow_reader(rows)
            while True:
                with deadline(cur):  # each batch is computed as it is read: bounded one by one
                    try:
                        batch = reader.read_next_batch()
                    except StopIteration:
                        return
                yield batch
        except duckdb.Error as exc:
            raise QueryError(str(exc).strip().splitlines()[0], self.option) from None

    def write(self, sql: str, path: str) -> int:
        """Write the result of ``sql`` to the Parquet file ``path`` (the locked connection cannot)."""
        return write_parquet(self.con, sql, path)


def selection_options(
    manifest: str | os.PathLike | None, where: str | Filter | None, max_entries: int | str | None
) -> tuple[Filter | None, Cap | None]:
    """A job's ``where`` (checked: ``dask_pfs.manifests.sql``) and ``max_entries``
    (``dask_pfs.manifests.caps``); PfsError when either is given without a manifest to select from."""
    if where and manifest is None:
        raise PfsError(named("where"), " needs ", named("manifest"), ": it selects rows of a manifest")
    cap = Cap.parse(max_entries, named("max_entries"))
    if cap is not None and manifest is None:
        raise PfsError(named("max_entries"), " needs ", named("manifest"), ": it caps the rows a manifest selects")
    return where_filter(where), cap


def has_marker(url: str, storage_options: dict | None = None) -> bool:
    fs, path = _fs(url, storage_options)
    return fs.exists(f"{path.rstrip('/')}/{MARKER_NAME}")


def open_manifest(
    url: str | os.PathLike, allow_incomplete: bool = False, storage_options: dict | None = None
) -> Manifest:
    """Open a manifest; refuse one without a completion marker unless ``allow_incomplete``.

    ``storage_options`` open a manifest on an object store (credentials, endpoint); the
    :class:`Manifest` keeps them for its later reads."""
    url = utf8(os.fspath(url))
    fs, path = _fs(url, storage_options)
    if not fs.isdir(path):
        raise PfsError(f"{url}: no such manifest directory")
    marker = f"{path.rstrip('/')}/{MARKER_NAME}"
    try:  # no exists() first: a rescan removes the marker at any moment (it goes first, comes back last)
        with fs.open(marker, "r") as f:
            info = json.load(f)
    except FileNotFoundError:
        if not _has_manifest_files(fs, path):
            raise NotAManifestError(
                f"{url}: not a manifest (no {MARKER_NAME}, no part files): a manifest is the directory a scan "
                "writes (pfs scan TREE -o DIR, or dask_pfs.scan(tree, out))"
            ) from None
        if not allow_incomplete:
            raise IncompleteManifestError(
                f"{url}: no {MARKER_NAME}: the scan that wrote it failed or was interrupted (rerun the scan with ",
                named("resume", True),
                ", or read its rows anyway: ",
                Named("allow_incomplete", "pfs query --allow-incomplete", True),  # the command that has the flag
                ")",
            ) from None
        warnings.warn(f"{url}: incomplete manifest (no {MARKER_NAME})", stacklevel=2)
        return Manifest(url, {"root": None, "complete": False}, False, storage_options)
    version = info.get("schema_version")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        raise PfsError(f"{url}: manifest schema version {version}, this pfs reads versions {readable}")
    return Manifest(url, info, True, storage_options)


def _has_manifest_files(fs: Any, path: str) -> bool:
    """Whether the directory holds what a scan writes: part files (finished or being written) or a journal."""
    try:
        names = [os.path.basename(p.rstrip("/")) for p in fs.ls(path, detail=False)]
    except OSError:
        return False
    return any(n.startswith((PART_PREFIX, ".part-", JOURNAL_PREFIX)) for n in names)


def prepare_output(url: str, overwrite: bool, storage_options: dict | None = None) -> None:
    """Make the output directory, refusing to clobber an existing manifest unless ``overwrite``."""
    utf8(url)  # pyarrow and DuckDB take only UTF-8 names: refused here, not in every worker
    fs, path = _fs(url, storage_options)
    path = path.rstrip("/")
    if fs.exists(path):
        if not fs.isdir(path):
            raise PfsError(f"{url}: exists and is not a directory")
        if outputs.is_local(fs):  # one the one writer refuses is refused before anything in it goes
            try:
                outputs.open_dir(path).close()
            except outputs.UnsafeOutput as exc:
                raise PfsError(str(exc)) from None
        existing = fs.ls(path, detail=False)
        if existing:
            looks_like_manifest = any(
                os.path.basename(p).startswith((PART_PREFIX, MARKER_NAME, ".part-", JOURNAL_PREFIX)) for p in existing
            )
            if not looks_like_manifest:
                raise PfsError(f"{url}: directory is not empty and holds no manifest; refusing to write there")
            if not overwrite:
                finish = (
                    ()
                    if fs.exists(f"{path}/{MARKER_NAME}")
                    else (" (or ", named("resume", True), " to finish the interrupted scan)")
                )
                raise PfsError(
                    f"{url}: already holds a manifest; pass ", named("overwrite", True), " to replace it", *finish
                )
            remove_manifest_files(url, storage_options=storage_options)
            for p in existing:  # journals of jobs on the old manifest (an interrupted scan, an rm)
                if os.path.basename(p.rstrip("/")).startswith(JOURNAL_PREFIX):
                    fs.rm(p, recursive=True)
    try:
        if outputs.is_local(fs):  # made and checked by the one writer: refused before any part is written
            outputs.open_dir(path, create=True).close()
        else:
            outputs.remote_dirs(fs, path)
    except outputs.UnsafeOutput as exc:
        raise PfsError(str(exc)) from None
    except OSError as exc:  # a read-only or full parent: one line, exit 2 (nothing done yet)
        raise PfsError(f"{url}: cannot create the output directory: {exc.strerror or exc}") from None


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
    if "root_identity" not in info:  # what binds the manifest to its tree (dask_pfs.manifests.root)
        info["root_identity"] = root_identity(info.get("root"))
    data = json.dumps(info, indent=2, sort_keys=False, default=str).encode()
    try:  # the one writer: a random temp name in the checked directory renamed onto the marker; one put remotely
        if outputs.is_local(fs):
            outputs.write_bytes(f"{path.rstrip('/')}/{MARKER_NAME}", data)
        else:
            with outputs.remote_file(fs, f"{path.rstrip('/')}/{MARKER_NAME}") as f:
                f.write(data)
    except outputs.UnsafeOutput:
        raise
    except OSError as exc:  # a full disk, a directory made read-only meanwhile: exit 1, resumable
        raise OutputError(
            f"{url}: the manifest's marker could not be written ({exc.strerror or exc}); its parts are kept: "
            "fix that, then run it again with ",
            named("resume", True),
        ) from None
