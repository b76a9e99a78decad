"""PfsSyncOperator: make a destination mirror a source (new, changed, type-changed; extras with delete)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from ..jobs import JobSpec
from ..lineage import MANIFEST, PLAN, LineageRef
from ..paths import manifest_urls, merge_options, to_url
from .base import PfsBaseOperator, engine_kwargs, take_options, with_options

OWN = ("ignore_existing",)  # sync's own handling (with update=False it is on too)


class PfsSyncOperator(PfsBaseOperator):
    """Sync ``src`` into ``dst`` like ``pfs sync``: scan both (or use ``src_manifest``/``dst_manifest``,
    e.g. an upstream scan's result), plan in DuckDB, copy what is new or changed.

    ``delete=True`` removes extras, unless the source scan reported errors (then it is switched
    off and ``delete_suppressed`` says why); ``max_delete`` (a count or ``"5%"``) fails the task
    before anything changes.  ``dry_run=True`` only writes the plan.  Changed files are replaced
    (``update=True``, the default); ``ignore_existing=True`` (or ``update=False``) copies only what
    the destination lacks.  ``xattrs`` (default True) copies extended attributes and ACLs, ``keep_owner``
    ownership (None, the default: when the worker runs as root); every other option sync shares with copy
    (``dask_pfs.options``: ``chown``, ``numeric_ids``, ``chunk_files``, ``chunk_bytes``, ``split_size``,
    ``allow_other_root``) is a keyword argument of the same name.  ``skip_existing`` is the deprecated
    name of ``update``.  Returns the plan's counts per action, ``copied_files``/``copied_bytes``/``deleted``
    and the plan directory.
    """

    engine = "sync"
    template_fields: Sequence[str] = (
        "src",
        "dst",
        "src_manifest",
        "dst_manifest",
        "plan",
        "max_delete",
        "storage_options",
        "dst_storage_options",
    )

    @with_options("sync", skip=OWN)
    def __init__(
        self,
        *,
        src: Any,
        dst: Any,
        src_manifest: Any = None,
        dst_manifest: Any = None,
        plan: Any = None,
        checksum: str | None = None,
        delete: bool = False,
        max_delete: int | str | None = None,
        dry_run: bool = False,
        update_dst_manifest: bool = False,
        update: bool = True,
        ignore_existing: bool = False,
        skip_existing: bool | None = None,
        storage_options: dict | None = None,
        dst_storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        # the options sync shares with copy (dask_pfs.options: xattrs, keep_owner, chown, chunk_files...)
        self.options = take_options("sync", kwargs, skip=OWN)
        super().__init__(**kwargs)
        self.src, self.dst = src, dst
        self.src_manifest, self.dst_manifest, self.plan = src_manifest, dst_manifest, plan
        self.checksum = checksum
        self.delete, self.max_delete = delete, max_delete
        self.dry_run = dry_run  # type: ignore[method-assign,assignment]  # BaseOperator.dry_run(): a parameter wins
        self.update_dst_manifest = update_dst_manifest
        if skip_existing is not None:
            warnings.warn("PfsSyncOperator(skip_existing=...) is deprecated: use update=...", DeprecationWarning,
                          stacklevel=2)  # fmt: skip
            update = skip_existing
        self.update, self.ignore_existing = update, ignore_existing
        self.storage_options, self.dst_storage_options = storage_options, dst_storage_options

    def job_spec(self, context: Context) -> JobSpec:
        options = engine_kwargs("sync", self.options, skip=OWN)
        for flag in ("delete", "dry_run", "update_dst_manifest", "update", "ignore_existing"):
            if not isinstance(getattr(self, flag), bool):
                raise AirflowException(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        src, src_options = to_url(self.src, "src")
        dst, dst_options = to_url(self.dst, "dst")
        kwargs: dict[str, Any] = {
            **options,
            "checksum": self.checksum,
            "delete": self.delete,
            "max_delete": self.max_delete if self.max_delete not in ("", None) else None,
            "dry_run": self.dry_run,
            "update_dst_manifest": self.update_dst_manifest,
            "ignore_existing": self.ignore_existing or not self.update,
            "threads": self.threads,
            "storage_options": merge_options(src_options, self.storage_options),
            "dst_storage_options": merge_options(dst_options, self.dst_storage_options),
        }
        kwargs.update(manifest_urls(self, "src_manifest", "dst_manifest"))
        if self.plan is not None:
            kwargs["plan"] = to_url(self.plan, "plan")[0]
        return JobSpec(self.engine, (src, dst), kwargs)

    def lineage(self, result: dict) -> tuple[list[LineageRef], list[LineageRef]]:
        src, src_options = to_url(self.src, "src")
        dst, dst_options = to_url(self.dst, "dst")
        inputs = [LineageRef(src, storage_options=merge_options(src_options, self.storage_options))]
        inputs += [LineageRef(url, MANIFEST) for url in manifest_urls(self, "src_manifest", "dst_manifest").values()]
        outputs = [LineageRef(result["plan"], PLAN)] if result.get("plan") else []
        if not result.get("dry_run"):
            stats = {"fileCount": result.get("copied_files"), "size": result.get("copied_bytes")}
            options = merge_options(dst_options, self.dst_storage_options)
            outputs.insert(0, LineageRef(dst, storage_options=options, stats=stats))
        return inputs, outputs

    def error_samples(self, summary: dict) -> list[str]:
        samples = super().error_samples(summary)
        if summary.get("delete_suppressed"):
            samples.insert(0, f"delete switched off: {summary['delete_suppressed']}")
        return samples
