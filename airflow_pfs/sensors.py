"""PfsManifestSensor: wait until a manifest is complete (its marker is written last), optionally
until a where-clause selects enough of its rows.

For manifests written outside the DAG (a Slurm scan job, another team's pipeline).  Deferrable:
the wait then runs in the triggerer (``PfsManifestTrigger``) and holds no worker slot.  Returns
``{"manifest", "root", "entries", "selected"}``, which downstream pfs operators take as their
``manifest`` argument and ``PfsManifest`` as its manifest.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from .data_triggers import PfsManifestTrigger
from .manifests import PfsManifest
from .paths import check_where

DEFAULT_TIMEOUT = 7 * 24 * 3600  # Airflow's sensor default: a week


class PfsManifestSensor(BaseSensorOperator):
    """Wait for ``manifest`` (path, URL or ObjectStoragePath) to be complete.

    :param where: a DuckDB condition over manifest rows (e.g. ``"type = 'file' AND name LIKE '%.h5'"``);
        the sensor then also waits until it selects ``min_count`` rows.
    :param min_count: rows ``where`` must select (default 1 when ``where`` is given).
    :param deferrable: wait in the triggerer instead of a worker slot (its event comes no sooner than
        ``PFS_DEFER_FIRST_CHECK`` seconds after deferring: ``airflow_pfs.defer_race``).
    :param poke_interval: seconds between checks (both modes).
    :param allowed_roots: the manifest must lie under one of these (after resolving ``..`` and links), or
        the task fails before reading it; not templated, so a run's conf cannot widen it.
    """

    template_fields: Sequence[str] = ("manifest", "where", "min_count")
    ui_color = "#e2f0d9"

    def __init__(
        self,
        *,
        manifest: Any,
        where: str | None = None,
        min_count: int | str | None = None,
        deferrable: bool = False,
        poke_interval: float = 60.0,
        timeout: float = DEFAULT_TIMEOUT,
        allowed_roots: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, timeout=timeout, **kwargs)
        self.allowed_roots = tuple(allowed_roots or ())
        self.manifest = manifest
        self.where = where
        self.min_count = min_count
        self.deferrable = deferrable

    def _arguments(self) -> tuple[PfsManifest, str | None, int | None]:
        where = check_where(self.where)
        min_count = self.min_count
        if isinstance(min_count, str) and min_count.strip().isdigit():
            min_count = int(min_count)  # rendered from a template
        if min_count is not None and (isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 0):
            raise AirflowException(f"min_count must be a whole number >= 0, got {self.min_count!r}")
        return PfsManifest(self.manifest, self.allowed_roots), where, min_count

    def poke(self, context: Context) -> PokeReturnValue:
        manifest, where, min_count = self._arguments()
        result = manifest.ready(where, min_count)
        if result is None:
            self.log.info("%s: not complete yet, or fewer than %s rows selected", manifest.url, min_count or 1)
        return PokeReturnValue(is_done=result is not None, xcom_value=result)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        manifest, where, min_count = self._arguments()
        result = manifest.ready(where, min_count)
        if result is not None:
            return result
        self.defer(
            trigger=PfsManifestTrigger(manifest.url, where, min_count, poll_interval=float(self.poke_interval)),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def execute_complete(self, context: Context, event: dict) -> dict:
        if event.get("status") != "ready":
            raise AirflowException(f"{self.task_id}: {event.get('error') or event}")
        self.log.info("Manifest ready: %s", event["result"])
        return event["result"]
