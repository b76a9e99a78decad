"""Caps on destructive jobs: "at most N entries" or "at most P% of them", refused before anything is done.

One parser for every such option (``--max-entries`` of rm and cp, ``--max-delete`` of sync): a
typo in a where-clause, or a source that vanished, then fails with exit code 2 instead of
emptying a tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from dask_pfs.errors import Named, PfsError


@dataclass(frozen=True)
class Cap:
    """At most ``count`` entries, or at most ``percent`` of a whole; ``option`` names it in messages."""

    option: str | Named
    count: int | None = None
    percent: float | None = None

    @classmethod
    def parse(cls, value: str | int | None, option: str | Named) -> Cap | None:
        """``100`` or ``"100"`` -> a count; ``"5%"`` -> a share; None or ``""`` -> no cap."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        text = str(value).strip()
        try:
            if isinstance(value, bool):
                raise ValueError
            cap = cls(option, percent=float(text[:-1])) if text.endswith("%") else cls(option, count=int(text))
        except ValueError:
            raise PfsError.about(option, f": not a count or a percentage (e.g. 1000 or 5%): {value!r}") from None
        limit = cap.count if cap.count is not None else cap.percent
        if limit is not None and limit < 0:
            raise PfsError.about(option, f": must not be negative: {value!r}")
        if cap.percent is not None and not cap.percent <= 100:  # also NaN: a cap that caps nothing
            raise PfsError.about(option, f": a percentage must be at most 100%: {value!r}")
        return cap

    def check(self, n: int, total: int, doing: str, whole: str = "manifest rows") -> None:
        """Raise PfsError when ``n`` of ``total`` is over the cap; ``doing`` says what would happen."""
        if self.count is not None and n > self.count:
            raise PfsError(f"refusing: {doing} {n:,} entries, more than ", _set(self.option, self.count))
        share = n * 100.0 / max(total, 1)
        if self.percent is not None and share > self.percent:
            raise PfsError(
                f"refusing: {doing} {n:,} of {total:,} {whole} ({share:.1f}%), more than ",
                _set(self.option, f"{self.percent:g}%"),
            )

    def __str__(self) -> str:
        return f"{self.count}" if self.count is not None else f"{self.percent:g}%"


def _set(option: str | Named, value: int | str) -> str | Named:
    """``option`` given ``value``: ``--max-entries 1,000`` (a CLI name, or the CLI's front end) or
    ``max_entries=1000``."""
    shown = f"{value:,}" if isinstance(value, int) else value
    return option.set_to(value, shown) if isinstance(option, Named) else f"{option} {shown}"
