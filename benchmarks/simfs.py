"""``pfs-sim://``: a synthetic fsspec file system of any size, for tests and benchmarks (never the product).

A tree is a pure function of its spec, carried in the URL's first component, so every Dask worker
that opens the URL sees the same tree and nothing is stored::

    pfs-sim://entries=100000000,shape=mix,seed=1,latency_ms=5,slots=8,service_us=200/

Tree keys: ``entries`` (rows a scan yields, the root excluded), ``shape`` (``balanced``: ``fanout``
subdirectories and ``files`` files per directory, level by level; ``flat``: one directory;
``deep``: a chain ``depth`` directories long, files spread along it; ``mix``: heavy-tailed like a
real project tree: most directories small, a few with thousands of files, subdirectory counts
growing with the subtree), ``seed``.  A directory's listing is computed on demand from
``(spec, path)``: its subtree's entry budget is split among its files and subdirectories.

Cost keys (also accepted as storage options): each request sleeps ``latency_ms`` (no CPU) and, with
``slots`` > 0, holds one of ``slots`` server slots for ``service_us`` (FIFO in virtual time, so the
server answers at most ``slots * 1e6 / service_us`` requests/s and more in flight only queue).
A listing costs one request per ``page`` entries (object stores page 1,000 keys).  ``server`` names
a shared-memory file (``/dev/shm/NAME``) holding the slots and the request counters, so all the
worker processes of one host meet one server; without it each process models its own.
``SimServer`` reads its counters (and changes the latency live).

Register with :func:`register` in the driver before a forked cluster starts, or ``client.run(register)``.
``python -m benchmarks.simfs ARGS`` is the ``pfs`` command line with the protocol registered.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import mmap
import os
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, fields

import fsspec
from fsspec.spec import AbstractFileSystem

PROTOCOL = "pfs-sim"
SHAPES = ("balanced", "flat", "deep", "mix")
EXTENSIONS = (".c", ".h", ".py", ".txt", ".json", ".dat", ".png", ".nc", ".h5", ".log", ".o", "")
EPOCH = 1_767_225_600.0  # 2026-01-01: mtimes fall in the three years before it
SPAN = 94_608_000.0
SHM = "/dev/shm"
N_EXT = len(EXTENSIONS)


@dataclass(frozen=True)
class TreeSpec:
    """What the tree is; the URL's first component spells it (``key=value,...``)."""

    entries: int = 1_000_000
    shape: str = "balanced"
    seed: int = 0
    fanout: int = 10  # balanced: subdirectories per directory
    files: int = 100  # balanced: files per directory; deep: ignored
    depth: int = 200  # deep: length of the chain
    max_files: int = 100_000  # mix: the biggest directory

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"pfs-sim shape must be one of {SHAPES}, not {self.shape!r}")
        if self.entries < 0 or self.fanout < 1 or self.files < 0 or not 1 <= self.depth <= 800:
            raise ValueError(f"pfs-sim: bad tree spec {self}")


@dataclass(frozen=True)
class CostModel:
    """What each request costs: a round trip, and a slot of a bounded server."""

    latency_ms: float = 0.0
    slots: int = 0  # 0: unlimited server
    service_us: float = 0.0
    page: int = 1000  # entries per listing request
    # the name of a shared-memory file (/dev/shm/NAME) holding the server's slots and counters; "": per process
    server: str = ""


_TREE_KEYS = {f.name: f.type for f in fields(TreeSpec)}
_COST_KEYS = {f.name: f.type for f in fields(CostModel)}
_CASTS = {"int": int, "float": float, "str": str}


def parse_label(label: str) -> tuple[dict, dict]:
    """``entries=10,shape=flat,latency_ms=1`` -> (tree keys, cost keys), typed."""
    tree: dict = {}
    cost: dict = {}
    for part in filter(None, label.split(",")):
        key, sep, value = part.partition("=")
        if not sep or (key not in _TREE_KEYS and key not in _COST_KEYS):
            raise ValueError(f"pfs-sim: unknown key {key!r} in {label!r}")
        target, kind = (tree, _TREE_KEYS[key]) if key in _TREE_KEYS else (cost, _COST_KEYS[key])
        target[key] = _CASTS[kind](float(value) if kind == "int" else value) if kind != "str" else value
    return tree, cost


def sim_url(**keys) -> str:
    """A ``pfs-sim://`` URL for these tree and cost keys."""
    for key in keys:
        if key not in _TREE_KEYS and key not in _COST_KEYS:
            raise ValueError(f"pfs-sim: unknown key {key!r}")
    return f"{PROTOCOL}://" + ",".join(f"{k}={v}" for k, v in keys.items()) + "/"


# ---------------------------------------------------------------------------------------- the tree


@dataclass(frozen=True)
class Node:
    """One directory: its subtree's entries, how many are its own files, its subdirectories' budgets."""

    budget: int
    files: int
    children: tuple[int, ...]
    depth: int


def _uniforms(spec: TreeSpec, rel: str, salt: str, n: int) -> list[float]:
    """``n`` uniforms in [0, 1) that depend only on (seed, rel, salt): SHAKE-128 output read as 64-bit words
    (a ``random.Random`` costs ~20 us to seed, more than listing a small directory)."""
    if n <= 0:
        return []
    data = hashlib.shake_128(f"{spec.seed}:{salt}:{rel}".encode()).digest(8 * n)
    return [x * _TO_UNIT for x in memoryview(data).cast("Q").tolist()]


_TO_UNIT = 2.0**-64


def _even(total: int, k: int) -> tuple[int, ...]:
    q, r = divmod(total, k)
    return tuple(q + 1 if i < r else q for i in range(k))


def _weighted(total: int, weights: list[float]) -> tuple[int, ...]:
    s = sum(weights)
    parts = [int(total * w / s) for w in weights]
    for i in range(total - sum(parts)):
        parts[i % len(parts)] += 1
    return tuple(parts)


class Tree:
    """Directory nodes of one spec, computed from the root down and cached (bounded)."""

    CACHE = 200_000

    def __init__(self, spec: TreeSpec) -> None:
        self.spec = spec
        self._cache: dict[str, Node] = {}
        self._lock = threading.Lock()

    def node(self, rel: str) -> Node:
        """The directory at ``rel`` (``""`` is the root); FileNotFoundError if there is none."""
        hit = self._cache.get(rel)
        if hit is not None:
            return hit
        if not rel:
            node = self._split(self.spec.entries, 0, rel)
        else:
            parent, _, name = rel.rpartition("/")
            up = self.node(parent)
            index = _index(name, "d")
            if index is None or index >= len(up.children):
                raise FileNotFoundError(rel)
            node = self._split(up.children[index], up.depth + 1, rel)
        with self._lock:
            if len(self._cache) >= self.CACHE:
                self._cache.clear()
            self._cache[rel] = node
        return node

    def _split(self, budget: int, depth: int, rel: str) -> Node:
        spec = self.spec
        if spec.shape == "flat" or budget == 0:
            return Node(budget, budget, (), depth)
        if spec.shape == "balanced":
            files = min(budget, spec.files)
            k = min(spec.fanout, budget - files)
            return Node(budget, files, _even(budget - files - k, k) if k else (), depth)
        if spec.shape == "deep":
            left = spec.depth - depth
            if left <= 1 or budget == 1:
                return Node(budget, budget, (), depth)
            files = (budget - 1) // left
            return Node(budget, files, (budget - 1 - files,), depth)
        return self._split_mix(budget, depth, rel)

    def _split_mix(self, budget: int, depth: int, rel: str) -> Node:
        """Heavy tails: file counts Pareto(1.2) (median ~9, a few directories of 10^3-10^5), subdirectory
        counts growing like budget^0.3 with noise, subtree sizes log-uniform weighted (one big sibling)."""
        u_files, u_dirs = _uniforms(self.spec, rel, "n", 2)
        files = min(budget, self.spec.max_files, int(8 * (1.0 - u_files) ** (-1 / 1.2)) - 4)
        rest = budget - files
        if rest <= 0 or depth >= 40:
            return Node(budget, budget, (), depth)
        k = max(1, min(rest // 8 or 1, 2000, round(0.7 * rest**0.3 * math.exp(1.2 * (u_dirs - 0.5)))))
        weights = [math.exp(3.0 * u) for u in _uniforms(self.spec, rel, "w", k)]
        return Node(budget, files, _weighted(rest - k, weights), depth)

    def listing(self, rel: str) -> tuple[list[tuple[str, float]], list[tuple[str, int, float]]]:
        """(subdirectories as (name, mtime), files as (name, size, mtime)) of the directory ``rel``."""
        node = self.node(rel)
        k, n = len(node.children), node.files
        u = _uniforms(self.spec, rel, "f", k + 2 * n)
        dirs = list(zip(_names("d", k), [EPOCH - x * SPAN for x in u[:k]], strict=True))
        files = []
        for name, a, b in zip(_names("f", n), u[k : k + n], u[k + n :], strict=True):
            size = int(math.exp(a * 11.09)) - 1 if a < 0.999 else int(1_048_576 * (1 + 9000 * (a - 0.999)))
            files.append((name + EXTENSIONS[int(b * 1e6) % N_EXT], size, EPOCH - b * SPAN))
        return dirs, files

    def dir_mtime(self, rel: str) -> float:
        """A directory's mtime, as its parent's listing gives it (without listing the parent's files)."""
        if not rel:
            return EPOCH
        parent, _, name = rel.rpartition("/")
        index = _index(name, "d")
        if index is None or index >= len(self.node(parent).children):
            raise FileNotFoundError(rel)
        return EPOCH - _uniforms(self.spec, parent, "f", index + 1)[index] * SPAN


_NAMES: dict[str, list[str]] = {"d": [], "f": []}
_NAMES_LOCK = threading.Lock()


def _names(prefix: str, n: int) -> list[str]:
    """``d0000``, ``d0001``, ... (shared by every listing: made once; the lock keeps two threads from both
    extending the list)."""
    names = _NAMES[prefix]
    if len(names) < n:
        with _NAMES_LOCK:
            names.extend(f"{prefix}{i:04d}" for i in range(len(names), n))
    return names[:n]


def _index(name: str, prefix: str) -> int | None:
    if not name.startswith(prefix):
        return None
    digits = name[len(prefix) :].split(".", 1)[0]
    return int(digits) if digits.isdigit() else None


def count(spec: TreeSpec) -> dict:
    """Exact counts of the tree (entries, files, directories) from its directory nodes alone."""
    tree = Tree(spec)
    files = dirs = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        node = tree.node(rel)
        files += node.files
        dirs += len(node.children)
        stack.extend(f"{rel}/d{i:04d}" if rel else f"d{i:04d}" for i in range(len(node.children)))
    return {"entries": files + dirs, "files": files, "directories": dirs}


# ---------------------------------------------------------------------------------------- the server


_HEADER = struct.Struct("<8s q q d d")  # magic, slots, page, latency_s, service_s
_COUNTERS = ("requests", "ls", "info", "entries", "inflight", "inflight_max", "wait_ns", "queue_ns")
_MAGIC = b"pfssim01"
_REQUESTS, _ENTRIES, _WAIT, _QUEUE, _INFLIGHT, _INFLIGHT_MAX = (
    _COUNTERS.index(n) for n in ("requests", "entries", "wait_ns", "queue_ns", "inflight", "inflight_max")
)


class SimServer:
    """The server's state in a shared-memory file: slot free times, the latency (live) and counters.

    Every process of a host that opens the same file meets the same slots, so ``slots`` bounds the
    requests of all workers together.  Reservations take a process lock and ``flock``; the file is
    read through typed memoryviews (struct calls per field cost more than the rest of a listing).
    """

    def __init__(self, path: str, cost: CostModel | None = None) -> None:
        self.path = path
        if cost is not None and not os.path.exists(path):
            self._create(path, cost)
        self._fd = os.open(path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, 0)
        magic, self.slots, _, _, _ = _HEADER.unpack_from(self._map, 0)
        if magic != _MAGIC:
            raise ValueError(f"{path}: not a pfs-sim server file")
        view = memoryview(self._map)
        self._times = view[_HEADER.size - 16 : _HEADER.size].cast("d")  # latency_s, service_s
        self._counts = view[_HEADER.size : _HEADER.size + 8 * len(_COUNTERS)].cast("q")
        self._frees = view[_HEADER.size + 8 * len(_COUNTERS) :].cast("d")
        self._lock = threading.Lock()

    @staticmethod
    def _create(path: str, cost: CostModel) -> None:
        size = _HEADER.size + 8 * len(_COUNTERS) + 8 * max(cost.slots, 0)
        tmp = f"{path}.{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as f:
            f.write(_HEADER.pack(_MAGIC, cost.slots, cost.page, cost.latency_ms / 1e3, cost.service_us / 1e6))
            f.write(b"\0" * (size - _HEADER.size))
        try:
            os.link(tmp, path)  # atomic create-if-absent: another process may have won
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)

    @classmethod
    def create(cls, cost: CostModel) -> SimServer:
        """A fresh server file for one benchmark run (``cost.server`` is ignored); ``name`` goes in the URL."""
        return cls(os.path.join(SHM, f"pfs-sim-{uuid.uuid4().hex[:12]}"), cost)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def set_latency(self, latency_ms: float) -> None:
        """Change the round trip live: every process sees it at its next request."""
        self._times[0] = latency_ms / 1e3

    def counters(self) -> dict[str, int]:
        return dict(zip(_COUNTERS, self._counts.tolist(), strict=True))

    def reset(self) -> None:
        with self._locked():
            for i in range(len(_COUNTERS)):
                self._counts[i] = 0

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def request(self, kind: str, pages: int, entries: int) -> None:
        """One call of ``pages`` sequential requests: reserve slots in virtual time, then sleep it out."""
        latency, service = self._times[0], self._times[1]
        now = time.monotonic()
        t, queued = now, 0.0
        frees, counts, slots = self._frees, self._counts, self.slots
        with self._locked():
            for _ in range(pages):
                t += latency / 2
                if slots > 0:
                    i = min(range(slots), key=frees.__getitem__)
                    start = max(t, frees[i])
                    queued += start - t
                    t = start
                    frees[i] = start + service
                t += service + latency / 2
            counts[_REQUESTS] += pages
            counts[_COUNTERS.index(kind)] += 1
            counts[_ENTRIES] += entries
            counts[_WAIT] += int((t - now) * 1e9)
            counts[_QUEUE] += int(queued * 1e9)
            counts[_INFLIGHT] += 1
            counts[_INFLIGHT_MAX] = max(counts[_INFLIGHT_MAX], counts[_INFLIGHT])
        try:
            _sleep_until(t)
        finally:
            with self._locked():
                counts[_INFLIGHT] -= 1

    def close(self) -> None:
        for view in (self._times, self._counts, self._frees):
            view.release()
        self._map.close()
        os.close(self._fd)

    def remove(self) -> None:
        self.close()
        os.unlink(self.path)


class _LocalServer:
    """A server of this process only (no ``server`` file): same model, process-local state."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self._lock = threading.Lock()
        self._frees = [0.0] * max(cost.slots, 0)

    def request(self, kind: str, pages: int, entries: int) -> None:
        latency, service = self.cost.latency_ms / 1e3, self.cost.service_us / 1e6
        if not latency and not service:
            return
        t = time.monotonic()
        with self._lock:
            for _ in range(pages):
                t += latency / 2
                if self._frees:
                    i = min(range(len(self._frees)), key=self._frees.__getitem__)
                    t = max(t, self._frees[i])
                    self._frees[i] = t + service
                t += service + latency / 2
        _sleep_until(t)


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


# ---------------------------------------------------------------------------------------- fsspec


class SimFileSystem(AbstractFileSystem):
    """Listings and ``info`` of ``pfs-sim`` trees; every call pays the cost model's requests."""

    protocol = PROTOCOL
    root_marker = ""

    def __init__(self, latency_ms=0.0, slots=0, service_us=0.0, page=1000, server="", **kwargs) -> None:
        super().__init__(**kwargs)
        self.cost = CostModel(float(latency_ms), int(slots), float(service_us), int(page), str(server))
        if self.cost.server:
            self._server = SimServer(os.path.join(SHM, os.path.basename(self.cost.server)), self.cost)
        else:
            self._server = _LocalServer(self.cost)
        self._trees: dict[str, Tree] = {}

    @classmethod
    def _strip_protocol(cls, path) -> str:
        path = str(path)
        if path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3 :]
        return path.strip("/")

    @staticmethod
    def _get_kwargs_from_urls(path) -> dict:
        label = SimFileSystem._strip_protocol(path).split("/", 1)[0]
        return parse_label(label)[1]

    def _tree(self, path: str) -> tuple[Tree, str, str]:
        """(tree, label, path below the label) of a stripped path."""
        label, _, rel = path.partition("/")
        tree = self._trees.get(label)
        if tree is None:
            tree = self._trees.setdefault(label, Tree(TreeSpec(**parse_label(label)[0])))
        return tree, label, rel

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        tree, label, rel = self._tree(path)
        try:
            dirs, files = tree.listing(rel)
        except FileNotFoundError:
            self._server.request("ls", 1, 0)
            if self._file_info(tree, label, rel) is not None:
                return [self._file_info(tree, label, rel)] if detail else [path]
            raise FileNotFoundError(path) from None
        n = len(dirs) + len(files)
        self._server.request("ls", max(1, math.ceil(n / self.cost.page)), n)
        base = f"{label}/{rel}" if rel else label
        if not detail:
            return [f"{base}/{name}" for name, _ in dirs] + [f"{base}/{f[0]}" for f in files]
        prefix = base + "/"
        out = [{"name": prefix + name, "size": 0, "type": "directory", "mtime": mtime} for name, mtime in dirs]
        out.extend({"name": prefix + name, "size": size, "type": "file", "mtime": mtime} for name, size, mtime in files)
        return out

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        tree, label, rel = self._tree(path)
        self._server.request("info", 1, 1)
        try:
            tree.node(rel)
            return {"name": path, "size": 0, "type": "directory", "mtime": tree.dir_mtime(rel)}
        except FileNotFoundError:
            found = self._file_info(tree, label, rel)
            if found is None:
                raise FileNotFoundError(path) from None
            return found

    def _file_info(self, tree: Tree, label: str, rel: str) -> dict | None:
        parent, _, name = rel.rpartition("/")
        index = _index(name, "f")
        if not rel or index is None:
            return None
        try:
            _, files = tree.listing(parent)
        except FileNotFoundError:
            return None
        if index >= len(files) or files[index][0] != name:
            return None
        _, size, mtime = files[index]
        return {"name": f"{label}/{rel}", "size": size, "type": "file", "mtime": mtime}


def register() -> None:
    """Make ``pfs-sim://`` known to fsspec in this process (and in workers forked after it)."""
    # by name: it lands in fsspec's known implementations, which pfs's URL check consults
    fsspec.register_implementation(PROTOCOL, f"{__spec__.name if __spec__ else __name__}.SimFileSystem", clobber=True)


def spec_of(url: str) -> TreeSpec:
    return TreeSpec(**parse_label(SimFileSystem._strip_protocol(url).split("/", 1)[0])[0])


if __name__ == "__main__":
    register()
    from dask_pfs.cli import main

    main()
