"""The one parser for sizes a user types (``--chunk-bytes``, ``--split-size``, ``--max-bandwidth``).

Semantics are ``dask.utils.parse_bytes``'s (reimplemented: ``operators`` imports no Dask), so a
size means the same in pfs as in a Dask configuration: decimal prefixes are powers of 1000 and
binary ones powers of 1024 (``256M`` = ``256MB`` = 256,000,000 bytes; ``256MiB`` = ``256Mi`` =
268,435,456), the unit is case-insensitive, ``B`` is optional, a bare number is bytes, a bare
unit is one of it (``MB``).  Unlike ``parse_bytes``, a negative size is refused.
"""

from __future__ import annotations

UNITS = {"": 1, "b": 1}
for _k, _prefix in enumerate("kmgtp", start=1):  # k = 1000 or 1024, m = 1000^2 or 1024^2, ...
    UNITS |= {_prefix: 1000**_k, f"{_prefix}b": 1000**_k, f"{_prefix}i": 1024**_k, f"{_prefix}ib": 1024**_k}


def parse_size(text: str | int | float) -> int:
    """Bytes in ``text`` (``"256MiB"``, ``"1.5 GB"``, ``"65536"``); ValueError naming the text."""
    if isinstance(text, int | float):
        number, unit = float(text), ""
    else:
        s = text.replace(" ", "")
        if not any(c.isdigit() for c in s):
            s = f"1{s}"
        i = len(s)
        while i and s[i - 1].isalpha():
            i -= 1
        unit = s[i:].lower()
        try:
            number = float(s[:i])
        except ValueError:
            number = float("nan")
        if number != number or unit not in UNITS:  # NaN: not a number at all
            raise ValueError(f"not a size: {text!r} (e.g. 256MiB = 256*2^20 bytes, 1GB = 10^9, 65536)")
    if number < 0:
        raise ValueError(f"a size must not be negative: {text!r}")
    return int(number * UNITS[unit])
