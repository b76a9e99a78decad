"""pfs operators: each runs one engine call on the ``pfs_dask`` cluster and returns small counts."""

from __future__ import annotations

from .base import PfsBaseOperator
from .copy import PfsCopyOperator
from .remove import PfsRemoveOperator
from .scan import PfsScanOperator

__all__ = ["PfsBaseOperator", "PfsCopyOperator", "PfsRemoveOperator", "PfsScanOperator"]
