"""Keep pyarrow from importing pandas behind pfs's back, in processes that never use pandas.

pyarrow imports pandas the first time it converts Python objects (``pa.array(list)``,
``pa.table(dict)``: its C++ converter and its pandas shim both look for pandas objects), whether or
not any pandas object is around.  That import is 0.3-0.5 s of CPU, the largest single cost of a
1-file ``pfs verify`` (docs/performance.md).  No ``pfs`` command uses pandas, so the command's
process calls :func:`refuse_implicit`: from then on ``import pandas`` fails as if it were not installed
(pyarrow then skips its pandas checks), until code that does want pandas imports it within
:func:`wanted` (``dask_pfs.manifests.frames``); once imported, pandas is there for everyone.
Library users of ``dask_pfs`` are not affected: only the command line installs the gate.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

_wanted = threading.local()


class _Gate:
    """Refuses ``pandas`` (and its submodules) unless the importing thread is inside :func:`wanted`.

    A meta path finder (only ``find_spec`` is needed; ``importlib.abc`` costs an import of its own)."""

    def find_spec(self, fullname, path=None, target=None):
        if (fullname == "pandas" or fullname.startswith("pandas.")) and not getattr(_wanted, "on", False):
            raise ModuleNotFoundError(f"No module named {fullname!r} (pfs: refused in this command)", name=fullname)
        return None


_GATE = _Gate()


def refuse_implicit() -> None:
    """Install the gate in this process (and the processes it forks), unless pandas is imported already."""
    if "pandas" not in sys.modules and _GATE not in sys.meta_path:
        sys.meta_path.insert(0, _GATE)


def installed() -> bool:
    return _GATE in sys.meta_path


@contextlib.contextmanager
def wanted() -> Iterator[None]:
    """Let this thread import pandas (``with wanted(): import pandas``)."""
    before = getattr(_wanted, "on", False)
    _wanted.on = True
    try:
        yield
    finally:
        _wanted.on = before
