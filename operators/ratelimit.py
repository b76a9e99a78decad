"""Caps on what a job asks of the storage: entry operations and bytes per second.

A job-wide cap (``--max-ops-per-second``, ``--max-bandwidth``) is one :class:`TokenBucket`
held by whoever coordinates the job (on Dask: the scheduler, see ``dask_pfs.runtime.limits``).  Each
worker process draws from it through a :class:`LeasedBucket`: it leases a small batch of
tokens (about 50 ms worth of the whole job's rate) and spends them locally, so the remote call
happens once per batch, not per operation, and a busy worker can use the share an idle one
leaves.  Without a coordinator (a single process) a plain local bucket does the same job.

Buckets let a caller go into debt: a reservation of ``n`` tokens returns how long to wait
until they are earned, so callers queue fairly and the long-run rate is exact.

What counts as one operation: one entry touched (an ``lstat`` in a scan, a removal in ``rm``,
an entry created by ``cp``); a directory listing is not counted on its own.  Bytes are data
read for copying.  With no cap set, ``take_ops``/``take_bytes`` return at once.

A stopped job (``operators.stopgate``) takes no more tokens: ``take_ops``/``take_bytes`` raise
``stopgate.Stopped``, a wait for tokens ends at once, and ``ops_capped``/``bytes_capped`` say True so that
an uncapped loop goes the paced way too and meets that refusal before its next batch.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from operators import stopgate
from operators.sizes import parse_size


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up while idle."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self._lock = threading.Lock()
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(1.0, rate * 0.05))
        self._tokens = self.burst
        self._stamp = time.monotonic()
        self.slept = 0.0  # seconds callers waited for tokens: the cap, not the work, set the pace that long

    def set_rate(self, rate: float, burst: float | None = None) -> None:
        """Change the rate in place: debts and waiting callers carry over."""
        with self._lock:
            self._refill(time.monotonic())
            self.rate = float(rate)
            self.burst = float(burst if burst is not None else max(1.0, rate * 0.05))
            self._tokens = min(self._tokens, self.burst)

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def reserve(self, n: float) -> float:
        """Reserve ``n`` tokens now; return the seconds until they are earned (0 if they are there)."""
        with self._lock:
            self._refill(time.monotonic())
            self._tokens -= n
            return -self._tokens / self.rate if self._tokens < 0 else 0.0

    def take(self, n: float = 1) -> float:
        """Reserve ``n`` tokens, sleeping (outside the lock) until they are earned; return the seconds slept."""
        wait = self.reserve(n)
        if wait > 0:
            self.slept += wait  # a float add under the GIL: a lost update only undercounts
            stopgate.sleep(wait)
        return wait


class LeasedBucket:
    """A process's window on a bucket held elsewhere: ``lease(n)`` reserves ``n`` tokens there
    and returns the seconds to wait for them.  Threads of the process share the leased tokens."""

    def __init__(self, lease: Callable[[float], float], batch: float) -> None:
        self._lock = threading.Lock()
        self.lease = lease
        self.batch = max(1.0, batch)
        self._tokens = 0.0

    def take(self, n: float = 1) -> float:
        with self._lock:  # held while waiting: the next caller's tokens come after these anyway
            stopgate.check()  # a caller that waited for the lock while the job stopped
            if self._tokens >= n:
                self._tokens -= n
                return 0.0
            want = max(self.batch, n - self._tokens)
            asked = time.monotonic()
            wait = self.lease(want) - (time.monotonic() - asked)  # the round trip was part of the wait
            if wait > 0:
                stopgate.sleep(wait)
            self._tokens += want - n
            return wait


@dataclass(frozen=True)
class Limits:
    """Per-process caps; None means no cap."""

    ops_per_second: float | None = None
    bytes_per_second: float | None = None

    def share(self, workers: int) -> Limits:
        """This job's caps divided evenly among ``workers`` processes."""
        n = max(1, workers)
        return Limits(
            self.ops_per_second / n if self.ops_per_second else None,
            self.bytes_per_second / n if self.bytes_per_second else None,
        )

    def __bool__(self) -> bool:
        return bool(self.ops_per_second or self.bytes_per_second)


_ops: TokenBucket | LeasedBucket | None = None
_bytes: TokenBucket | LeasedBucket | None = None
_lock = threading.Lock()


def _forget_after_fork() -> None:
    """No caps in a forked child until its job configures them (the parent's lock may be held)."""
    global _ops, _bytes, _lock
    _ops, _bytes, _lock = None, None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)

LEASE_SECONDS = 0.05  # a lease is this much of the job-wide rate


def configure(limits: Limits | None, lease: Callable[[str, float], float] | None = None) -> None:
    """Set (or with None, lift) this process's caps.

    Without ``lease`` the caps are this process's own (local buckets; existing ones keep their
    debts).  With ``lease(kind, n)`` (kind ``"ops"`` or ``"bytes"``) tokens come from a bucket
    shared by the whole job, and ``limits`` are the job-wide rates, used to size the leases.
    """
    global _ops, _bytes
    limits = limits or Limits()
    with _lock:
        if lease is None:
            _ops = _update(_ops, limits.ops_per_second)
            _bytes = _update(_bytes, limits.bytes_per_second, burst_seconds=0.25)
            return
        ops, nbytes = limits.ops_per_second, limits.bytes_per_second
        _ops = LeasedBucket(functools.partial(lease, "ops"), ops * LEASE_SECONDS) if ops else None
        _bytes = LeasedBucket(functools.partial(lease, "bytes"), nbytes * LEASE_SECONDS) if nbytes else None


def _update(bucket, rate: float | None, burst_seconds: float = 0.05) -> TokenBucket | None:
    if not rate:
        return None
    if not isinstance(bucket, TokenBucket):
        return TokenBucket(rate, max(1.0, rate * burst_seconds))
    bucket.set_rate(rate, max(1.0, rate * burst_seconds))
    return bucket


def take_ops(n: int = 1) -> None:
    """Account for ``n`` entry operations, waiting if the process is over its share
    (``stopgate.Stopped`` once the task's job is stopped)."""
    stopgate.check()
    bucket = _ops
    if bucket is not None:
        bucket.take(n)
        stopgate.granted(ops=n)


def throttled_seconds() -> float:
    """Seconds this process's callers have waited on its own caps so far (a leased cap: 0, not known here)."""
    return sum(b.slept for b in (_ops, _bytes) if isinstance(b, TokenBucket))


def ops_capped() -> bool:
    """Whether this process has an ops/s cap to honour (the core then calls :func:`take_ops` per chunk),
    or the running task's job was stopped (its next :func:`take_ops` refuses)."""
    return _ops is not None or stopgate.requested()


def bytes_capped() -> bool:
    """Whether this process has a bandwidth cap (cp then takes tokens per batch of files), or the running
    task's job was stopped."""
    return _bytes is not None or stopgate.requested()


def take_bytes(n: int) -> None:
    """Account for ``n`` bytes of data about to be read (``stopgate.Stopped`` once the job is stopped)."""
    stopgate.check()
    bucket = _bytes
    if bucket is not None and n > 0:
        bucket.take(n)
        stopgate.granted(nbytes=n)


def parse_bandwidth(text: str) -> float:
    """``"200MB/s"``, ``"1.5GiB/s"``, ``"500k"``: a size (``operators.sizes``) per second, positive."""
    m = re.fullmatch(r"(.*?)\s*/\s*s(ec)?\s*", text, re.IGNORECASE)
    try:
        value = parse_size(m.group(1) if m else text)
    except ValueError:
        raise ValueError(f"not a bandwidth: {text!r} (e.g. 200MB/s, 1GiB/s)") from None
    if value <= 0:
        raise ValueError(f"bandwidth must be positive: {text!r}")
    return float(value)
