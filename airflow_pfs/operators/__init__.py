"""pfs operators: each runs one engine call on the ``pfs_dask`` cluster and returns small counts."""

from __future__ import annotations

from .base import PfsBaseOperator
from .copy import PfsCopyOperator
from .remove import PfsRemoveOperator
from .scan import PfsScanOperator
from .sync import PfsSyncOperator
from .verify import PfsVerifyOperator

__all__ = [
    "PfsBaseOperator",
    "PfsCopyOperator",
    "PfsRemoveOperator",
    "PfsScanOperator",
    "PfsSyncOperator",
    "PfsVerifyOperator",
]
