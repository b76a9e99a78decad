"""``python -m dask_pfs`` is the ``pfs`` command."""

from .cli import main

main()
