"""Errors the CLI turns into one clear line and an exit code."""

from __future__ import annotations

from dask_pfs.redact import redact


class PfsError(Exception):
    """A user-facing failure: bad input, refused action.  ``exit_code`` is what the CLI returns."""

    exit_code = 2

    def __init__(self, *args: object) -> None:
        """A name that is not UTF-8 (a surrogate escape) is kept as ``\\udcff``: the message can then
        be printed, logged and sent between Dask processes (msgpack takes only UTF-8); a URL's credentials
        (``sftp://bob:secret@host``) are redacted (``dask_pfs.redact``)."""
        super().__init__(*(_text(a) for a in args))


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


class QueryError(PfsError):
    """DuckDB refused a query over a manifest: ``detail`` is its first line; the message blames the
    user's ``--where`` when there was one (``option``), else the query."""

    def __init__(self, detail: str, option: str | None = None) -> None:
        super().__init__(f"{option}: {detail}" if option else f"query failed: {detail}")
        self.detail = detail
        self.option = option

    def __reduce__(self):
        """Pickled as its arguments (a remote driver's error reaches the client with the same message)."""
        return type(self), (self.detail, self.option)
