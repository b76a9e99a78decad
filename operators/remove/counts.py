"""What removing tasks report: counters, and a bounded list of problems (never rows)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from operators.rows import describe_error

T = TypeVar("T")
Bytes = bytes  # the field ``bytes`` below hides the type inside the class

SAMPLES = 20
# status values in the failure log
FAILED, CHANGED, NONEMPTY = "failed", "changed", "nonempty"


@dataclass
class RmCounts:
    """Counters of one task (or of a whole run, once added up); ``problems`` is bounded per task."""

    removed_files: int = 0  # every non-directory: files, symlinks, sockets...
    removed_dirs: int = 0
    bytes: int = 0
    failed: int = 0
    skipped_changed: int = 0
    skipped_missing: int = 0
    skipped_nonempty: int = 0
    problems: list[tuple[Bytes, str, str]] = field(default_factory=list)  # (path, status, error)
    samples: list[Bytes] = field(default_factory=list)  # dry run: what would go

    COUNTERS = (
        "removed_files",
        "removed_dirs",
        "bytes",
        "failed",
        "skipped_changed",
        "skipped_missing",
        "skipped_nonempty",
    )

    def problem(self, rel: Bytes, status: str, error: BaseException | str) -> None:
        if status == FAILED:
            self.failed += 1
        elif status == CHANGED:
            self.skipped_changed += 1
        else:
            self.skipped_nonempty += 1
        self.problems.append((rel, status, describe_error(error)))

    def tried(self, rel: Bytes, fn: Callable[..., T], *args: Any) -> tuple[bool, T | None]:
        """``(True, fn(*args))``, or ``(False, None)`` counted as missing (FileNotFoundError) or failed."""
        try:
            return True, fn(*args)
        except FileNotFoundError:
            self.skipped_missing += 1
        except Exception as exc:
            self.problem(rel, FAILED, exc)
        return False, None

    def sample(self, rel: Bytes, limit: int) -> None:
        if len(self.samples) < limit:
            self.samples.append(rel)

    def add(self, other: RmCounts, sample_limit: int = SAMPLES) -> None:
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.problems.extend(other.problems)
        room = sample_limit - len(self.samples)
        if room > 0:
            self.samples.extend(other.samples[:room])

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.COUNTERS}
