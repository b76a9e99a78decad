"""Triggers that wait for data: a manifest (``PfsManifestTrigger``, behind the deferrable
``PfsManifestSensor``) and new data landing in a tree (``PfsTreeChangedTrigger``, an event trigger
for an ``AssetWatcher``).  Blocking file-system and DuckDB work runs in a thread, off the
triggerer's event loop.  (``airflow_pfs.triggers`` holds the trigger of deferred pfs jobs.)
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from dask_pfs.errors import PfsError

from . import tree_changes
from .defer_race import first_check_default, hold_until_settled
from .manifests import PfsManifest


def gone_grace() -> float:
    """Seconds a watched root may be missing before the tree watcher gives up (``PFS_WATCH_GONE_SECONDS``,
    300): a rename or remount of a moment is waited out, a deleted tree still ends the watch."""
    return float(os.environ.get("PFS_WATCH_GONE_SECONDS", "300"))


class PfsManifestTrigger(BaseTrigger):
    """Fires ``{"status": "ready", "result": {...}}`` once ``PfsManifest.ready(where, min_count)``
    says so, or ``{"status": "error", "error"}`` for a where-clause that cannot run."""

    def __init__(
        self,
        manifest: str,
        where: str | None = None,
        min_count: int | None = None,
        poll_interval: float = 60.0,
        first_check: float | None = None,
    ) -> None:
        super().__init__()
        self.manifest = manifest
        self.where = where
        self.min_count = min_count
        self.poll_interval = poll_interval
        self.first_check = first_check_default() if first_check is None else first_check  # defer_race

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "manifest": self.manifest,
                "where": self.where,
                "min_count": self.min_count,
                "poll_interval": self.poll_interval,
                "first_check": self.first_check,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        started = time.monotonic()
        manifest = PfsManifest(self.manifest)
        where = (self.where or "").strip() or None  # a checked clause ends in a newline (its -- comment ends there)
        self.log.info("Waiting for manifest %s (where %s, min_count %s)", self.manifest, where, self.min_count)
        event: dict[str, Any]
        while True:
            try:
                result = await asyncio.to_thread(manifest.ready, self.where, self.min_count)
            except AirflowException as exc:
                event = {"status": "error", "error": str(exc)}
                break
            if result is not None:
                event = {"status": "ready", "result": result}
                break
            await asyncio.sleep(self.poll_interval)
        await hold_until_settled(started, self.first_check)  # airflow_pfs.defer_race
        yield TriggerEvent(event)


class PfsTreeChangedTrigger(BaseEventTrigger):
    """Fires when the tree a manifest describes changes: entries created, removed or renamed in
    any of its directories (see ``airflow_pfs.tree_changes`` for what is and is not seen).

    For ``AssetWatcher(name, trigger=PfsTreeChangedTrigger(manifest))``: each event (``manifest``,
    ``root``, ``changed`` directories, ``samples``) becomes an asset event that schedules the DAGs
    on that asset.  It keeps watching after an event; each change is reported once; a rewritten
    manifest (the scheduled DAG rescanned) becomes the new baseline; while a rescan rewrites it,
    the last one stays.  Without a complete manifest at the start it fires once (``reason:
    "no-manifest"``: nothing to compare, so a first scan is due), then waits for one.  A tree that
    is gone for longer than ``PFS_WATCH_GONE_SECONDS`` (300), is not local, or is not the directory the
    manifest recorded (an edited ``root``), ends the trigger with an error.
    """

    def __init__(self, manifest: str, poll_interval: float = 60.0) -> None:
        super().__init__()
        self.manifest = manifest
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"manifest": self.manifest, "poll_interval": self.poll_interval},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if "://" in self.manifest:
            raise AirflowException(f"PfsTreeChangedTrigger: {self.manifest}: give the path of a local manifest")
        stamp: float | None = None
        baseline: tree_changes.Baseline | None = None
        announced_missing = False
        gone_since: float | None = None
        while True:
            # A manifest being rewritten (the scheduled DAG's rescan: no marker until it ends) keeps
            # the last baseline; a new marker replaces it.
            current = await asyncio.to_thread(tree_changes.marker_stamp, self.manifest)
            if current is not None and current != stamp:
                loaded = await asyncio.to_thread(self._load)
                if loaded is not None:
                    baseline, stamp = loaded, current
            if baseline is None:
                if not announced_missing:
                    announced_missing = True
                    yield TriggerEvent({"manifest": self.manifest, "reason": "no-manifest", "changed": 0})
            else:
                try:
                    changes = await asyncio.to_thread(self._changes, baseline)
                except tree_changes.TreeGoneError as exc:
                    # a root renamed away for a moment (a swap, a remount) is not the end of the watch
                    now = time.monotonic()
                    gone_since = now if gone_since is None else gone_since
                    if now - gone_since > gone_grace():
                        raise AirflowException(f"PfsTreeChangedTrigger: {exc} (for {now - gone_since:.0f} s)") from None
                    self.log.warning("%s; looking again in %s s", exc, self.poll_interval)
                    await asyncio.sleep(self.poll_interval)
                    continue
                gone_since = None
                if changes.changed:
                    self.log.info("%s: %d directories changed: %s", baseline.root, changes.changed, changes.samples)
                    yield TriggerEvent(
                        {
                            "manifest": self.manifest,
                            "root": baseline.root,
                            "reason": "changed",
                            "changed": changes.changed,
                            "checked": changes.checked,
                            "samples": changes.samples,
                        }
                    )
            await asyncio.sleep(self.poll_interval)

    def _load(self) -> tree_changes.Baseline | None:
        """The new baseline; None while the manifest is incomplete or being rewritten."""
        try:
            return tree_changes.load_baseline(self.manifest)
        except PfsError as exc:
            if "IO Error" in str(exc):  # its parts went while being read: a rescan started
                return None
            raise AirflowException(f"PfsTreeChangedTrigger: {exc}") from None

    @staticmethod
    def _changes(baseline: tree_changes.Baseline) -> tree_changes.Changes:
        try:
            return tree_changes.find_changes(baseline)
        except tree_changes.TreeGoneError:
            raise
        except PfsError as exc:
            raise AirflowException(f"PfsTreeChangedTrigger: {exc}") from None
