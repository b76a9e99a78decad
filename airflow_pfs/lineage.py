"""What a pfs operator read and wrote, named as OpenLineage datasets.

Names follow the OpenLineage naming spec, so pfs's datasets join the ones other tools report
for the same places: a local path is namespace ``file``, name the absolute path; an S3 (GCS)
prefix is ``s3://bucket`` (``gs://bucket``) and the key; an SFTP path is the spec's remote
file system ``file://host:port`` (what Airflow's own SFTP lineage reports) and the path.

No OpenLineage import here: operators describe their datasets with :class:`LineageRef`
whether or not the OpenLineage provider is installed; ``lineage_facets`` turns them into
OpenLineage objects when it is.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from urllib.parse import urlsplit

OBJECT_STORES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs"}
REMOTE_FILE_SYSTEMS = {"sftp": 22, "ssh": 22}
TREE, MANIFEST, PLAN, REPORT = "tree", "manifest", "plan", "report"


@dataclass(frozen=True)
class LineageRef:
    """One dataset: a tree (``kind="tree"``) or a pfs Parquet output (manifest, plan, report).

    ``stats`` are output statistics (``rowCount``, ``size``, ``fileCount``); ``dropped`` marks a
    tree that was removed as a whole.
    """

    url: str
    kind: str = TREE
    storage_options: dict | None = None
    stats: dict = field(default_factory=dict)
    dropped: bool = False


def dataset_name(url: str, storage_options: dict | None = None) -> tuple[str, str]:
    """``(namespace, name)`` of a path or URL under the OpenLineage naming spec."""
    if "://" not in url:
        return "file", _clean_path(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.netloc.rpartition("@")[2]  # no credentials in a dataset name
    if scheme in ("file", "local"):
        return "file", _clean_path(parts.path)
    if scheme in OBJECT_STORES:
        return f"{OBJECT_STORES[scheme]}://{host}", parts.path.strip("/") or "/"
    if scheme in REMOTE_FILE_SYSTEMS:
        options = storage_options or {}
        hostname = parts.hostname or options.get("host") or "localhost"
        port = parts.port or options.get("port") or REMOTE_FILE_SYSTEMS[scheme]
        return f"file://{hostname}:{port}", _clean_path(parts.path or "/")
    return f"{scheme}://{host}", _clean_path(parts.path or "/")


def _clean_path(path: str) -> str:
    """``/a/b/`` and ``/a/./b`` name the same directory as ``/a/b``."""
    return posixpath.normpath(path) if path else "/"


def numbers(report: dict) -> dict[str, int | float]:
    """The counts of an operator's result (numbers only; no paths, flags or exit code)."""
    skip = ("exit_code", "seconds")
    return {k: v for k, v in report.items() if k not in skip and isinstance(v, int | float) and not isinstance(v, bool)}
