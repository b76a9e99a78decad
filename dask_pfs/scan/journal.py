"""The journal of a scan: what finished tasks wrote, so a killed driver's scan can be finished.

One ``done.jsonl`` line per finished scan task: its id, the directories it was given, the part
files it wrote, its counters and the frontier (directories not walked) it handed back.  A
resumed run keeps those parts and walks only what is still owed: the directories some
finished task handed back (or the root) that no finished task was given.  Every directory
enters the frontier exactly once, so nothing is walked twice and nothing is left out.

Task ids of resumed runs carry the attempt (``r1-0000007``): a task of the killed run that
still runs somewhere can never overwrite a part the new run has journaled.  Parts that no
journal line names (tasks in flight at the kill) are deleted before the marker is written.
See docs/journal.md.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from dask_pfs.errors import PfsError
from dask_pfs.options import PRUNE_KEY, named, named_flag
from dask_pfs.runtime.journals import ident, journal_dir, open_journal, read_job
from dask_pfs.urls import resolve
from operators.journal import ForgedJournalError, Journal
from operators.names import UnsafePathError, check_relative
from operators.scan.task import ChunkResult
from operators.scan.walk import DirItem, Tally
from operators.schema import PART_PREFIX, PART_SUFFIX


def scan_journal(url: str, out: str, out_storage_options: dict | None) -> Journal:
    """``OUT/.pfs-journal-<id>`` for a local output, else one in the user's cache directory."""
    out_loc = resolve(out, out_storage_options)
    return open_journal(journal_dir(out_loc, ident("scan", url, out_loc.url)))


def task_id(attempt: int, n: int) -> str:
    """``0000007`` in a first run (the manifest's usual part names), ``r<attempt>-0000007`` after."""
    return f"{n:07d}" if attempt == 0 else f"r{attempt}-{n:07d}"


@dataclass
class Resumed:
    """What the journal of an interrupted scan says is done, and what is left to walk."""

    attempt: int  # this run's attempt number (the killed run's + 1)
    tasks: int = 0  # finished tasks of earlier runs
    parts: list[str] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    frontier: list[DirItem] = field(default_factory=list)


def start(
    jr: Journal, url: str, out: str, checksum: str | None, prune: dict | None = None, xattrs: bool = False
) -> None:
    """``job.json``: what names the scan and every option that shapes its rows (a resume must match)."""
    job = {"job": "scan", "url": url, "out": out, "checksum": checksum, "prune": prune, "xattrs": xattrs}
    jr.start({**job, "attempt": 0})


def load(
    jr: Journal, url: str, checksum: str | None, root: DirItem, prune: dict | None = None, xattrs: bool = False
) -> Resumed | None:
    """The interrupted scan ``jr`` describes, marked as a new attempt; None when there is none."""
    job = read_job(jr)
    if job.get("job") != "scan" or job.get("url") != url:
        return None
    if bool(job.get("xattrs")) != xattrs:  # parts with and without attributes must not mix in one manifest
        ran = "with" if job.get("xattrs") else "without"
        raise PfsError(
            f"the interrupted scan in {job.get('out')} ran {ran} ",
            named("xattrs", True),
            ": resume it with the same option (or start over with ",
            named("overwrite", True),
            ")",
        )
    if job.get("checksum") != checksum:
        raise PfsError(
            f"the interrupted scan in {job.get('out')} ran with ",
            named("checksum", job.get("checksum")),
            f" ({job.get('checksum') or 'none'}): resume it with the same option (or start over with ",
            named("overwrite", True),
            ")",
        )
    if job.get("prune") != prune:
        raise PfsError(
            f"the interrupted scan in {job.get('out')} left out other entries ({job.get('prune')}): resume it "
            "with the same ",
            named_flag(PRUNE_KEY),
            " (or start over with ",
            named("overwrite", True),
            ")",
        )
    res = Resumed(attempt=int(job.get("attempt", 0)) + 1)
    # Only the frontier left is kept: a task's record is written before its frontier goes out, so
    # a directory is handed back (or is the root) before the record of the task it was given to.
    owed: dict[bytes | str, DirItem] = {root[0]: root}
    early: set[bytes | str] = set()  # given before handed back: only if lines were out of order
    seen: set[str] = set()
    try:
        _fold(jr, res, owed, early, seen)
    except (ForgedJournalError, UnsafePathError, KeyError, TypeError, ValueError) as exc:
        raise PfsError(
            f"{jr.path}: {exc}; refusing to resume from it (delete it, or ",
            named("overwrite", True),
            ", to start over)",
        ) from None
    res.frontier = list(owed.values())
    jr.rewrite_job({**job, "attempt": res.attempt})
    return res


def _fold(jr: Journal, res: Resumed, owed: dict, early: set, seen: set[str]) -> None:
    """Take the journal's records in: parts, counters, and the directories still owed."""
    for rec in jr.records():
        if rec["id"] in seen:
            continue
        seen.add(rec["id"])
        res.tasks += 1
        res.parts.extend(_part(name) for name in rec["parts"])
        res.tally.add(Tally(**rec["tally"], error_samples=rec.get("errors", [])))
        for enc in rec["given"]:
            key = _rel(enc)
            if owed.pop(key, None) is None:
                early.add(key)
        for enc in rec["frontier"]:
            item = decode_item(enc)
            if item[0] in early:
                early.discard(item[0])
            else:
                owed[item[0]] = item


def record(jr: Journal, tid: str, given: list[bytes | str], result: ChunkResult) -> None:
    """Journal one finished task (durable before the driver acts on its frontier)."""
    jr.record(
        tid,
        given=[_enc(rel) for rel in given],
        parts=result.parts,
        tally=result.tally.as_dict(),
        errors=result.tally.error_samples,
        frontier=[encode_item(item) for item in result.frontier],
    )


# ---------------------------------------------------------------- JSON for frontier items
# A DirItem is (relative path, the directory's row as its parent saw it or None); paths are
# bytes on local file systems and rows hold bytes columns (path_raw...): bytes go as base64.


def _enc(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"b": base64.b64encode(value).decode()}
    return value


def _dec(value: Any) -> Any:
    if isinstance(value, dict):
        return base64.b64decode(value["b"], validate=True)
    return value


def _rel(value: Any) -> bytes | str:
    """A directory the journal names, checked like a manifest row (``b""``/``""`` is the root)."""
    rel = _dec(value)
    if not isinstance(rel, bytes | str):
        raise ValueError(f"not a path: {rel!r}")
    if rel:
        check_relative(rel if isinstance(rel, bytes) else rel.encode("utf-8", "surrogateescape"))
    return rel


def _part(name: Any) -> str:
    """A part file the journal names: a bare ``part-*.parquet`` name in the output, nothing else."""
    if not (isinstance(name, str) and name.startswith(PART_PREFIX) and name.endswith(PART_SUFFIX)) or "/" in name:
        raise ValueError(f"not a part name: {name!r}")
    return name


def encode_item(item: DirItem) -> list:
    rel, row = item
    return [_enc(rel), None if row is None else [_enc(v) for v in row]]


def decode_item(enc: list) -> DirItem:
    rel, row = enc
    return _rel(rel), None if row is None else tuple(_dec(v) for v in row)
