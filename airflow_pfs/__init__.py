"""Airflow provider for pfs: scan, copy and remove file trees on a Dask cluster from DAGs.

This module is what the ``apache_airflow_provider`` entry point loads, so it must stay cheap:
no airflow or dask imports here.  Operators live in ``airflow_pfs.operators``, the hook in
``airflow_pfs.hooks``, ``PfsManifestSensor`` in ``airflow_pfs.sensors``, the job deferral trigger in
``airflow_pfs.triggers``, the manifest wait and the tree watcher for ``AssetWatcher`` in
``airflow_pfs.data_triggers``,
``PfsManifest`` (count, partitions for task mapping) in ``airflow_pfs.manifests``.
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
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["airflow_pfs.sensors"]}],
        "triggers": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_pfs.triggers", "airflow_pfs.data_triggers"]}
        ],
        "connection-types": [
            {
                "connection-type": "pfs_dask",
                "hook-class-name": "airflow_pfs.hooks.PfsDaskHook",
                "hook-name": "pfs (Dask cluster)",
                "conn-fields": CONN_FIELDS,
                "ui-field-behaviour": {
                    "hidden-fields": ["login", "password"],
                    "relabeling": {"host": "Scheduler host (or 'local')", "schema": "Protocol (tcp, tls, ws)"},
                    "placeholders": {"host": "dask-scheduler.example.org or local", "port": "8786", "schema": "tcp"},
                },
            }
        ],
    }


def _field(label: str, kind: str, description: str, **schema) -> dict:
    return {"label": label, "description": description, "schema": {"type": [kind, "null"], **schema}}


# The connection form's extra fields (Airflow 3.2+ reads them from here, without importing the hook).
CONN_FIELDS = {
    "mode": _field(
        "Mode",
        "string",
        "local: an embedded LocalCluster per task; scheduler: the host/port above",
        enum=["local", "scheduler"],
    ),
    "workers": _field("Workers (local mode)", "integer", "worker processes of the embedded cluster", minimum=1),
    "threads": _field("I/O threads per worker", "integer", "operations in flight per worker process", minimum=1),
    "scheduler_file": _field(
        "Scheduler file", "string", "a Dask scheduler file (JSON with its address), instead of host/port"
    ),
    "tls_ca_file": _field(
        "TLS CA file", "string", "CA certificate that signed the scheduler's (path on Airflow workers)"
    ),
    "tls_cert": _field("TLS client certificate", "string", "this client's certificate (PEM file path)"),
    "tls_key": _field("TLS client key", "string", "this client's private key (PEM file path)"),
}
