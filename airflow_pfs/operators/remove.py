"""PfsRemoveOperator: remove a tree, or exactly the manifest rows a where-clause selects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from ..jobs import JobSpec
from ..lineage import MANIFEST, LineageRef
from ..paths import check_cap, check_where, manifest_url, merge_options, to_url
from .base import PfsBaseOperator


class PfsRemoveOperator(PfsBaseOperator):
    """Remove the tree ``path``, or the rows of ``manifest`` (an upstream scan's result) selected
    by ``where`` (one DuckDB condition over manifest columns, e.g. ``mtime < now() - to_days(30)``;
    never a statement or a subquery, see ``dask_pfs.manifests.sql``).

    ``dry_run=True`` only counts what would go.  ``max_entries`` (a count or ``"5%"`` of the
    manifest's rows) makes the engine refuse a larger selection before anything is removed: a
    typo in ``where`` then fails instead of emptying the tree.  Returns the engine's counts
    (``removed_files``, ``removed_dirs``, ``bytes``, ``failed``, ``skipped_*``, and ``selected``:
    rows the where-clause selected), in XCom, deferred or not; a dry run names them
    ``would_remove_files`` and ``would_remove_dirs``.
    """

    engine = "remove"
    template_fields: Sequence[str] = ("path", "manifest", "where", "max_entries", "storage_options")

    def __init__(
        self,
        *,
        path: Any = None,
        manifest: Any = None,
        where: str | None = None,
        dry_run: bool = False,
        max_entries: int | str | None = None,
        force: bool = False,
        ignore_changes: bool = False,
        storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.manifest = manifest
        self.where = where
        self.dry_run = dry_run  # type: ignore[method-assign,assignment]  # BaseOperator.dry_run(): a parameter wins
        self.max_entries = max_entries
        self.force = force
        self.ignore_changes = ignore_changes
        self.storage_options = storage_options

    def job_spec(self, context: Context) -> JobSpec:
        if (self.path is None) == (self.manifest is None):
            raise AirflowException("give either path (a tree to remove) or manifest (rows to remove), not both")
        for flag in ("dry_run", "force", "ignore_changes"):
            if not isinstance(getattr(self, flag), bool):
                raise AirflowException(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        where = check_where(self.where)
        max_entries = check_cap(self.max_entries, "max_entries")
        kwargs: dict[str, Any] = {
            "dry_run": self.dry_run,
            "force": self.force,
            "ignore_changes": self.ignore_changes,
            "threads": self.threads,
        }
        if self.path is not None:
            if where or max_entries is not None:
                raise AirflowException("where and max_entries need a manifest (scan first, then remove its rows)")
            url, options = to_url(self.path, "path")
            kwargs.update(url=url, storage_options=merge_options(options, self.storage_options))
            return JobSpec(self.engine, (), kwargs)
        url, options = manifest_url(self.manifest)
        kwargs.update(
            manifest=url,
            where=where,
            max_entries=max_entries,
            storage_options=merge_options(options, self.storage_options),
        )
        return JobSpec(self.engine, (), kwargs)

    def lineage(self, result: dict) -> tuple[list[LineageRef], list[LineageRef]]:
        """Reads the manifest (if any); changes the tree, unless it was a dry run."""
        inputs = [] if self.manifest is None else [LineageRef(manifest_url(self.manifest)[0], MANIFEST)]
        if result.get("dry_run") or (self.path is None and not result.get("target")):
            return inputs, []
        url, carried = to_url(self.path, "path") if self.path is not None else (result["target"], {})
        options = merge_options(carried, self.storage_options)
        return inputs, [LineageRef(url, storage_options=options, dropped=self.path is not None)]

    def report(self, summary: dict) -> dict:
        result = super().report(summary)
        if summary.get("dry_run"):  # nothing was removed: say what would be
            result = {k.replace("removed_", "would_remove_", 1): v for k, v in result.items()}
        if summary.get("selected") is not None:  # manifest mode: counted by the engine, kept in XCom
            self.log.info("%s: %d manifest rows selected for removal", self.task_id, summary["selected"])
        if summary.get("dry_run") and summary.get("would_remove"):
            self.log.info("dry run, would remove e.g.: %s", ", ".join(summary["would_remove"][:10]))
        return result
