"""Where jobs keep their journals and work directories (docs/journal.md).

A journal (``operators.journal.Journal``) records what a run finished so ``resume`` can go on
after a crash.  It lives next to what the job writes when that is a local directory
(``DST/.pfs-journal-<id>``, ``MANIFEST/.pfs-journal-<id>``), else in the user's cache directory
(``$XDG_CACHE_HOME/pfs/journals/<id>``).  The id hashes what makes two runs the same job, so the
same command finds its journal again and another command never does.
"""

from __future__ import annotations

import hashlib
import os

from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import JOURNAL_PREFIX
from dask_pfs.urls import Location
from operators.journal import Journal


def pfs_cache(*parts: str) -> str:
    """``$XDG_CACHE_HOME/pfs/...`` (``~/.cache`` when unset)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "pfs", *parts)


def cache_dir(ident: str) -> str:
    """A journal's directory in the cache: ``~/.cache/pfs/journals/<id>``."""
    return pfs_cache("journals", ident)


def ident(*parts: str) -> str:
    """The id of a job: a short hash of what makes two runs the same job."""
    return hashlib.sha1("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:12]


def journal_dir(loc: Location, job_id: str) -> str:
    """``LOC/.pfs-journal-<id>`` for a local directory ``loc``, else one in the cache directory."""
    if loc.is_local:
        return os.path.join(loc.path, f"{JOURNAL_PREFIX}{job_id}")
    return cache_dir(job_id)


def same_job(jr: Journal, job: dict) -> bool:
    """True when ``jr`` describes ``job``, False when it is empty; PfsError for another job's journal
    (an explicit ``journal=`` path may hold one)."""
    prior = jr.job()
    if prior and any(prior.get(k) != v for k, v in job.items()):
        raise PfsError(f"{jr.path}: the journal of another job ({prior}); not resuming it")
    return bool(prior)
