"""Airflow provider for pfs: scan, copy and remove file trees on a Dask cluster from DAGs.

This module is what the ``apache_airflow_provider`` entry point loads, so it must stay cheap:
no airflow or dask imports here.  Operators live in ``airflow_pfs.operators``, the hook in
``airflow_pfs.hooks``, the deferral trigger in ``airflow_pfs.triggers``.
"""

from __future__ import annotations

__version__ = "0.1.0"

INTEGRATION = "pfs"


def get_provider_info() -> dict:
    """Provider metadata for ``airflow providers list`` and the connection form."""
    return {
        "package-name": "pfs",
        "name": "pfs",
        "description": "Parallel file-system tools: scan, copy and remove big trees on a Dask cluster.",
        "versions": [__version__],
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "operators": [{"integration-name": INTEGRATION, "python-modules": ["airflow_pfs.operators"]}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["airflow_pfs.hooks"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["airflow_pfs.triggers"]}],
        "connection-types": [
            {
                "connection-type": "pfs_dask",
                "hook-class-name": "airflow_pfs.hooks.PfsDaskHook",
                "hook-name": "pfs (Dask cluster)",
            }
        ],
    }
