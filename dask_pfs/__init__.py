"""pfs engine: parallel scans and actions on file trees, scheduled on Dask distributed.

Public API::

    from dask_pfs import scan, copy, remove, open_manifest, connect
    result = scan("/lustre/project", "/lustre/manifests/project")

    # on a secured (mutual TLS) scheduler, e.g. the Helm chart's
    from dask_pfs import ClusterOptions, TlsFiles
    tls = TlsFiles("ca.crt", "tls.crt", "tls.key")
    result = scan("/data/project", "/data/m", cluster=ClusterOptions(scheduler="tls://sched:8786", security=tls))

The engine functions share their names with their modules (``dask_pfs.scan`` the module,
``dask_pfs.scan`` the function): they are imported eagerly here so the package attribute is
always the function, whatever was imported first.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .cluster import ClusterOptions, connect
from .copy import CopyResult, copy
from .errors import IncompleteManifestError, PfsError
from .manifest import Manifest, open_manifest
from .remove import RemoveResult, remove
from .scan import ScanResult, scan
from .security import TlsFiles
from .sync import SyncResult, sync
from .verify import VerifyResult, verify

__all__ = [
    "ClusterOptions",
    "CopyResult",
    "IncompleteManifestError",
    "Manifest",
    "PfsError",
    "RemoveResult",
    "ScanResult",
    "SyncResult",
    "TlsFiles",
    "VerifyResult",
    "__version__",
    "connect",
    "copy",
    "open_manifest",
    "remove",
    "scan",
    "sync",
    "verify",
]
