"""S3 object metadata as ``user.*`` extended attributes: the one mapping scan, cp and sync use.

An object's user metadata (``x-amz-meta-<key>: <value>``) is the attribute ``user.<key>``, so
``scan --xattrs`` records it in the same ``xattrs`` column as a local tree's attributes (digest, value
when at most 256 bytes) and ``verify``/``diff --xattrs`` compare the two sides as they are.

S3 keeps only text: header names are case-insensitive (S3 lower-cases them) and values are ASCII that
HTTP may trim.  So a value of printable ASCII (0x20-0x7e) without leading or trailing blanks is stored
as it is; any other value (binary, UTF-8, empty, blank-edged, or itself starting with ``base64:``) is
stored as ``base64:`` and its base64.  Reading undoes that; a ``base64:`` value that does not decode is
taken as it is.  A name S3 cannot keep exactly (not lower-case ASCII token characters) and any
attribute outside ``user.*`` (ACLs, ``security.*``, ``trusted.*``) is not stored: a counted, logged
failure of the file (``xattr security.x on s3: Operation not supported``), never silent; so is a set
of attributes over S3's 2 KB of metadata, which leaves the object without any (the file is still written).
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import re
from collections.abc import Callable

import pyarrow as pa
import xxhash

from operators.core.pool import get_pool
from operators.schema import XATTRS

S3_PROTOCOLS = frozenset({"s3", "s3a"})
PREFIX = "base64:"
INLINE = 256  # values up to this many bytes are kept in the manifest (as the core does for local trees)
LIMIT = 2048  # bytes of user metadata (names and values) S3 takes per object
_PLAIN = re.compile(rb"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")
_KEY = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]+")

Refused = list[tuple[bytes, int]]  # (what, errno), as operators.copy.attrs reports them


def has_metadata(protocol: str | None) -> bool:
    """Whether a back end keeps per-object user metadata that maps to ``user.*`` attributes."""
    return protocol in S3_PROTOCOLS


def encode(value: bytes) -> str:
    """The metadata value that stands for the attribute value ``value``."""
    if _PLAIN.fullmatch(value) and not value.startswith(PREFIX.encode()):
        return value.decode("ascii")
    return PREFIX + base64.b64encode(value).decode("ascii")


def decode(text: str) -> bytes:
    """The attribute value of the metadata value ``text``."""
    if text.startswith(PREFIX):
        try:
            return base64.b64decode(text[len(PREFIX) :], validate=True)
        except (binascii.Error, ValueError):
            pass
    return text.encode("utf-8", "surrogateescape")


def to_metadata(attrs: dict[bytes, bytes]) -> tuple[dict[str, str], Refused]:
    """The object metadata of a file's attributes, and what S3 cannot keep."""
    meta: dict[str, str] = {}
    refused: Refused = []
    for name, value in sorted(attrs.items()):
        key = name[5:].decode("ascii", "replace") if name.startswith(b"user.") else ""
        if not key:
            refused.append((b"xattr %s on s3" % name, errno.EOPNOTSUPP))
        elif not _KEY.fullmatch(key):
            refused.append((b"xattr %s on s3 (names are lower-case ASCII)" % name, errno.EINVAL))
        else:
            meta[key] = encode(value)
    if sum(len(k) + len(v) for k, v in meta.items()) > LIMIT:  # S3 would refuse the whole PUT
        refused.append((b"xattrs on s3 (user metadata over 2 KB)", errno.E2BIG))
        return {}, refused
    return meta, refused


def from_metadata(meta: dict[str, str]) -> dict[bytes, bytes]:
    """The ``user.*`` attributes of an object's metadata."""
    return {b"user." + key.lower().encode("utf-8", "surrogateescape"): decode(v) for key, v in meta.items()}


def local_attrs(path: bytes, follow: bool) -> dict[bytes, bytes]:
    """Every extended attribute of a local file, whole (to be mapped with :func:`to_metadata`)."""
    return {
        os.fsencode(n): os.getxattr(path, n, follow_symlinks=follow) for n in os.listxattr(path, follow_symlinks=follow)
    }


def head_object(fs, path: str) -> dict:
    """An object's HEAD: its user metadata as S3 sent it (``Metadata``; s3fs's ``metadata()`` turns ``_``
    into ``-``: not used) and its size (``ContentLength``)."""
    bucket, key, _ = fs.split_path(path)
    return fs.call_s3("head_object", Bucket=bucket, Key=key)


def head(fs, path: str) -> dict[str, str]:
    """An object's user metadata."""
    return dict(head_object(fs, path).get("Metadata") or {})


# attributes object_store reports beside an object's user metadata
STANDARD_ATTRIBUTES = frozenset(
    {"Content-Disposition", "Content-Encoding", "Content-Language", "Content-Type", "Cache-Control"}
)


def object_metadata(store, key: str) -> dict[str, str]:
    """The user metadata of an object on an ``obstore`` store: a GET without its body (what a HEAD
    returns; obstore's ``head`` gives no metadata), less the standard attributes beside it."""
    import obstore

    got = obstore.get(store, key, options={"head": True})
    return {str(k): str(v) for k, v in got.attributes.items() if k not in STANDARD_ATTRIBUTES}


def set_local(fd: int, meta: dict[str, str]) -> Refused:
    """The ``user.*`` attributes of ``meta`` onto the open file ``fd``: what the file system refused."""
    refused: Refused = []
    for name, value in sorted(from_metadata(meta).items()):
        try:
            os.setxattr(fd, name, value)
        except OSError as exc:
            refused.append((b"xattr " + name, exc.errno or 0))
    return refused


def _entry(attrs: dict[bytes, bytes]) -> list[dict]:
    return [
        {
            "name": os.fsdecode(n),
            "digest": "xxh3:" + xxhash.xxh3_128_hexdigest(v),
            "value": v if len(v) <= INLINE else None,
        }
        for n, v in sorted(attrs.items())
    ]


def _heads(meta_of: Callable[[str], dict], paths: list[str], threads: int | None) -> list[tuple[bool, dict | str]]:
    """Each object's metadata, or the text of the error, on the pool."""
    from operators.rows import describe_error

    def one(path: str) -> tuple[bool, dict | str]:
        try:
            return True, meta_of(path)
        except Exception as exc:
            return False, describe_error(exc)

    return list(get_pool(threads).map(one, paths))


def fill_object_xattrs(
    table: pa.Table, meta_of: Callable[[str], dict], threads: int | None = None
) -> tuple[pa.Table, list[str]]:
    """``table`` (rows of an S3 scan) with ``xattrs`` from each object's metadata (``meta_of(path)`` of a
    row's path: one HEAD per file, on the pool) and ``has_acl`` false (objects have no POSIX ACLs); directories get
    none; rows already in error stay null, and a failed HEAD becomes the row's error."""
    paths = table.column("path").to_pylist()
    kinds = table.column("type").cast(pa.string()).to_pylist()
    errors = table.column("error").to_pylist()
    files = [i for i, (k, e) in enumerate(zip(kinds, errors, strict=True)) if k == "file" and e is None]
    got = _heads(meta_of, [paths[i] for i in files], threads)
    lists: list[list[dict] | None] = [[] if e is None else None for e in errors]
    failures: list[str] = []
    for i, (_, meta) in zip(files, got, strict=True):
        if isinstance(meta, dict):
            lists[i] = _entry(from_metadata(meta))
        else:
            lists[i], errors[i] = None, f"xattrs: {meta}"
            failures.append(f"{paths[i]}: {errors[i]}")
    acl = pa.array([None if x is None else False for x in lists], pa.bool_())
    for name, values in (
        ("xattrs", pa.array(lists, XATTRS)),
        ("has_acl", acl),
        ("error", pa.array(errors, pa.string())),
    ):
        idx = table.schema.get_field_index(name)
        table = table.set_column(idx, table.schema.field(idx), values.cast(table.schema.field(idx).type))
    return table, failures


__all__ = [
    "PREFIX",
    "S3_PROTOCOLS",
    "STANDARD_ATTRIBUTES",
    "decode",
    "encode",
    "fill_object_xattrs",
    "from_metadata",
    "has_metadata",
    "head",
    "head_object",
    "local_attrs",
    "object_metadata",
    "set_local",
    "to_metadata",
]
