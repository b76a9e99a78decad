"""Whether a job may touch a target: the one decision every job that deletes or writes into a tree takes.

Every place argument is read by ``dask_pfs.urls.resolve`` (``local_path`` for local ones); then
:func:`check_target` decides, before anything is said, made or removed, whatever the options:

* a destination inside one of its sources is refused (a copy or sync of a tree into itself);
* a job that deletes (``rm``, ``rm --manifest``, ``sync --delete``) with a source inside its
  target is refused: what the source lacks there includes the source itself;
* unless ``force``, a deleting job may not reach ``/``, your home directory (or the home
  directory's contents), nor remove the whole of a mount point or bucket.

What a job reaches is its :class:`Reach`: the whole tree (``rm TREE``, a manifest selection of
every row), or the rows a manifest selection names (``rm --manifest M --where ...``, the rows
``sync --delete`` removes).  The decision used to run only for ``rm`` without ``--where``:
``--where "true"`` removed a home directory that ``rm --manifest M`` refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dask_pfs.errors import PfsError
from dask_pfs.options import named
from dask_pfs.urls import Location, is_inside


@dataclass(frozen=True)
class Reach:
    """What a deleting job may remove below its target: ``whole`` (every entry), else what
    ``touches(rel)`` says of a relative path (the job removes it or something below it)."""

    whole: bool = True
    touches: Callable[[str], bool] | None = None

    def reaches(self, rel: str) -> bool:
        return self.whole or self.touches is None or self.touches(rel)


WHOLE = Reach()
# a job whose removals are decided later, each by its own check (``sync --delete``: the plan's rows,
# removed through ``dask_pfs.remove``, which checks them with their selection's reach)
LATER = Reach(whole=False, touches=lambda rel: False)


def check_target(
    target: Location,
    *,
    action: str,
    deletes: bool,
    force: bool = False,
    sources: Iterable[Location] = (),
    reach: Reach = WHOLE,
) -> None:
    """:class:`PfsError` (nothing done) when ``action`` ("remove", "copy", "sync") may not touch
    ``target`` with these ``sources``; ``deletes``: the job removes entries there, within ``reach``."""
    for src in sources:
        if is_inside(target, src):
            raise PfsError(f"{target.url} is inside the source {src.url}; refusing to {action} a tree into itself")
        if deletes and is_inside(src, target):
            raise PfsError(
                f"refusing to {action} into {target.url}: the source {src.url} is inside it, and deleting what the "
                "source lacks there would delete the source"
            )
    if not deletes or force:
        return
    reason = _protected(target, reach)
    if reason:
        raise PfsError(
            f"refusing to remove {target.url}: {reason} (pass ", named("force", True), " to remove it anyway)"
        )


def _protected(loc: Location, reach: Reach) -> str | None:
    """Why a deleting job may not reach into ``loc`` as far as ``reach``, or None."""
    if not loc.is_local:
        bare = loc.path.strip("/")
        if reach.whole and (not bare or "/" not in bare):
            return "it is a whole bucket or file system root"
        return None
    path = os.path.realpath(loc.path)
    home = os.path.realpath(os.path.expanduser("~"))
    if path == "/":
        return "it is the root directory"
    holds_home = home == path or home.startswith(path.rstrip("/") + "/")
    if holds_home and reach.reaches(os.path.relpath(home, path) if home != path else ""):
        return "it is (or holds) your home directory"
    if reach.whole and os.path.ismount(path):
        return "it is a mount point"
    return None


def selection_reach(share: tuple[int, int], count_under: Callable[[str], int]) -> Reach:
    """The reach of a manifest selection: whole when it selects every row (``share``: selected, all),
    else the rows ``count_under(rel)`` counts at or below ``rel``."""
    selected, total = share
    return Reach(whole=selected == total, touches=lambda rel: count_under(rel) > 0)
