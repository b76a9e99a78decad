"""Removing a tree or a manifest's rows: the public ``remove`` (``api``), its job (``job``), its journal
(``journal``).

``dask_pfs.remove`` is also the public function: the package ``dask_pfs`` keeps that attribute the function.
"""
