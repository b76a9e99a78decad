"""What ``pfs cp`` and ``pfs sync`` keep besides contents, modes and times: one option group.

``--no-xattrs`` drops extended attributes and ACLs; ``--owner/--no-owner`` keeps or drops
ownership (default: kept when root, as ``cp -a`` and ``rsync -a``); ``--chown`` and
``--numeric-ids`` as rsync has them (``dask_pfs.copy.owners``).
"""

from __future__ import annotations

from collections.abc import Callable

import click


def attr_options(func: Callable) -> Callable:
    """The four options -> keyword arguments ``xattrs``, ``owner``, ``chown``, ``numeric_ids``."""
    opts = [
        click.option(
            "--xattrs/--no-xattrs",
            default=True,
            show_default=True,
            help="Copy extended attributes and POSIX ACLs (user.*, system.posix_acl_*; security.* and "
            "trusted.* with CAP_SYS_ADMIN; lustre.lov/ceph layouts between like file systems). "
            "One the destination refuses is a failure. S3: user.* as object metadata, both ways.",
        ),
        click.option(
            "--owner/--no-owner",
            default=None,
            help="Keep the source's owner and group (default: when root). Asked for explicitly as "
            "non-root, each refused chown is a failure.",
        ),
        click.option(
            "--chown",
            metavar="USER:GROUP",
            help="Give copies this owner and/or group (names on this host or numbers; USER, USER: or :GROUP).",
        ),
        click.option(
            "--numeric-ids",
            is_flag=True,
            help="Keep ids as numbers (as rsync; both trees are on this host, so names map to the same ids anyway).",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


__all__ = ["attr_options"]
