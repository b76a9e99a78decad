"""Credentials in URLs (``sftp://bob:secret@host/x``, ``s3://KEY:SECRET@bucket``) never reach a message,
a log line or a lineage event: :func:`redact` replaces a URL's user info by ``***``.  One function, applied
where pfs formats places and errors (``PfsError``'s text, the Airflow task's failure, its OpenLineage names).
"""

from __future__ import annotations

import re

# scheme://userinfo@ where userinfo holds no '/', '@' or whitespace; the whole user info goes (a user name
# alone may be a key id).  The scheme is a URL scheme as RFC 3986 spells it.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s'\"]+)@")


def redact(text: str) -> str:
    """``text`` with the user info of every URL in it replaced by ``***``."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}***@", text) if "@" in text else text
