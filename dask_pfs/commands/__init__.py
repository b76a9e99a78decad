"""One module per ``pfs`` subcommand, imported on demand by ``dask_pfs.cli.LazyGroup``.

Importing this package imports none of them: ``pfs scan`` should not pay for the copy engine.
"""
