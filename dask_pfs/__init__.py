"""pfs engine: parallel scans and actions on file trees, scheduled on Dask distributed.

Public API::

    from dask_pfs import scan, copy, remove, open_manifest, connect
    result = scan("/lustre/project", "/lustre/manifests/project")

Names are imported on first use, so ``pfs --help`` and ``pfs query`` do not pay for
importing Dask distributed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_EXPORTS = {
    "ClusterOptions": "cluster",
    "connect": "cluster",
    "CopyResult": "copy",
    "copy": "copy",
    "IncompleteManifestError": "errors",
    "PfsError": "errors",
    "Manifest": "manifest",
    "open_manifest": "manifest",
    "RemoveResult": "remove",
    "remove": "remove",
    "ScanResult": "scan",
    "scan": "scan",
    "SyncResult": "sync",
    "sync": "sync",
    "VerifyResult": "verify",
    "verify": "verify",
}

__all__ = [
    "ClusterOptions",
    "CopyResult",
    "IncompleteManifestError",
    "Manifest",
    "PfsError",
    "RemoveResult",
    "ScanResult",
    "SyncResult",
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


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dask_pfs' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover
    from .cluster import ClusterOptions, connect
    from .copy import CopyResult, copy
    from .errors import IncompleteManifestError, PfsError
    from .manifest import Manifest, open_manifest
    from .remove import RemoveResult, remove
    from .scan import ScanResult, scan
    from .sync import SyncResult, sync
    from .verify import VerifyResult, verify
