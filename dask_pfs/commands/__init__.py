"""One module per ``pfs`` subcommand; importing this package registers them all."""

from . import cp, query, rm, scan, sync, verify, workers  # noqa: F401
