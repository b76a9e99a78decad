"""Big files: byte ranges copied by parallel tasks, then one task that finishes the file.

A POSIX destination takes each range into one temp file (``operators.copy.tasks.copy_part``); a
"finish" task that depends on all of them sets the metadata and renames the file into place.  An
S3 destination gets a multipart upload instead (``operators.copy.multipart``): one task starts
it, the range tasks upload its parts, the finish task completes it, and a failed file is aborted
so its parts do not keep using storage.  Finished ranges (and an upload's id) are journaled, so a
resumed run copies only the ranges still missing and reuses an upload that is still open.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from operators.copy.multipart import (
    abort_upload,
    complete_upload,
    has_multipart,
    one_copy,
    plan_parts,
    start_upload,
    upload_range,
)
from operators.copy.plan import BigFile
from operators.copy.tasks import Entry, Outcome, copy_files, copy_part, finish_file
from operators.journal import Journal

if TYPE_CHECKING:
    from distributed import Future

    from dask_pfs.copy.phases import CopyJob


class BigFiles:
    """The big files of one copy job, and its multipart uploads still open."""

    def __init__(self, job: CopyJob) -> None:
        self.job = job
        self.ranges = 0  # byte-range tasks submitted
        self.uploads: dict[str, tuple[Entry, Future, list[Future]]] = {}  # open multipart uploads by chunk id
        self.started: dict[str, dict] = {}  # what each upload's start task returned, fetched when it ended

    def submit(self, item: BigFile, cid: str) -> None:
        if has_multipart(self.job.spec):
            self.submit_upload(item, cid)
        else:
            self.submit_ranges(item, cid)

    def _range(self, fn, *args, rid: str, part: int) -> Future:
        fut = self.job.sub.future(fn, self.job.spec, *args, kind="range", part=part)
        self.ranges += 1
        if self.job.journal is not None:
            fut.add_done_callback(_record_range(self.job.journal, rid))
        return fut

    def submit_ranges(self, item: BigFile, cid: str) -> None:
        """A big file to a POSIX destination: its ranges into one temp file, then the finish task."""
        e = item.entry
        parts: list[Future | str] = []
        for i, (off, length) in enumerate(item.ranges):
            rid = f"{cid}.r{i}"
            # already in this run's temp file (same token); never for a part of a group, whose last part
            # removes every temp file a killed part left (``copy.group``): its retry copies the file again
            if self.job.group is None and self.job.skip(rid):
                parts.append("copied")
            else:
                parts.append(self._range(copy_part, e, off, length, rid=rid, part=i))
        self.job.submit(finish_file, e, *parts, entries=[e], cid=cid, weight=len(parts) + 1, kind="finish")

    def submit_upload(self, item: BigFile, cid: str) -> None:
        """A big file to an object store: start the upload, one task per range uploads its parts, complete.

        A resumed run passes the upload id its journal holds: still open, its parts are reused
        (ranges find them there); gone (aborted after a failure), the file starts over.
        """
        job, e = self.job, item.entry
        layout = plan_parts(e.size or 0, job.limits.split_size, job.limits.part_size)
        if len(layout) == 1 or one_copy(job.spec, e):  # one PUT (parts under S3's 5 MiB), or one CopyObject
            job.submit(copy_files, [e], entries=[e], cid=cid)
            return
        previous = job.done.get(f"{cid}.mpu", {}).get("upload_id")
        weight = len(layout) + 2
        job.sub.make_room(weight)  # the whole file's tasks within the in-flight budget
        start = job.sub.future(start_upload, job.spec, e, previous, kind="mpu")
        start.add_done_callback(_keep_started(self.started, cid))
        if job.journal is not None:
            start.add_done_callback(_record_upload(job.journal, f"{cid}.mpu", previous))
        futs = []
        for i, parts in enumerate(layout):
            job.skip(f"{cid}.r{i}")  # counted: its parts are reused if the upload is still open
            futs.append(self._range(upload_range, e, start, parts, rid=f"{cid}.r{i}", part=i))
        self.uploads[cid] = (e, start, futs)
        job.submit(complete_upload, e, start, *futs, entries=[e], cid=cid, weight=weight, kind="finish")

    def settle(self, cid: str, out: Outcome) -> None:
        """A big file's finish task is back: forget its upload, aborting it if the file failed."""
        entry = self.uploads.pop(cid, None)
        if entry is not None and out.failures:
            self._abort(cid, *entry)
        self.started.pop(cid, None)

    def abort_open(self) -> None:
        """The job ends with uploads still open (interrupted, or an error): abort them, leak nothing."""
        while self.uploads:
            cid, entry = self.uploads.popitem()
            self._abort(cid, *entry)

    def _abort(self, cid: str, e: Entry, start: Future, futs: list[Future]) -> None:
        with contextlib.suppress(Exception):
            self.job.sub.client.cancel(futs)
        upload = self.started.get(cid)  # known here: Ctrl-C also ends the workers that hold it
        try:
            if upload is None:
                upload = start.result(timeout=60) if start.status != "pending" else None
        except Exception:
            return  # the upload never started (or its id is lost with its worker)
        if upload and upload.get("status") == "copy":
            problem = abort_upload(self.job.spec, e, upload["upload_id"])
            if problem is not None:
                logging.getLogger("pfs").warning("%s: multipart upload not aborted: %s", e.out_rel, problem)


def _record_range(journal: Journal, rid: str):
    """A done-callback recording a finished byte range (runs on the client's event loop)."""

    def record(fut) -> None:
        if fut.status == "finished":
            journal.record(rid)

    return record


def _keep_started(started: dict[str, dict], cid: str):
    """A done-callback keeping a started upload's id in the driver, so an interrupted job can abort it
    without asking a worker (a terminal's Ctrl-C reaches the whole process group, workers included)."""

    def keep(fut) -> None:
        if fut.status == "finished":
            with contextlib.suppress(Exception):
                started[cid] = fut.result()

    return keep


def _record_upload(journal: Journal, uid: str, previous: str | None):
    """A done-callback recording a new multipart upload's id, so a resumed run can go on with it."""

    def record(fut) -> None:
        if fut.status == "finished":
            upload = fut.result()
            if upload.get("status") == "copy" and upload["upload_id"] != previous:
                journal.record(uid, upload_id=upload["upload_id"])

    return record
