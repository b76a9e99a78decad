"""Errors the CLI turns into one clear line and an exit code."""

from __future__ import annotations


class PfsError(Exception):
    """A user-facing failure: bad input, refused action.  ``exit_code`` is what the CLI returns."""

    exit_code = 2


class IncompleteManifestError(PfsError):
    """The manifest directory has no completion marker: the scan failed or was interrupted."""
