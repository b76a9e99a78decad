"""PfsScanOperator: scan a tree into a Parquet manifest."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from ..jobs import JobSpec
from ..lineage import MANIFEST, LineageRef
from ..paths import merge_options, to_url
from .base import PfsBaseOperator


class PfsScanOperator(PfsBaseOperator):
    """Scan ``src`` (a mount or URL; ``path``, its old name, is deprecated) into the manifest directory ``manifest``.

    Returns ``{"manifest", "root", "entries", "files", "directories", "bytes", "errors", ...}``;
    downstream operators take the result (or the same URI) as their ``manifest``.  Per-entry errors
    (unreadable directories) are recorded in the manifest and do not fail the task unless
    ``fail_on_errors=True``.  ``xattrs=True`` records each entry's extended attributes and ACL
    presence (``pfs scan --xattrs``; local and mounted trees).
    """

    engine = "scan"
    fail_on_errors_default = False
    template_fields: Sequence[str] = ("src", "manifest", "storage_options", "out_storage_options")

    def __init__(
        self,
        *,
        src: Any = None,
        manifest: Any,
        path: Any = None,
        overwrite: bool = False,
        storage_options: dict | None = None,
        out_storage_options: dict | None = None,
        xattrs: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if path is not None:
            if src is not None:
                raise AirflowException(f"{self.task_id}: give src (or its old name path), not both")
            warnings.warn("PfsScanOperator(path=...) is deprecated: use src=...", DeprecationWarning, stacklevel=2)
            src = path
        if src is None:
            raise AirflowException(f"{self.task_id}: give src, the tree to scan")
        self.src = src
        self.manifest = manifest
        self.overwrite = overwrite
        self.storage_options = storage_options
        self.out_storage_options = out_storage_options
        self.xattrs = xattrs

    def job_spec(self, context: Context) -> JobSpec:
        url, options = to_url(self.src, "src")
        out, out_options = to_url(self.manifest, "manifest")
        if not isinstance(self.overwrite, bool):
            raise AirflowException(f"overwrite must be True or False, got {self.overwrite!r}")
        if not isinstance(self.xattrs, bool):
            raise AirflowException(f"xattrs must be True or False, got {self.xattrs!r}")
        if url.rstrip("/") == out.rstrip("/"):
            raise AirflowException(f"manifest must not be the scanned directory itself: {out!r}")
        kwargs = {
            "overwrite": self.overwrite,
            "storage_options": merge_options(options, self.storage_options),
            "out_storage_options": merge_options(out_options, self.out_storage_options),
            "threads": self.threads,
        }
        if self.xattrs:  # only when asked: a worker of an older pfs still takes the job
            kwargs["xattrs"] = True
        return JobSpec(self.engine, (url, out), kwargs)

    def lineage(self, result: dict) -> tuple[list[LineageRef], list[LineageRef]]:
        url, options = to_url(self.src, "src")
        out, out_options = to_url(self.manifest, "manifest")
        tree = LineageRef(result.get("root") or url, storage_options=merge_options(options, self.storage_options))
        stats = {"rowCount": result.get("entries")}
        written = LineageRef(out, MANIFEST, merge_options(out_options, self.out_storage_options), stats)
        return [tree], [written]
