"""Where a job's failure log goes unless told: pfs's cache directory, one file per job."""

from __future__ import annotations

import contextlib
import os

from dask_pfs.runtime.journals import ident, private_cache


def default_log(job: str, *names: str) -> str:
    """Where a job's failure log goes unless told: one file per job (the same ``job`` and ``names``,
    e.g. the same source and destination), in pfs's cache directory beside its journals, replaced
    by each run, so logs never pile up in /tmp.  A stale one from an earlier run is removed now."""
    name = f"{job}-{ident(*names)}-failures.parquet"
    logs = private_cache("logs")  # 0700, every directory above checked (the one writer)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(logs, name))
    return os.path.join(logs, name)


__all__ = ["default_log"]
