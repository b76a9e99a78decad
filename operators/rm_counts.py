"""What removing tasks report: counters, and a bounded list of problems (never rows)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .rows import describe_error

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
    problems: list[tuple[bytes, str, str]] = field(default_factory=list)  # (path, status, error)
    samples: list[bytes] = field(default_factory=list)  # dry run: what would go

    COUNTERS = (
        "removed_files",
        "removed_dirs",
        "bytes",
        "failed",
        "skipped_changed",
        "skipped_missing",
        "skipped_nonempty",
    )

    def problem(self, rel: bytes, status: str, error: BaseException | str) -> None:
        if status == FAILED:
            self.failed += 1
        elif status == CHANGED:
            self.skipped_changed += 1
        else:
            self.skipped_nonempty += 1
        self.problems.append((rel, status, describe_error(error)))

    def sample(self, rel: bytes, limit: int) -> None:
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
