"""``python -m dask_pfs`` is the ``pfs`` command."""

from dask_pfs.warm.client import main

main()
