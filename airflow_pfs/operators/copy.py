"""PfsCopyOperator: copy a tree, or the manifest rows a where-clause selects, to a destination."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from ..jobs import JobSpec
from ..lineage import MANIFEST, LineageRef
from ..paths import check_cap, check_where, manifest_url, merge_options, to_url
from .base import PfsBaseOperator, engine_kwargs, take_options, with_options

TEMPLATED = ("manifest", "where", "max_entries", "manifest_out")  # this operator's own (templated) arguments


class PfsCopyOperator(PfsBaseOperator):
    """Copy ``src`` (scanned first) or the rows of ``manifest`` selected by ``where`` to ``dst``.

    Semantics are ``pfs cp``'s: ``src="a/"`` copies the contents of ``a`` into ``dst``; with a
    manifest the selected rows go below ``dst`` relative to the manifest's root (or to ``src``).
    Existing identical files (same size and mtime) are skipped; a differing one fails unless ``update``
    (replace it), ``ignore_existing`` (leave every existing file alone) or ``overwrite`` (every file is
    rewritten); ``skip_existing`` is the deprecated name of ``update``.  A retry of the task resumes
    from the journal of the try that failed.  ``where`` is one DuckDB condition over manifest columns
    (never a statement);
    ``max_entries`` (a count or ``"5%"`` of the manifest's rows) makes the engine refuse a larger
    selection before anything is written.  Returns the counts (``files``, ``bytes``, ``dirs``,
    ``skipped``, ``failed``..., and ``selected`` with a manifest).  ``xattrs`` (default True) copies
    extended attributes and ACLs, ``keep_owner`` ownership (None, the default: when the worker runs as root;
    ``preserve=True`` is ``keep_owner=True``; not ``owner``: that is Airflow's task owner).  Every other
    option of ``dask_pfs.copy`` (``dask_pfs.options``: ``follow_symlinks``, ``inplace``, ``chunk_files``...)
    is a keyword argument of the same name.
    """

    engine = "copy"
    template_fields: Sequence[str] = (
        "src",
        "dst",
        "manifest",
        "where",
        "max_entries",
        "manifest_out",
        "storage_options",
        "dst_storage_options",
    )

    @with_options("copy", skip=TEMPLATED)
    def __init__(
        self,
        *,
        dst: Any,
        src: Any = None,
        manifest: Any = None,
        where: str | None = None,
        max_entries: int | str | None = None,
        manifest_out: Any = None,
        skip_existing: bool | None = None,
        storage_options: dict | None = None,
        dst_storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        # every other option of the copy engine, by its Airflow name (dask_pfs.options: ``keep_owner`` for
        # ``owner``, which is BaseOperator's task owner); checked and passed on as given
        self.options = take_options("copy", kwargs, skip=TEMPLATED)
        super().__init__(**kwargs)
        self.src = src
        self.dst = dst
        self.manifest = manifest
        self.where = where
        self.max_entries = max_entries
        if skip_existing is not None:
            warnings.warn("PfsCopyOperator(skip_existing=...) is deprecated: use update=...", DeprecationWarning,
                          stacklevel=2)  # fmt: skip
            self.options["update"] = skip_existing
        self.manifest_out = manifest_out
        self.storage_options = storage_options
        self.dst_storage_options = dst_storage_options

    def job_spec(self, context: Context) -> JobSpec:
        if self.src is None and self.manifest is None:
            raise AirflowException("give src (a tree to copy) or manifest (rows to copy)")
        options = engine_kwargs("copy", self.options, skip=TEMPLATED)
        chosen = [flag for flag in ("overwrite", "update", "ignore_existing") if self.options.get(flag)]
        if len(chosen) > 1:
            raise AirflowException(f"{' and '.join(chosen)} exclude each other")
        where = check_where(self.where)
        max_entries = check_cap(self.max_entries, "max_entries")
        if (where or max_entries is not None) and self.manifest is None:
            raise AirflowException("where and max_entries need a manifest (scan first, then copy its rows)")
        src, src_options = to_url(self.src, "src") if self.src is not None else (None, {})
        dst, dst_options = to_url(self.dst, "dst")
        kwargs: dict[str, Any] = {
            **options,
            "where": where,
            "resume": _is_retry(context),  # a retry goes on from the journal of the try that failed
            "threads": self.threads,
            "storage_options": merge_options(src_options, self.storage_options),
            "dst_storage_options": merge_options(dst_options, self.dst_storage_options),
        }
        if self.manifest is not None:
            url, manifest_options = manifest_url(self.manifest)
            kwargs["manifest"] = url
            kwargs["max_entries"] = max_entries
            if src is None and manifest_options:
                kwargs["storage_options"] = {**manifest_options, **(kwargs["storage_options"] or {})}
        if self.manifest_out is not None:
            kwargs["manifest_out"] = to_url(self.manifest_out, "manifest_out")[0]
        return JobSpec(self.engine, (src, dst), kwargs)

    def lineage(self, result: dict) -> tuple[list[LineageRef], list[LineageRef]]:
        inputs = []
        if self.src is not None or result.get("source"):
            src, options = to_url(self.src, "src") if self.src is not None else (result["source"], {})
            inputs.append(LineageRef(src, storage_options=merge_options(options, self.storage_options)))
        if self.manifest is not None:
            inputs.append(LineageRef(manifest_url(self.manifest)[0], MANIFEST))
        dst, dst_options = to_url(self.dst, "dst")
        stats = {"fileCount": result.get("files"), "size": result.get("bytes")}
        outputs = [LineageRef(dst, storage_options=merge_options(dst_options, self.dst_storage_options), stats=stats)]
        if self.manifest_out is not None:
            outputs.append(LineageRef(to_url(self.manifest_out, "manifest_out")[0], MANIFEST))
        return inputs, outputs


def _is_retry(context: Context) -> bool:
    ti = context.get("ti")
    return bool(ti is not None and (getattr(ti, "try_number", 1) or 1) > 1)
