"""``python -m dask_pfs`` is the ``pfs`` command."""

from dask_pfs.cli import main

main()
