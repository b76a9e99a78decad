"""Waiting for a pfs job on the Dask scheduler from the triggerer, without an Airflow worker.

The trigger polls the job's state record and its published driver task with an asynchronous
Dask client, logs progress lines at a steady interval, and fires one event when the job ends.
It only reads: the job keeps running whatever happens to the triggerer.  ``on_kill`` (a user
marked the task failed or cleared it) is the one place that cancels the job.

Peers of the scheduler are not trusted here: the client unpickles nothing (msgpack only), the driver task
is looked at by the key its signed record names (never fetched), and a record that the job's token did not
sign (``jobs.verified``) ends the wait with an error, never with a result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from distributed import Client, Event, Future, Variable

from dask_pfs.clusters.security import TlsFiles
from dask_pfs.runtime.progress import describe

from . import jobs
from .defer_race import first_check_default, hold_until_settled


class PfsJobTrigger(BaseTrigger):
    """Fires ``{"status": finished|error|cancelled|missing, "name", "result", "error"}``."""

    def __init__(
        self,
        scheduler: str,
        name: str,
        poll_interval: float = 5.0,
        progress_interval: float = 30.0,
        connect_timeout: float = 30.0,
        tls: dict | None = None,
        first_check: float | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__()
        self.token = token or ""  # signs the job's state record (jobs.job_token); trigger kwargs are encrypted
        self.first_check = first_check_default() if first_check is None else first_check
        self.tls = tls  # TlsFiles.as_dict() of the connection (paths or PEM text; trigger kwargs are encrypted)
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
                "first_check": self.first_check,
                "token": self.token,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # The client is closed before the event is yielded: the generator may never be resumed.
        started = time.monotonic()
        try:
            async with self._client() as client:
                payload = await self._wait(client)
        except (OSError, TimeoutError) as exc:  # the scheduler is unreachable: one line, not a traceback
            error = f"cannot reach the Dask scheduler {self.scheduler}: {type(exc).__name__}: {exc}"
            payload = {"status": jobs.ERROR, "name": self.name, "result": None, "error": error}
        await hold_until_settled(started, self.first_check)  # airflow_pfs.defer_race
        yield TriggerEvent(payload)

    def _client(self) -> Client:
        security = TlsFiles(**self.tls).to_security() if self.tls else None
        # msgpack only: nothing a peer of the scheduler put under the job's names is unpickled here
        return Client(
            self.scheduler,
            asynchronous=True,
            timeout=self.connect_timeout,
            security=security,
            deserializers=["msgpack"],
        )

    async def _wait(self, client: Client) -> dict:
        started = last_log = time.monotonic()
        while True:
            record = await _read_record(client, self.name, self.token)
            if record.get("state") == jobs.FORGED:
                forged = f"the state record of {self.name} is not signed by its submitter (forged?): not trusted"
                return {"status": jobs.ERROR, "name": self.name, "result": None, "error": forged}
            future_status = await self._task_status(client, record.get("key"))
            state = jobs.decide(record, future_status)
            now = time.monotonic()
            if state != jobs.RUNNING:
                break
            if now - last_log >= self.progress_interval:
                last_log = now
                counters = record.get("counters") or {}
                self.log.info("%s: %s", record.get("title") or self.name, describe(counters, now - started))
            await asyncio.sleep(self.poll_interval)
        error: str | None = record.get("error")
        if state == jobs.ERROR and not error:
            error = f"driver task {future_status} (its worker's log has the traceback)"
        if state == jobs.FINISHED and self.name in await client.list_datasets():
            # the outcome is in the record; a held result would be recomputed if its worker died
            await client.unpublish_dataset(self.name)
        result = record.get("result")
        if state == jobs.FINISHED and not isinstance(result, dict):
            state, error = jobs.ERROR, f"the job's record holds no result: {result!r}"[:300]
        return {"status": state, "name": self.name, "result": result, "error": error}

    async def _task_status(self, client: Client, key: Any) -> str | None:
        """The driver task's status from the scheduler's plain task state (``jobs.task_status``), by the key
        the signed record names; the published object itself is never fetched."""
        if not isinstance(key, str) or self.name not in await client.list_datasets():
            return None
        state = (await client.scheduler.get_task_status(keys=[key])).get(key)
        return jobs.TASK_STATES.get(state, "pending") if state is not None else "cancelled"

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the job on the cluster."""
        async with self._client() as client:
            await Event(jobs.cancel_name(self.name), client=client).set()
            key = (await _read_record(client, self.name, self.token)).get("key")
            if self.name in await client.list_datasets():
                if isinstance(key, str):
                    await client.cancel([Future(key, client)], force=True)
                await client.unpublish_dataset(self.name)
        self.log.info("Cancelled pfs job %s", self.name)


async def _read_record(client: Client, name: str, token: str) -> dict:
    """The job's record if its token signed it; ``{"state": FORGED}`` if not; ``{}`` if there is none."""
    try:
        raw = await Variable(jobs.state_name(name), client=client).get(timeout=jobs.RECORD_TIMEOUT)
    except TimeoutError:
        return {}
    except TypeError:  # pickled data (a peer's object): the msgpack-only client refused to load it
        return {"state": jobs.FORGED}
    if raw is None:
        return {}
    return jobs.verified(raw, token) or {"state": jobs.FORGED}
