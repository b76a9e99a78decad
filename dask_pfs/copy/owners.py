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
from dask_pfs.options import named


def _id(text: str, lookup, what: str) -> int | None:
    if not text:
        return None
    if text.isdigit():
        value = int(text)
        if value >= 2**32 - 1:
            raise PfsError(named("chown", text), f": {what} {text} is out of range")
        return value
    try:
        return int(lookup(text))
    except KeyError:
        raise PfsError(named("chown", text), f": no {what} named {text!r} on this host") from None


def parse_chown(spec: str | None) -> tuple[int | None, int | None]:
    """``(uid, gid)`` of ``--chown`` (None: that part not given); a bad one is a :class:`PfsError` (exit 2)."""
    if spec is None:
        return None, None
    user, sep, group = spec.partition(":")
    uid = _id(user, lambda n: pwd.getpwnam(n).pw_uid, "user")
    gid = _id(group, lambda n: grp.getgrnam(n).gr_gid, "group") if sep else None
    if uid is None and gid is None:
        raise PfsError(named("chown", spec), ": give USER, USER:GROUP or :GROUP (names or numbers)")
    return uid, gid


def resolve(preserve: bool, owner: bool | None, chown: str | None) -> tuple[bool | None, tuple[int | None, int | None]]:
    """``owner`` (None: keep owners when the copier may give files away, ``operators.copy.spec.may_chown``;
    ``preserve``, its old name, is True) and the ids of ``chown``."""
    return (True if preserve and owner is None else owner), parse_chown(chown)


__all__ = ["parse_chown", "resolve"]
