"""pfs engine: parallel scans and actions on file trees, scheduled on Dask distributed.

Public API::

    from dask_pfs import scan, copy, remove, sync, verify, diff, open_manifest, connect
    result = scan("/lustre/project", "/lustre/manifests/project")

    # on a secured (mutual TLS) scheduler, e.g. the Helm chart's
    from dask_pfs import ClusterOptions, TlsFiles
    tls = TlsFiles("ca.crt", "tls.crt", "tls.key")
    result = scan("/data/project", "/data/m", cluster=ClusterOptions(scheduler="tls://sched:8786", security=tls))

Names are imported on first use (PEP 562), so ``pfs scan`` does not pay for DuckDB, the copy
engine and the rest: a one-file scan is mostly interpreter and pyarrow start-up.  The engine
functions share their names with their packages (``dask_pfs.scan`` the package, ``dask_pfs.scan``
the function; likewise ``copy`` and ``remove``); :class:`_Package` keeps the package attribute the
function whichever is imported first.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names are, for type checkers and readers
    from dask_pfs.clusters.client import ClusterOptions, connect
    from dask_pfs.clusters.security import TlsFiles
    from dask_pfs.compare.diff import DiffResult, diff
    from dask_pfs.compare.sync import SyncResult, sync
    from dask_pfs.compare.verify import VerifyResult, verify
    from dask_pfs.copy import CopyResult, copy
    from dask_pfs.errors import IncompleteManifestError, PfsError
    from dask_pfs.manifests.manifest import Manifest, open_manifest
    from dask_pfs.remove.api import RemoveResult, remove
    from dask_pfs.scan.api import ScanResult, scan

from dask_pfs.version import __version__

_HOME = {  # public name -> the module that defines it
    "ClusterOptions": "clusters.client",
    "connect": "clusters.client",
    "CopyResult": "copy",
    "copy": "copy",
    "DiffResult": "compare.diff",
    "diff": "compare.diff",
    "IncompleteManifestError": "errors",
    "PfsError": "errors",
    "Manifest": "manifests.manifest",
    "open_manifest": "manifests.manifest",
    "RemoveResult": "remove.api",
    "remove": "remove.api",
    "ScanResult": "scan.api",
    "scan": "scan.api",
    "TlsFiles": "clusters.security",
    "SyncResult": "compare.sync",
    "sync": "compare.sync",
    "VerifyResult": "compare.verify",
    "verify": "compare.verify",
}
_SHADOWED = frozenset(
    name for name, home in _HOME.items() if name == home.split(".")[0]
)  # function named as its package

__all__ = [
    "ClusterOptions",
    "CopyResult",
    "DiffResult",
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
    "diff",
    "open_manifest",
    "remove",
    "scan",
    "sync",
    "verify",
]
assert set(__all__) == {*_HOME, "__version__"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


class _Package(types.ModuleType):
    """The import system sets ``dask_pfs.scan = <package>`` after loading a submodule; keep the function.

    The attribute is left unset instead, so ``__getattr__`` resolves the function on first use
    (importing ``dask_pfs.scan.journal`` does not import the whole scan driver).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
