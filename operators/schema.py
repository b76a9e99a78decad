"""Manifest schema v3: one row per entry under the scan root.

This module owns the schema: writers build tables with :data:`SCHEMA` and readers check
``schema_version`` in ``_manifest.json`` against :data:`SCHEMA_VERSION`.  The README's
"Manifest schema" section documents every column; keep the two in step.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 3
# v1 lacks the columns of ``scan --xattrs`` (xattrs, has_acl), v1 and v2 the ``etag``: a manifest's readers add
# the columns it lacks as nulls (``dask_pfs.manifests.relations._with_current_columns``, ``Manifest.dataset``).
READABLE_VERSIONS = (1, 2, 3)
MARKER_NAME = "_manifest.json"
PART_PREFIX = "part-"
PART_SUFFIX = ".parquet"

TYPES = ("file", "directory", "symlink", "other")

# Microseconds, UTC: DuckDB reads these as TIMESTAMPTZ, so `mtime < now() - INTERVAL 30 DAY` works
# as written.  Everything in pfs compares times at this precision (see TIME_UNIT_NS).
_TS = pa.timestamp("us", tz="UTC")
TIME_UNIT_NS = 1000


def micros(ns: int) -> int:
    """Nanoseconds as the manifest's microseconds: truncated toward zero (``pc.divide`` and the core's
    ``Time::micros``), so a live time before 1970 compares equal with its own manifest row."""
    q = abs(ns) // TIME_UNIT_NS
    return q if ns >= 0 else -q


_DICT = pa.dictionary(pa.int32(), pa.string())
# ``scan --xattrs`` (operators.xattrs): per entry its extended attributes, sorted by name: the name (text,
# undecodable bytes as \xNN), "xxh3:<hex>" of the value, and the value itself when at most 256 bytes.
XATTR = pa.struct([("name", pa.string()), ("digest", pa.string()), ("value", pa.binary())])
XATTRS = pa.list_(XATTR)
XATTR_COLUMNS = ("xattrs", "has_acl")
# What a listing knows of an entry beyond its stat: an object's entity tag (S3's, GCS's and Azure's ETag, as the
# store gives it; null on POSIX and where a backend has none), which names the version of the object, where its
# size and last-modified second do not (``operators.remove.backends._changed``).  A lister may append these
# values to its rows (``operators.rows.Row``); the compiled core's rows never have them (null in its tables).
LISTED_COLUMNS = ("etag",)
# Columns no row builder of the core fills: null in its tables, filled per table (xattrs) or from the rows a
# Python lister made (LISTED_COLUMNS).
TABLE_COLUMNS = (*XATTR_COLUMNS, *LISTED_COLUMNS)

SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("path_raw", pa.binary()),
        pa.field("name", pa.string(), nullable=False),
        pa.field("parent", _DICT, nullable=False),
        pa.field("depth", pa.int32(), nullable=False),
        pa.field("type", _DICT, nullable=False),
        pa.field("size", pa.int64()),
        pa.field("mtime", _TS),
        pa.field("atime", _TS),
        pa.field("ctime", _TS),
        pa.field("mode", pa.uint32()),
        pa.field("uid", pa.int64()),
        pa.field("gid", pa.int64()),
        pa.field("ino", pa.uint64()),
        pa.field("dev", pa.uint64()),
        pa.field("nlink", pa.int64()),
        pa.field("link_target", pa.string()),
        pa.field("link_target_raw", pa.binary()),
        pa.field("checksum", pa.string()),
        pa.field("error", pa.string()),
        pa.field("xattrs", XATTRS),
        pa.field("has_acl", pa.bool_()),
        pa.field("etag", pa.string()),
    ],
    metadata={b"pfs.schema_version": str(SCHEMA_VERSION).encode()},
)

COLUMNS = tuple(SCHEMA.names)
# Columns every row builder fills (the core's 17 values a row); name/parent/depth are derived from path when the
# table is built.  xattrs/has_acl are filled per table (operators.xattrs), null unless the scan asked for them;
# a row may be followed by LISTED_COLUMNS values (ROW_WIDTH in all), null where it is not.
ROW_COLUMNS = tuple(c for c in COLUMNS if c not in ("name", "parent", "depth", *TABLE_COLUMNS))
ROW_WIDTH = len(ROW_COLUMNS) + len(LISTED_COLUMNS)
