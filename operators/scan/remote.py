"""Listing through fsspec for everything that is not a local path.

S3, GCS and Azure Blob are listed on obstore instead (``operators.scan.objstore``); the ``flat``
mode stays for the other object stores fsspec serves (oss, r2, ...) and for the tests that compare
the two.  Two modes: ``tree`` lists one directory per call (sftp, webdav, hdfs, ...), and ``flat``
uses the backend's recursive prefix listing (``find``), which object stores answer with a few
paged requests instead of one request per "directory".  In ``flat`` mode the root is listed
with a delimiter so each top-level prefix becomes its own unit of work.
"""

from __future__ import annotations

from concurrent.futures import Executor

from operators.ratelimit import take_ops
from operators.rows import Row, error_row, row_from_info
from operators.scan.walk import DirItem, Listing

FLAT_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "r2"})


class FsspecLister:
    def __init__(self, protocol: str, root: str, storage_options: dict | None = None, flat: bool | None = None) -> None:
        import fsspec  # only for a remote tree: a local scan never imports it (issue 43)

        self.fs = fsspec.filesystem(protocol, **(storage_options or {}))
        self.root = root.rstrip("/")
        self.flat = protocol in FLAT_PROTOCOLS if flat is None else flat

    def rel(self, name: str) -> str:
        name = name.rstrip("/")
        prefix = self.root + "/"
        return name[len(prefix) :] if name.startswith(prefix) else name.lstrip("/")

    def full(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def root_error_row(self, error: BaseException) -> Row:
        return error_row(".", "directory", error)

    def close(self) -> None:
        """Nothing to release: the fsspec instance is shared and cached by fsspec."""

    def list_dir(self, item: DirItem, pool: Executor) -> Listing:
        rel = item[0]
        assert isinstance(rel, str)
        listing = Listing(item)
        try:
            if self.flat and rel:
                infos = self.fs.find(self.full(rel), withdirs=True, detail=True).values()
                listing.rows = [row_from_info(self.rel(i["name"]), i) for i in infos if self.rel(i["name"]) != rel]
                return listing
            infos = self.fs.ls(self.full(rel), detail=True)
        except FileNotFoundError:
            listing.vanished = bool(rel)
            if not rel:
                listing.error = FileNotFoundError(f"{self.root} not found")
            return listing
        except OSError as exc:
            listing.error = exc
            return listing
        take_ops(len(infos))
        for info in infos:
            path = self.rel(info["name"])
            if not path or path == rel:
                continue
            row = row_from_info(path, info)
            if info.get("type") == "directory":
                listing.subdirs.append((path, row))
            else:
                listing.rows.append(row)
        return listing
