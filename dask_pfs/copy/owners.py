"""``--chown USER:GROUP`` as ids, resolved once on the driver.

As rsync's: names or numbers, either part optional (``USER``, ``USER:``, ``:GROUP``).  Names are
looked up in this host's passwd and group databases.  pfs reads and writes both trees on this host
(or on workers mounting the same trees), so rsync's default mapping of owners by name (uid -> name
on the sending host -> uid on the receiving one) passes through one passwd database and keeps every
id as it is: ``--numeric-ids`` is accepted (and recorded for ``--resume``) but changes nothing here.
"""

from __future__ import annotations

import grp
import pwd

from dask_pfs.errors import PfsError


def _id(text: str, lookup, what: str) -> int | None:
    if not text:
        return None
    if text.isdigit():
        value = int(text)
        if value >= 2**32 - 1:
            raise PfsError(f"--chown: {what} {text} is out of range")
        return value
    try:
        return int(lookup(text))
    except KeyError:
        raise PfsError(f"--chown: no {what} named {text!r} on this host") from None


def parse_chown(spec: str | None) -> tuple[int | None, int | None]:
    """``(uid, gid)`` of ``--chown`` (None: that part not given); a bad one is a :class:`PfsError` (exit 2)."""
    if spec is None:
        return None, None
    user, sep, group = spec.partition(":")
    uid = _id(user, lambda n: pwd.getpwnam(n).pw_uid, "user")
    gid = _id(group, lambda n: grp.getgrnam(n).gr_gid, "group") if sep else None
    if uid is None and gid is None:
        raise PfsError(f"--chown {spec!r}: give USER, USER:GROUP or :GROUP (names or numbers)")
    return uid, gid


__all__ = ["parse_chown"]
