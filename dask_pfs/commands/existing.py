"""What ``pfs cp`` and ``pfs sync`` do with destination files that exist: one option group, one ``on_exist``.

``--update`` (alias ``--replace-changed``) replaces files that differ, ``--ignore-existing`` never
touches an existing file, ``--overwrite`` rewrites every one.  ``--skip-existing``, the first name
of ``--update`` (it never skipped a differing file), still works, hidden, with a warning.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import click

from dask_pfs.errors import PfsError


def existing_options(func: Callable) -> Callable:
    """``--overwrite``, ``--update``, ``--ignore-existing`` (and hidden ``--skip-existing``) -> ``on_exist``:
    ``error`` (default), ``skip`` (update), ``ignore`` or ``overwrite``, as ``operators.copy.spec.CopySpec``."""
    opts = [
        click.option("--overwrite", is_flag=True, help="Rewrite every destination file that exists."),
        click.option(
            "-u",
            "--update",
            "--replace-changed",
            "update",
            is_flag=True,
            help="Replace existing files that differ (size or mtime); identical ones are skipped.",
        ),
        click.option(
            "--ignore-existing",
            is_flag=True,
            help="Never touch a destination file that exists, identical or not: copy only what is missing.",
        ),
        click.option("--skip-existing", is_flag=True, hidden=True, help="Deprecated: --update."),
    ]
    for opt in reversed(opts):
        func = opt(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        overwrite, update, ignore = kwargs.pop("overwrite"), kwargs.pop("update"), kwargs.pop("ignore_existing")
        if kwargs.pop("skip_existing"):
            click.echo("pfs: warning: --skip-existing is deprecated, use --update (same meaning)", err=True)
            update = True
        chosen = [
            n for n, on in (("--overwrite", overwrite), ("--update", update), ("--ignore-existing", ignore)) if on
        ]
        if len(chosen) > 1:
            raise PfsError(f"{' and '.join(chosen)} exclude each other")
        kwargs["on_exist"] = "overwrite" if overwrite else "skip" if update else "ignore" if ignore else "error"
        return func(*args, **kwargs)

    return wrapper
