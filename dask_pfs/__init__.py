"""pfs engine: parallel scans and actions on file trees, scheduled on Dask distributed.

Public API::

    from dask_pfs import scan, open_manifest, connect
    result = scan("/lustre/project", "/lustre/manifests/project")
"""

from __future__ import annotations

__version__ = "0.1.0"

from .cluster import ClusterOptions, connect
from .copy import CopyResult, copy  # noqa: F401  (public API)
from .errors import IncompleteManifestError, PfsError
from .manifest import Manifest, open_manifest
from .remove import RemoveResult, remove  # noqa: F401  (public API)
from .scan import ScanResult, scan

__all__ = [
    "ClusterOptions",
    "IncompleteManifestError",
    "Manifest",
    "PfsError",
    "ScanResult",
    "__version__",
    "connect",
    "open_manifest",
    "scan",
]
