"""PfsVerifyOperator: compare two trees (or manifests) by content checksums."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from ..jobs import JobSpec
from ..lineage import MANIFEST, REPORT, LineageRef
from ..paths import check_where, manifest_urls, merge_options, to_url
from .base import PfsBaseOperator


class PfsVerifyOperator(PfsBaseOperator):
    """Verify ``dst`` against ``src`` like ``pfs verify``: each side a tree (scanned with checksums)
    or a manifest (``src_manifest``/``dst_manifest``, e.g. an upstream scan's result; checksummed
    when it has none).  ``where`` selects the rows compared on both sides.

    The task fails when anything is missing, extra or different (``fail_on_errors=False`` only
    reports); the Parquet ``log`` lists those entries (``report_path``, its old name, is deprecated).  Returns
    the counts.
    """

    engine = "verify"
    template_fields: Sequence[str] = ("src", "dst", "src_manifest", "dst_manifest", "where", "log_path")

    def __init__(
        self,
        *,
        src: Any = None,
        dst: Any = None,
        src_manifest: Any = None,
        dst_manifest: Any = None,
        where: str | None = None,
        checksum: str = "xxh3",
        log: Any = None,
        report_path: Any = None,
        storage_options: dict | None = None,
        dst_storage_options: dict | None = None,
        xattrs: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if report_path is not None:
            if log is not None:
                raise AirflowException(f"{self.task_id}: give log (or its old name report_path), not both")
            warnings.warn("PfsVerifyOperator(report_path=...) is deprecated: use log=...", DeprecationWarning,
                          stacklevel=2)  # fmt: skip
            log = report_path
        self.log_path = log  # not `log`: BaseOperator's logger
        self.src, self.dst = src, dst
        self.src_manifest, self.dst_manifest = src_manifest, dst_manifest
        self.where, self.checksum = where, checksum
        self.storage_options, self.dst_storage_options = storage_options, dst_storage_options
        self.xattrs = xattrs  # also compare extended attributes and ACL presence (pfs verify --xattrs)

    def job_spec(self, context: Context) -> JobSpec:
        if self.src is None and self.src_manifest is None:
            raise AirflowException("give src (a tree) or src_manifest")
        if self.dst is None and self.dst_manifest is None:
            raise AirflowException("give dst (a tree) or dst_manifest")
        src, src_options = to_url(self.src, "src") if self.src is not None else (None, {})
        dst, dst_options = to_url(self.dst, "dst") if self.dst is not None else (None, {})
        kwargs: dict[str, Any] = {
            "where": check_where(self.where),
            "checksum": self.checksum,
            "threads": self.threads,
            "storage_options": merge_options(src_options, self.storage_options),
            "dst_storage_options": merge_options(dst_options, self.dst_storage_options),
        }
        kwargs.update(manifest_urls(self, "src_manifest", "dst_manifest"))
        if self.xattrs:
            kwargs["xattrs"] = True
        if self.log_path is not None:
            kwargs["log"] = to_url(self.log_path, "log")[0]
        return JobSpec(self.engine, (src, dst), kwargs)

    def lineage(self, result: dict) -> tuple[list[LineageRef], list[LineageRef]]:
        """Reads both sides (trees and/or manifests); writes the report, when asked for one."""
        inputs = []
        for tree, options in ((self.src, self.storage_options), (self.dst, self.dst_storage_options)):
            if tree is not None:
                url, carried = to_url(tree, "tree")
                inputs.append(LineageRef(url, storage_options=merge_options(carried, options)))
        inputs += [LineageRef(url, MANIFEST) for url in manifest_urls(self, "src_manifest", "dst_manifest").values()]
        return inputs, [LineageRef(result["log"], REPORT)] if result.get("log") else []  # the report
