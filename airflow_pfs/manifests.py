"""A manifest as DAG code sees it: is it complete, how many rows a where-clause selects, and how
to split a selection for dynamic task mapping.

``PfsManifest(scan.output).partitions(where="type = 'file'", n=8)`` returns ``n`` selections
``{"manifest": url, "where": condition}`` that together cover the rows ``where`` selects, each
once: the user's condition AND a range of ``path`` (boundaries are the quantiles of the selected
paths, so the parts hold about the same number of rows).  They are small and JSON-serializable,
so ``PfsCopyOperator.partial(dst=...).expand_kwargs(selections)`` maps one copy over each.

Counting and the quantiles go through the engine's manifest selection (``dask_pfs.manifests.query``): a
where-clause only ever filters the manifest's rows here, as everywhere else in pfs.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowException

from dask_pfs.errors import IncompleteManifestError, PfsError
from dask_pfs.manifests.manifest import Manifest, check_manifest_protocol, has_marker, open_manifest
from dask_pfs.manifests.query import select_sql
from dask_pfs.manifests.sql import connect, fetch_all, utf8
from dask_pfs.manifests.sql_probe import probe_manifest
from dask_pfs.runtime.allowed import check_allowed, normalise_roots

from .paths import check_where, manifest_url

DEFAULT_MAX_MAP_LENGTH = 1024
log = logging.getLogger(__name__)


class PfsManifest:
    """A manifest given as a path, URL, ObjectStoragePath or an upstream pfs result (``scan.output``)."""

    def __init__(self, manifest: Any, allowed_roots: Sequence[str] | None = None) -> None:
        """``allowed_roots``: the manifest must lie under one of them (``dask_pfs.runtime.allowed``; a
        DAG author's limit on what a run's conf may point at), checked before it is read."""
        self.url = manifest_url(manifest)[0]
        try:
            check_manifest_protocol(self.url)
            check_allowed({"manifest": self.url}, normalise_roots(allowed_roots))
        except PfsError as exc:
            raise AirflowException(str(exc)) from None

    def is_complete(self) -> bool:
        """The completion marker is there (the scan that writes it finished)."""
        try:
            return has_marker(self.url)
        except OSError as exc:
            raise AirflowException(f"manifest {self.url}: {exc}") from None

    def open(self) -> Manifest:
        try:
            return open_manifest(self.url)
        except PfsError as exc:
            raise AirflowException(f"manifest: {exc}") from None

    def ready(self, where: str | None = None, min_count: int | None = None) -> dict | None:
        """What a sensor waits for: the manifest is complete and, with ``where`` or ``min_count``,
        selects at least ``min_count`` rows (1 by default).  Returns the small result a waiting
        task hands on (``manifest``, ``root``, ``entries``, ``selected``), or None: not yet.

        A manifest that a rescan rewrites meanwhile (its marker goes first and comes back last) is
        "not yet": the marker must be the same before and after the count.
        """
        info = self._marker()
        if info is None:
            return None
        result = {"manifest": self.url, "root": info.get("root"), "entries": (info.get("counts") or {}).get("entries")}
        if where is None and min_count is None:
            return result
        try:
            selected = self.count(where)
        except AirflowException as exc:
            if "IO Error" not in str(exc) and self._marker() == info:
                raise  # the where-clause's fault: waiting will not help
            log.warning("%s: changed while being read (%s): checking again later", self.url, exc)
            return None
        if self._marker() != info:
            return None  # rewritten while counting: the count may mix two scans
        result["selected"] = selected
        return result if selected >= (1 if min_count is None else min_count) else None

    def _marker(self) -> dict | None:
        """The completion marker's contents; None while there is none (not written yet, or a rescan
        is rewriting the manifest)."""
        if not self.is_complete():
            return None
        try:
            return open_manifest(self.url).info
        except IncompleteManifestError:
            return None
        except PfsError as exc:
            raise AirflowException(f"manifest: {exc}") from None

    def count(self, where: str | None = None) -> int:
        """Rows ``where`` selects (all rows without one); counts only, no row leaves DuckDB."""
        return int(self._select("count(*)", check_where(where))[0])

    def partitions(
        self, where: str | None = None, n: int | None = None, max_entries: int | None = None
    ) -> list[dict[str, str | None]]:
        """Split the rows ``where`` selects into ``n`` path ranges, or into as many as keep each
        under ``max_entries`` rows.  Fewer come back when the selection has fewer distinct paths;
        one ``{"manifest", "where"}`` when it is empty (a mapped task then still runs once).
        Refuses more than ``core.max_map_length`` parts, Airflow's cap on mapped task instances.
        """
        where = check_where(where)
        if (n is None) == (max_entries is None):
            raise AirflowException("partitions: give either n (how many parts) or max_entries (rows per part)")
        limit = n if n is not None else max_entries
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise AirflowException(f"partitions: n and max_entries must be whole numbers >= 1, got {limit!r}")
        total = self.count(where)
        parts = n if n is not None else math.ceil(total / limit)
        cap = max_map_length()
        if parts > cap:
            raise AirflowException(
                f"partitions: {total} rows in parts of at most {max_entries} need {parts} mapped tasks, "
                f"over core.max_map_length={cap}: raise max_entries"
                if n is None
                else f"partitions: n={n} is over core.max_map_length={cap}"
            )
        parts = min(parts, total)
        if parts <= 1:
            return [self._selection(where)]
        # Part i starts at the row of index ceil(i * total / parts) in path order; DuckDB's
        # quantile_disc(q) is the row of index ceil(q * total) - 1, hence q = (index + 0.5) / total.
        starts = (math.ceil(i * total / parts) for i in range(1, parts))
        fractions = ", ".join(repr((index + 0.5) / total) for index in starts)
        bounds = sorted(set(self._select(f"quantile_disc(path, [{fractions}])", where)[0]))
        edges = [None, *bounds, None]  # open at both ends: every selected path falls in one range
        return [self._selection(where, low, high) for low, high in itertools.pairwise(edges)]

    def _selection(self, where: str | None, low: str | None = None, high: str | None = None) -> dict[str, str | None]:
        conditions = [f"({_one_line(where)})"] if where else []
        if low is not None:
            conditions.append(f"path >= {sql_str(low)}")
        if high is not None:
            conditions.append(f"path < {sql_str(high)}")
        return {"manifest": self.url, "where": " AND ".join(conditions) or None}

    def _select(self, select: str, where: str | None) -> tuple:
        """The one row of an aggregate over the selected rows."""
        manifest = self.open()
        try:
            # the user's where runs to the end in a bounded child first (PFS_SQL_TIMEOUT, PFS_SQL_MEMORY_LIMIT:
            # what `pfs query` does), then on the connection locked to this manifest, under the same limits
            sql = select_sql(manifest, where=where, select=select)
            probe_manifest(manifest, sql)
            return fetch_all(connect(manifest), sql)[1][0]
        except PfsError as exc:
            raise AirflowException(f"where: {str(exc).removeprefix('query failed: ')}") from None
        except Exception as exc:  # duckdb.Error raised while rows are read (a bad cast in where)
            raise AirflowException(f"where: {str(exc).splitlines()[0]}") from None


def sql_str(s: str) -> str:
    """A DuckDB string literal for a part's path bound.  A part's ``where`` is handed to the task that
    runs it as text, and checked there like any user's clause (``dask_pfs.manifests.sql.check_where``)."""
    return "'" + utf8(s).replace("'", "''") + "'"


def _one_line(where: str) -> str:
    """A checked where-clause without the newline that ends it, unless its last line holds a ``--`` comment
    (which the newline must end before the conditions pfs adds)."""
    text = where.rstrip()
    return text + "\n" if "--" in text.rsplit("\n", 1)[-1] else text


def max_map_length() -> int:
    """Airflow's cap on the instances of one mapped task (``[core] max_map_length``)."""
    try:
        from airflow.sdk.configuration import conf

        return conf.getint("core", "max_map_length", fallback=DEFAULT_MAX_MAP_LENGTH)
    except ImportError:
        return DEFAULT_MAX_MAP_LENGTH
