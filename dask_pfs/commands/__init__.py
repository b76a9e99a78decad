"""One module per ``pfs`` subcommand; importing this package registers them all."""

from . import query, rm, scan  # noqa: F401
