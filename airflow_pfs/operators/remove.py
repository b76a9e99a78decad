"""PfsRemoveOperator: remove a tree, or exactly the manifest rows a where-clause selects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from dask_pfs.errors import PfsError
from dask_pfs.manifest import open_manifest
from dask_pfs.query import connection

from ..jobs import JobSpec
from ..paths import check_where, manifest_url, merge_options, to_url
from .base import PfsBaseOperator

COUNTS = (
    "removed_files",
    "removed_dirs",
    "bytes",
    "failed",
    "skipped_changed",
    "skipped_missing",
    "skipped_nonempty",
    "skipped_error",
)


class PfsRemoveOperator(PfsBaseOperator):
    """Remove the tree ``path``, or the rows of ``manifest`` (an upstream scan's result) selected
    by ``where`` (a DuckDB condition over manifest columns, e.g. ``mtime < now() - to_days(30)``).

    ``dry_run=True`` only counts what would go.  ``max_entries`` refuses (before anything is
    removed) a selection larger than that: a typo in ``where`` then fails instead of emptying the
    tree.  Returns the engine's counts (``removed_files``, ``removed_dirs``, ``bytes``, ``failed``,
    ``skipped_*``) plus ``selected`` (rows the where-clause selects) when run in the worker.
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
        max_entries: int | None = None,
        force: bool = False,
        ignore_changes: bool = False,
        storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.manifest = manifest
        self.where = where
        self.dry_run = dry_run
        self.max_entries = max_entries
        self.force = force
        self.ignore_changes = ignore_changes
        self.storage_options = storage_options
        self._selected: int | None = None

    def job_spec(self, context: Context) -> JobSpec:
        if (self.path is None) == (self.manifest is None):
            raise AirflowException("give either path (a tree to remove) or manifest (rows to remove), not both")
        for flag in ("dry_run", "force", "ignore_changes"):
            if not isinstance(getattr(self, flag), bool):
                raise AirflowException(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        where = check_where(self.where)
        max_entries = self.max_entries
        if isinstance(max_entries, str) and max_entries.strip().isdigit():
            max_entries = int(max_entries)  # rendered from a template
        if max_entries is not None and (not isinstance(max_entries, int) or max_entries < 0):
            raise AirflowException(f"max_entries must be a whole number >= 0, got {self.max_entries!r}")
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
        self._selected = self._count(url, where)
        self.log.info("%s: %d manifest rows selected for removal", self.task_id, self._selected)
        if max_entries is not None and self._selected > max_entries:
            raise AirflowException(
                f"where selects {self._selected} entries, more than max_entries={max_entries}: refusing to remove"
            )
        kwargs.update(manifest=url, where=where, storage_options=merge_options(options, self.storage_options))
        return JobSpec(self.engine, (), kwargs)

    @staticmethod
    def _count(url: str, where: str | None) -> int:
        """Rows selected, read from the manifest's Parquet parts (counts only; no list leaves DuckDB)."""
        try:
            manifest = open_manifest(url)
            sql = f"SELECT count(*) FROM {manifest.relation_sql()} AS m WHERE {f'({where})' if where else 'TRUE'}"
            return int(connection().execute(sql).fetchall()[0][0])
        except PfsError as exc:
            raise AirflowException(f"manifest: {exc}") from None
        except Exception as exc:  # duckdb.Error: a bad where-clause
            raise AirflowException(f"where: {str(exc).splitlines()[0]}") from None

    def report(self, summary: dict) -> dict:
        result = {
            "target": summary.get("target"),
            "dry_run": summary.get("dry_run"),
            **{k: summary.get(k, 0) for k in COUNTS},
            "errors": summary.get("failed", 0),
            "log": summary.get("log"),
            "seconds": round(float(summary.get("seconds") or 0), 3),
            "exit_code": summary.get("exit_code", 0),
        }
        if self._selected is not None:
            result["selected"] = self._selected
        if summary.get("dry_run") and summary.get("would_remove"):
            self.log.info("dry run, would remove e.g.: %s", ", ".join(summary["would_remove"][:10]))
        return result

    def error_samples(self, summary: dict) -> list[str]:
        return list(summary.get("problems") or [])
