"""Types of the compiled core (``native/``, built by maturin into ``operators._native``)."""

from collections.abc import Callable

def version() -> str: ...
def describe_errno(errno: int) -> str: ...
def pool_threads() -> int: ...

class Sink:
    """Manifest rows held as columns by the core until :meth:`take`."""

    def __init__(self) -> None: ...
    def __len__(self) -> int: ...
    def push_rows(self, rows: list[tuple]) -> None: ...
    def take(self) -> tuple[int, dict[str, tuple[bytes | None, ...]], tuple[int, bytes, bytes]]: ...

class DirScan:
    """One directory listed and stat-ed in steps (``native/src/scan.rs``)."""

    def __init__(self, dir_fd: int, rel: bytes) -> None: ...
    def step(
        self,
        sink: Sink,
        max_entries: int,
        chunk: int,
        width: int,
        take_ops: Callable[[int], object] | None = None,
        keep: Callable[[list[str]], list[bool]] | None = None,
        descend: int = 0,
    ) -> tuple[tuple[int, int, int, int, int, int, int, int], list[str], list[tuple[bytes, tuple]], int, bool]: ...
