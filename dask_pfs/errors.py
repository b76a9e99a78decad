"""Errors the CLI turns into one clear line and an exit code, and that Python callers catch.

Exception types (all raised before anything is written, unless said otherwise):

* :class:`PfsError`: bad input or a refused action (exit code 2): a missing root, a destination that
  exists, conflicting or bad options, a where-clause that is more than one condition.
* :class:`IncompleteManifestError` (a ``PfsError``): the manifest has no completion marker.
* :class:`NotAManifestError` (a ``PfsError``): the place holds no manifest at all (a data tree).
* :class:`QueryError` (a ``PfsError``): DuckDB refused a query over a manifest.
* :class:`OutputError` (a ``PfsError``, exit code 1): the job's work was done but its output could not be
  written; the same call with ``resume=True`` finishes it.

An option inside a message is a :class:`Named`: the front end showing the error names it, ``--overwrite``
from ``pfs``, ``overwrite=True`` from Python (``dask_pfs.options.named``).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from dask_pfs.redact import redact

# who shows errors in this context: "python" (the API, Airflow) or "cli" (set by ``dask_pfs.cli.run``)
FRONT_END: contextvars.ContextVar[str] = contextvars.ContextVar("pfs_front_end", default="python")


@dataclass(frozen=True)
class Named:
    """An option in an error message, named when shown: its CLI flag, or its Python keyword (with ``value``)."""

    name: str
    flag: str
    value: object = None
    given: str | None = None  # the value as the CLI shows it after the flag: ``--max-entries 10``

    def __str__(self) -> str:
        if FRONT_END.get() == "cli":
            return f"{self.flag} {self.given}" if self.given is not None else self.flag
        return f"{self.name}={self.value!r}" if self.value is not None or self.given else f"{self.name}="

    def set_to(self, value: object, shown: str | None = None) -> Named:
        """This option with ``value``, as a user gives it: ``--chunk-files 7`` (``shown``: the CLI's words for
        the value, else ``value``) or ``chunk_files=7``."""
        return Named(self.name, self.flag, value, given=str(value) if shown is None else shown)


class PfsError(Exception):
    """A user-facing failure: bad input, refused action.  ``exit_code`` is what the CLI returns."""

    exit_code = 2

    def __init__(self, *args: object) -> None:
        """A name that is not UTF-8 (a surrogate escape) is kept as ``\\udcff``: the message can then
        be printed, logged and sent between Dask processes (msgpack takes only UTF-8); a URL's credentials
        (``sftp://bob:secret@host``) are redacted (``dask_pfs.redact``)."""
        super().__init__(*(_text(a) for a in args))

    @classmethod
    def about(cls, option: str | Named, text: str) -> PfsError:
        """``<option><text>``: a :class:`Named` option stays a part (named when shown), a plain name is pasted."""
        return cls(option, text) if isinstance(option, Named) else cls(f"{option}{text}")

    def __str__(self) -> str:
        """Parts with a :class:`Named` option in them are joined, each option named for the front end."""
        if any(isinstance(a, Named) for a in self.args) or (
            len(self.args) > 1 and all(isinstance(a, str) for a in self.args)
        ):
            return "".join(str(a) for a in self.args)
        return super().__str__()


def _text(value: object) -> object:
    if isinstance(value, str):
        return redact(value.encode("utf-8", "backslashreplace").decode("utf-8"))
    return value


class OutputError(PfsError):
    """The job did its work but could not write its output (a full disk, a read-only directory):
    exit 1, and the same command with ``--resume`` finishes it."""

    exit_code = 1


class IncompleteManifestError(PfsError):
    """The manifest directory has no completion marker: the scan failed or was interrupted."""


class NotAManifestError(PfsError):
    """The place holds no manifest: no marker, no parts, no journal of a scan (a data tree, an empty directory)."""


class QueryError(PfsError):
    """DuckDB refused a query over a manifest: ``detail`` is its first line; the message blames the
    user's ``--where`` when there was one (``option``), else the query."""

    def __init__(self, detail: str, option: str | Named | None = None) -> None:
        if isinstance(option, Named):
            super().__init__(option, f": {detail}")
        else:
            super().__init__(f"{option}: {detail}" if option else f"query failed: {detail}")
        self.detail = detail
        self.option = option

    def __reduce__(self):
        """Pickled as its arguments (a remote driver's error reaches the client with the same message)."""
        return type(self), (self.detail, self.option)
