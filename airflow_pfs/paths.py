"""Operator arguments that name places: plain paths, URLs, ObjectStoragePath, upstream results.

Everything becomes ``(url, storage_options)`` for the engine at execute time, after templating,
so a bad value fails the task with a message that names the argument.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from airflow.sdk import ObjectStoragePath
from airflow.sdk.exceptions import AirflowException

LOCAL_PROTOCOLS = ("", "file", "local")


def to_url(value: Any, what: str) -> tuple[str, dict]:
    """``(url, storage_options)`` for a str, PathLike or ObjectStoragePath (with its connection)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise AirflowException(f"{what} is required")
    if isinstance(value, ObjectStoragePath):
        if value.protocol in LOCAL_PROTOCOLS:
            return _local(value.path, what), {}
        options = dict(value.fs.storage_options) if value.conn_id else dict(value.storage_options)
        return f"{value.protocol}://{value.path}", options
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise AirflowException(f"{what} must be a path, URL or ObjectStoragePath, got {type(value).__name__}")
    value = value.strip()
    from dask_pfs.places import local_path  # the one reading of a place

    if "://" in value and local_path(value) is None:
        return value, {}
    bare = value.split("://", 1)[1] if "://" in value else value
    _local(bare, what)
    path = local_path(value)
    assert path is not None, value
    return path, {}


def _local(path: str, what: str) -> str:
    """A worker's working directory is not the DAG author's: a local place must be absolute."""
    if not os.path.isabs(path):
        raise AirflowException(f"{what} must be an absolute path or a URL, got {path!r}")
    return path


def manifest_url(value: Any, what: str = "manifest") -> tuple[str, dict]:
    """Like :func:`to_url`, also taking an upstream pfs operator's result dict (its ``manifest``)."""
    if isinstance(value, Mapping):
        if "manifest" not in value:
            raise AirflowException(f"{what}: the upstream result has no 'manifest' key: {sorted(value)}")
        value = value["manifest"]
    return to_url(value, what)


def merge_options(carried: dict, explicit: dict | None) -> dict | None:
    """Storage options carried by a path (an ObjectStoragePath's connection), overridden by the
    operator's explicit ones; ``None`` when there are none, as the engines expect."""
    return {**carried, **(explicit or {})} or None


def manifest_urls(operator: Any, *names: str) -> dict[str, str]:
    """``{name: url}`` for each manifest argument of ``operator`` that is set."""
    return {n: manifest_url(getattr(operator, n), n)[0] for n in names if getattr(operator, n) is not None}


def check_where(where: Any) -> str | None:
    """One DuckDB condition over manifest rows, or None: the rendered template is checked the way
    the engine checks ``--where`` (``dask_pfs.manifests.sql``), so a DAG run's conf can only filter."""
    from dask_pfs.errors import PfsError
    from dask_pfs.manifests.sql import check_where as check_clause

    try:
        return check_clause(where, "where")
    except PfsError as exc:
        raise AirflowException(str(exc)) from None


def check_cap(value: Any, what: str) -> str | None:
    """A cap such as ``max_entries``: a count or ``"N%"`` (rendered templates are strings)."""
    from dask_pfs.errors import PfsError
    from dask_pfs.manifests.caps import Cap

    try:
        cap = Cap.parse(value, what)
    except PfsError as exc:
        raise AirflowException(str(exc)) from None
    return None if cap is None else str(cap)
