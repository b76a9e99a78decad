"""Types of the compiled core (``native/``, built by maturin into ``operators._native``)."""

from collections.abc import Callable

def version() -> str: ...
def describe_errno(errno: int) -> str: ...
def pool_threads() -> int: ...
def _pool_selftest(n: int, width: int, panic_at: int | None = None) -> int:
    """Runs ``n`` chunks over ``width`` core threads; a chunk ``panic_at`` panics (tests: PanicException)."""

class Buffer:
    """A read-only buffer over memory the core built: ``pyarrow.py_buffer`` takes it without a copy."""

    def __len__(self) -> int: ...

class Sink:
    """Manifest rows held as columns by the core until :meth:`take`."""

    def __init__(self) -> None: ...
    def __len__(self) -> int: ...
    def detach(self) -> Sink:
        """The rows so far in a new sink, this one empty (no copy)."""

    def push_rows(self, rows: list[tuple]) -> None:
        """OverflowError, with nothing added, if the rows could pass the columns' 2 GiB (int32 offsets)."""

    def take(self, sort: bool = False) -> tuple[int, dict[str, tuple[Buffer | None, ...]], tuple[int, Buffer, Buffer]]:
        """The rows and an empty sink; ``sort``: in path order (sorted on the core's threads)."""

class DirScan:
    """One directory listed and stat-ed in steps (``native/core/src/scan.rs``).  A step whose hook raises,
    or whose rows do not fit the sink (OverflowError), writes nothing and keeps what it listed for the
    next step."""

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

# rm (native/core/src/remove.rs; mtimes in ns, any size):
# (removed, bytes, missing, [(index, status, errno, message)], [sample index])
RmBatch = tuple[int, int, int, list[tuple[int, int, int, str | None]], list[int]]

def rm_clear_dir(
    dir_fd: int, dry_run: bool, want_dev: bool, fanout: int, sample_limit: int, names: list[bytes] | None = None
) -> tuple[int, int, int, int, list[tuple[bytes, int]], list[tuple[bytes, int]], list[bytes]]: ...
def rm_unlink_rels(
    root: bytes,
    rels: list[bytes],
    kinds: bytes,
    sizes: list[int | None],
    mtimes: list[int | None],
    check: bool,
    dry_run: bool,
    fanout: int,
    sample_limit: int,
    root_id: tuple[int, int] | None = None,
    inos: list[int | None] | None = None,
    ctimes: list[int | None] | None = None,
) -> RmBatch: ...

Identity = tuple[int, int | None, int | None, int | None, int | None]  # (kind code, size, mtime ns, ino, ctime ns)

def rm_identity_changed(want: Identity, now: Identity) -> str | None: ...
def rm_rmdir_rels(
    root: bytes,
    rels: list[bytes],
    check: bool,
    dry_run: bool,
    fanout: int,
    sample_limit: int,
    root_id: tuple[int, int] | None = None,
) -> RmBatch: ...

# root_id / src_root_id: the root's (device, inode) when the job started (operators.scan.root_guard.root_id);
# another directory renamed into its place since fails every row with ESTALE, nothing done in it.
# cp (native/core/src/copy.rs; a FIFO or device: ERROR with EINVAL, never opened for a blocking read):
# one status byte per file (COPIED, SKIP, ERROR, DIFFERS, DST_PARENT), one errno per file
def cp_files(
    src_root: bytes,
    dst_root: bytes,
    rels: list[bytes],
    outs: list[bytes],
    temps: list[bytes],
    sizes: list[int | None],
    mtimes: list[int | None],
    follow: bool,
    uid: int,
    gid: int,
    xattrs: bool,
    inplace: bool,
    check_existing: bool,
    on_exist: int,
    umask: int,
    fanout: int,
    src_root_id: tuple[int, int] | None = None,
) -> tuple[bytes, list[int], list[tuple[int, bytes, int]]]: ...
def copy_xattrs(src: int | bytes, dst: int | bytes, clean: bool, phase: str = ...) -> list[tuple[bytes, int]]: ...
def checksum_files(
    root: bytes, rels: list[bytes], algorithm: str, fanout: int, root_id: tuple[int, int] | None = None
) -> list[tuple[bool, str]]: ...
def xattrs_of(
    root: bytes, rels: list[bytes], fanout: int
) -> tuple[
    bytes,
    bytes,
    bytes,
    tuple[bytes, bytes, bytes | None],
    tuple[bytes, bytes, bytes | None],
    tuple[bytes, bytes, bytes | None],
    list[tuple[int, str]],
]: ...
