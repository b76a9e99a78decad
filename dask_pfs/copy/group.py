"""Parts of one copy: copies of disjoint selections of one manifest into one destination, at once.

A fan-out (``PfsManifest.partitions`` mapped over ``PfsCopyOperator``, or ``pfs cp --manifest M
--where <part>`` started N times) copies parts of one job.  They form a *group*: the manifest's
identity (its URL and completion marker: a rescan is another manifest) and the destination.  Parts
of a group share the destination's lock (``dask_pfs.runtime.locking``) and one temp-file token (so one
part's directory phase never removes another part's files in flight); a copy of another manifest,
of a live tree or of a selection frame is still refused with exit code 2.

Directory modes and times are settled once, after every write into them: each part records its
selection in the group's ledger (beside the lock file) before it writes; the part that finds itself
the only holder of the lock (``Held.alone``) sets the directories of every selection in the ledger,
then clears it, holding the lock's gate meanwhile: a part that comes then waits a moment and is not
refused.  A part that joins after the group settled (a late or retried mapped task) makes the settled
directories it writes into owner-writable again (``operators.copy.pinned``) and settles them again
when it ends (idempotent: the values come from the manifest).

Temp files: the last part, before it settles, removes every ``.*.pfs-tmp-*`` file in those
directories (no writer of the destination is left running, so they are a killed part's).  A killed
part's selection is in the ledger from its start, so its leftovers go with the group's last part, or
with its own retry; a part of a group therefore never resumes a big file's byte ranges from a temp
file (it copies such a file again), since the group's last part may have removed it meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import os

from dask_pfs.manifests.manifest import Manifest
from dask_pfs.manifests.sql import Filter, where_filter
from dask_pfs.runtime.journals import ident
from dask_pfs.runtime.locking import Held, lock_key
from dask_pfs.urls import Location
from operators.core import outputs


def group_of(m: Manifest, dst: Location, selection: Filter | None) -> str | None:
    """The group of copying ``selection`` of ``m`` into ``dst``; None for a selection that cannot be
    recorded as text (a frame's semi-join, a condition pfs built): such a copy holds the lock alone."""
    if selection is not None and (selection.reads or not selection.user):
        return None
    where = m.local_dir if m.is_local else m.url
    return ident("copy-group", os.path.realpath(where) if m.is_local else where, _marker(m), lock_key(dst))


def _marker(m: Manifest) -> str:
    return json.dumps(m.info, sort_keys=True, default=str)


class Ledger:
    """Selections of a group's parts whose directories are not settled yet (one small file each)."""

    def __init__(self, held: Held) -> None:
        self.dir = held.path + ".parts"

    def add(self, selection: Filter | None) -> None:
        text = str(selection) if selection is not None else None
        with outputs.open_dir(self.dir, create=True, mode=outputs.PRIVATE_DIR) as d:  # the one writer
            d.write_bytes(ident(text or "") + ".json", json.dumps({"where": text}).encode(), outputs.PRIVATE_FILE)

    def union(self) -> tuple[list[str], Filter | None]:
        """The files read, and the union of their selections (None: the whole manifest)."""
        try:
            names = sorted(n for n in os.listdir(self.dir) if n.endswith(".json"))
        except FileNotFoundError:
            return [], None
        wheres: list[str] = []
        whole = False
        for name in names:
            with open(os.path.join(self.dir, name)) as f:
                text = json.load(f).get("where")
            checked = where_filter(text)  # checked again: only ever a condition over the manifest's rows
            if checked is None:
                whole = True
            else:
                wheres.append(checked.condition)
        if whole or not wheres:
            return names, None
        return names, Filter(" OR ".join(f"({w})" for w in wheres), user=True)

    def clear(self, names: list[str]) -> None:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.dir, name))
