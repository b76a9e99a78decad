"""Triggers: waiting for a pfs job on the Dask scheduler (``PfsJobTrigger``), for a manifest
(``PfsManifestTrigger``, behind the deferrable ``PfsManifestSensor``), and watching a tree for new
data (``PfsTreeChangedTrigger``, an event trigger for an ``AssetWatcher``).  Blocking file-system
and DuckDB work runs in a thread, off the triggerer's event loop.

``PfsJobTrigger`` polls the job's state record and its published driver task with an asynchronous
Dask client, logs progress lines at a steady interval, and fires one event when the job ends.
It only reads: the job keeps running whatever happens to the triggerer.  ``on_kill`` (a user
marked the task failed or cleared it) is the one place that cancels the job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent
from distributed import Client, Event, Variable

from dask_pfs.errors import PfsError
from dask_pfs.progress import describe

from . import jobs, tree_changes
from .hooks import security_for
from .manifests import PfsManifest


class PfsJobTrigger(BaseTrigger):
    """Fires ``{"status": finished|error|cancelled|missing, "name", "result", "error"}``."""

    def __init__(
        self,
        scheduler: str,
        name: str,
        poll_interval: float = 5.0,
        progress_interval: float = 30.0,
        connect_timeout: float = 30.0,
        tls: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.tls = tls
        self.scheduler = scheduler
        self.name = name
        self.poll_interval = poll_interval
        self.progress_interval = progress_interval
        self.connect_timeout = connect_timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "scheduler": self.scheduler,
                "name": self.name,
                "poll_interval": self.poll_interval,
                "progress_interval": self.progress_interval,
                "connect_timeout": self.connect_timeout,
                "tls": self.tls,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # The client is closed before the event is yielded: the generator may never be resumed.
        async with self._client() as client:
            payload = await self._wait(client)
        yield TriggerEvent(payload)

    async def _wait(self, client: Client) -> dict:
        future = None
        started = last_log = time.monotonic()
        while True:
            record = await _read_record(client, self.name)
            future_status = None
            if future is None and self.name in await client.list_datasets():
                future = await client.get_dataset(self.name)
            if future is not None:
                future_status = future.status
            state = jobs.decide(record, future_status)
            now = time.monotonic()
            if state != jobs.RUNNING:
                break
            if now - last_log >= self.progress_interval:
                last_log = now
                counters = record.get("counters") or {}
                self.log.info("%s: %s", record.get("title") or self.name, describe(counters, now - started))
            await asyncio.sleep(self.poll_interval)
        error = record.get("error")
        if state == jobs.ERROR and not error and future is not None:
            exc = await future.exception()
            error = jobs.describe_error(exc) if exc is not None else f"driver task {future_status}"
        if state == jobs.FINISHED and future is not None:
            # the outcome is in the record; a held result would be recomputed if its worker died
            await client.unpublish_dataset(self.name)
        return {"status": state, "name": self.name, "result": record.get("result"), "error": error}

    def _client(self) -> Client:
        return Client(self.scheduler, asynchronous=True, timeout=self.connect_timeout, security=security_for(self.tls))

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the job on the cluster."""
        async with self._client() as client:
            await Event(jobs.cancel_name(self.name), client=client).set()
            if self.name in await client.list_datasets():
                future = await client.get_dataset(self.name)
                await client.cancel([future], force=True)
                await client.unpublish_dataset(self.name)
        self.log.info("Cancelled pfs job %s", self.name)


async def _read_record(client: Client, name: str) -> dict:
    try:
        return await Variable(jobs.state_name(name), client=client).get(timeout=jobs.RECORD_TIMEOUT) or {}
    except TimeoutError:
        return {}


class PfsManifestTrigger(BaseTrigger):
    """Fires ``{"status": "ready", "result": {...}}`` once ``PfsManifest.ready(where, min_count)``
    says so, or ``{"status": "error", "error"}`` for a where-clause that cannot run."""

    def __init__(
        self, manifest: str, where: str | None = None, min_count: int | None = None, poll_interval: float = 60.0
    ) -> None:
        super().__init__()
        self.manifest = manifest
        self.where = where
        self.min_count = min_count
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "manifest": self.manifest,
                "where": self.where,
                "min_count": self.min_count,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        manifest = PfsManifest(self.manifest)
        self.log.info("Waiting for manifest %s (where %s, min_count %s)", self.manifest, self.where, self.min_count)
        while True:
            try:
                result = await asyncio.to_thread(manifest.ready, self.where, self.min_count)
            except AirflowException as exc:
                yield TriggerEvent({"status": "error", "error": str(exc)})
                return
            if result is not None:
                yield TriggerEvent({"status": "ready", "result": result})
                return
            await asyncio.sleep(self.poll_interval)


class PfsTreeChangedTrigger(BaseEventTrigger):
    """Fires when the tree a manifest describes changes: entries created, removed or renamed in
    any of its directories (see ``airflow_pfs.tree_changes`` for what is and is not seen).

    For ``AssetWatcher(name, trigger=PfsTreeChangedTrigger(manifest))``: each event (``manifest``,
    ``root``, ``changed`` directories, ``samples``) becomes an asset event that schedules the DAGs
    on that asset.  It keeps watching after an event; each change is reported once; a rewritten
    manifest (the scheduled DAG rescanned) becomes the new baseline.  Without a complete manifest
    it fires once (``reason: "no-manifest"``: nothing to compare, so a first scan is due), then
    waits for one.  A tree that is gone, or is not local, ends the trigger with an error.
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
        stamp: float | None = None
        baseline: tree_changes.Baseline | None = None
        announced_missing = False
        while True:
            current = await asyncio.to_thread(tree_changes.marker_stamp, self.manifest)
            if current is None or current != stamp:
                baseline = await asyncio.to_thread(self._load)
                stamp = current if baseline is not None else None
            if baseline is None:
                if not announced_missing:
                    announced_missing = True
                    yield TriggerEvent({"manifest": self.manifest, "reason": "no-manifest", "changed": 0})
            else:
                announced_missing = False
                changes = await asyncio.to_thread(self._changes, baseline)
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
        try:
            return tree_changes.load_baseline(self.manifest)
        except PfsError as exc:
            raise AirflowException(f"PfsTreeChangedTrigger: {exc}") from None

    @staticmethod
    def _changes(baseline: tree_changes.Baseline) -> tree_changes.Changes:
        try:
            return tree_changes.find_changes(baseline)
        except PfsError as exc:
            raise AirflowException(f"PfsTreeChangedTrigger: {exc}") from None
