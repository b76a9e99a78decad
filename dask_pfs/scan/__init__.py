"""Scanning a live tree into a manifest: the public ``scan`` (``api``), the engine every job scans with
(``engine``), the driver's own walk of a local tree (``driver_walk``), the scan of a single file (``single_file``)
and the scan journal (``journal``).

``dask_pfs.scan`` is also the public function: the package ``dask_pfs`` keeps that attribute the function.
"""
