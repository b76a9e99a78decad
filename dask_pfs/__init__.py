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
functions share their names with their modules (``dask_pfs.scan`` the module, ``dask_pfs.scan``
the function); :class:`_Package` keeps the package attribute the function whichever is imported
first.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names are, for type checkers and readers
    from .cluster import ClusterOptions, connect
    from .copy import CopyResult, copy
    from .diff import DiffResult, diff
    from .errors import IncompleteManifestError, PfsError
    from .manifest import Manifest, open_manifest
    from .remove import RemoveResult, remove
    from .scan import ScanResult, scan
    from .security import TlsFiles
    from .sync import SyncResult, sync
    from .verify import VerifyResult, verify

from .version import __version__

_HOME = {  # public name -> the submodule that defines it
    "ClusterOptions": "cluster",
    "connect": "cluster",
    "CopyResult": "copy",
    "copy": "copy",
    "DiffResult": "diff",
    "diff": "diff",
    "IncompleteManifestError": "errors",
    "PfsError": "errors",
    "Manifest": "manifest",
    "open_manifest": "manifest",
    "RemoveResult": "remove",
    "remove": "remove",
    "ScanResult": "scan",
    "scan": "scan",
    "TlsFiles": "security",
    "SyncResult": "sync",
    "sync": "sync",
    "VerifyResult": "verify",
    "verify": "verify",
}
_SHADOWED = frozenset(name for name, home in _HOME.items() if name == home)  # function named as its module

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
    """The import system sets ``dask_pfs.scan = <module>`` after loading a submodule; keep the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
