"""Keep pyarrow from importing pandas and NumPy behind pfs's back, in processes that never use them.

pyarrow imports pandas the first time it converts Python objects (``pa.array(list)``,
``pa.table(dict)``: its C++ converter and its pandas shim both look for pandas objects), whether or
not any pandas object is around.  That import is 0.3-0.5 s of CPU, the largest single cost of a
1-file ``pfs verify`` (docs/performance.md).  No ``pfs`` command uses pandas, so the command's
process calls :func:`refuse_implicit`: from then on ``import pandas`` fails as if it were not installed
(pyarrow then skips its pandas checks), until code that does want pandas imports it within
:func:`wanted` (``dask_pfs.manifests.frames``); once imported, pandas is there for everyone.

NumPy likewise: ``pyarrow.lib`` (and ``pyarrow._compute``) import it at their own import (about half of
pyarrow's start-up, issue 43) only to convert NumPy arrays, which no command has.  After
:func:`refuse_implicit`, pyarrow is imported as on a host without NumPy (a configuration pyarrow
supports: ``to_numpy`` raises ImportError); NumPy itself stays importable for others (distributed
imports it).  Such a pyarrow cannot convert to pandas (it would crash in C), so :func:`wanted` then
refuses pandas with an ImportError that says so.  Library users of ``dask_pfs`` are not affected: only
the command line (and the warm server) installs the gate.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

_wanted = threading.local()
_arrow = threading.local()  # ``on`` while this thread runs pyarrow.lib's import (NumPy refused)


class _WithoutNumpy:
    """A loader running another's import of a pyarrow module with NumPy refused in this thread."""

    def __init__(self, loader) -> None:
        self._loader = loader

    def __getattr__(self, name: str):  # get_data, is_package, ...: the wrapped loader's
        return getattr(self._loader, name)

    def create_module(self, spec):
        with _no_numpy():
            return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        with _no_numpy():
            self._loader.exec_module(module)


@contextlib.contextmanager
def _no_numpy() -> Iterator[None]:
    before = getattr(_arrow, "on", False)
    _arrow.on = True
    try:
        yield
    finally:
        _arrow.on = before


class _Gate:
    """Refuses ``pandas`` (and its submodules) unless the importing thread is inside :func:`wanted`, and
    ``numpy`` while ``pyarrow.lib`` is being imported.

    A meta path finder (only ``find_spec`` is needed; ``importlib.abc`` costs an import of its own)."""

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top == "pandas" and not getattr(_wanted, "on", False):
            raise ModuleNotFoundError(f"No module named {fullname!r} (pfs: refused in this command)", name=fullname)
        if top == "numpy" and getattr(_arrow, "on", False):
            raise ModuleNotFoundError(f"No module named {fullname!r} (pfs: not for pyarrow here)", name=fullname)
        # pyarrow.lib and pyarrow._compute import NumPy if they can: each pyarrow module (the first, and the
        # others once pyarrow runs without NumPy) is imported with NumPy refused, so pyarrow is one or the other
        arrow = top == "pyarrow" and fullname != "pyarrow" and "numpy" not in sys.modules
        if arrow and (fullname == "pyarrow.lib" or arrow_without_numpy()):
            return self._without_numpy(fullname, path, target)
        return None

    def _without_numpy(self, fullname, path, target):
        """The module's spec as the other finders give it, its loader wrapped by :class:`_WithoutNumpy`."""
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _WithoutNumpy(spec.loader)
                return spec
        return None


_GATE = _Gate()


def refuse_implicit() -> None:
    """Install the gate in this process (and the processes it forks), unless pandas is imported already."""
    if "pandas" not in sys.modules and _GATE not in sys.meta_path:
        sys.meta_path.insert(0, _GATE)


def installed() -> bool:
    return _GATE in sys.meta_path


def arrow_without_numpy() -> bool:
    """Whether this process's pyarrow was imported without NumPy (it then cannot convert to pandas)."""
    lib = sys.modules.get("pyarrow.lib")
    return lib is not None and getattr(lib, "np", True) is None


@contextlib.contextmanager
def wanted() -> Iterator[None]:
    """Let this thread import pandas (``with wanted(): import pandas``); ImportError if this process's
    pyarrow was imported without NumPy (:func:`refuse_implicit`), as its pandas conversion would crash."""
    if "pandas" not in sys.modules and arrow_without_numpy():
        raise ImportError("pandas is not available in a pfs command's process (its pyarrow runs without NumPy)")
    before = getattr(_wanted, "on", False)
    _wanted.on = True
    try:
        yield
    finally:
        _wanted.on = before
