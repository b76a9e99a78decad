"""One definition of each job option: Python keyword, CLI flag, type, default, help, whether it binds a resume.

The Python API, the CLI and the errors read options from here (rclone's ``ConfigInfo``, in small):

* :func:`job_options` gives a public engine function (``scan``, ``copy``, ``remove``, ``sync``, ``verify``,
  ``diff``) the pruning and job-wide cap options as plain keyword arguments (``exclude=[".git/"]``,
  ``max_ops_per_second=500``), the same names in every job, folded into the engine's ``prune``/``limits``
  objects, so a notebook never imports ``operators.scan.prune.Prune`` or ``operators.ratelimit.Limits``;
  it lists them in the function's signature and docstring (what ``pydoc``/``help()`` and a notebook's
  completion show);
* :func:`click_options` makes the CLI's flags of the same options, with the same help;
* :func:`named` is an option inside an error message: ``PfsError(named("overwrite", True), " replaces it")``
  reads ``--overwrite replaces it`` from ``pfs`` and ``overwrite=True replaces it`` from Python
  (``dask_pfs.errors.Named``: the front end that shows the error names the option).

``binds_resume``: a resumed run must be given the same value as the run it finishes (the journal records it,
``dask_pfs.runtime.journals.check_options``).
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dask_pfs.errors import Named, PfsError

SIZES = "256M = 256*10^6 bytes, 256MiB = 256*2^20 (as dask.utils.parse_bytes)"


@dataclass(frozen=True)
class Option:
    """One option as every front end sees it."""

    name: str  # the Python keyword (and the Airflow operators' argument)
    flag: str  # the CLI's long flag
    annotation: str  # its type, as the signature shows it
    default: Any
    help: str
    binds_resume: bool = False
    short: str | None = None  # the CLI's short flag
    multiple: bool = False  # a list in Python, a repeatable flag on the command line
    metavar: str | None = None
    jobs: tuple[str, ...] = ()  # the public engine functions whose own keyword it is (see :func:`of_job`)
    decls: tuple[str, ...] = ()  # the CLI's declarations when more than ``flag`` (aliases, ``--x/--no-x``)
    kind: str | None = None  # the CLI's value type: "count" (a whole number >= 1), "size" (256MiB)
    cli: bool = True  # False: a Python (and Airflow) keyword only
    airflow: str | None = ""  # the Airflow operators' argument: "" the same name, None not one
    show_default: bool = False
    task: bool = False  # the copy's tasks take it as it is: a field of ``operators.copy.spec.CopySpec``

    @property
    def airflow_name(self) -> str | None:
        return self.name if self.airflow == "" else self.airflow


COPY, SYNC = ("copy",), ("sync",)
_ALL = (
    Option(
        "exclude", "--exclude", "Sequence[str]", (),
        "Leave out entries matching these gitignore-style patterns; excluded directories are never listed.",
        binds_resume=True, multiple=True, metavar="PATTERN",
    ),
    Option(
        "include", "--include", "Sequence[str]", (),
        "Keep only files matching one of these gitignore-style patterns; directories no pattern can reach "
        "below are never listed.",
        binds_resume=True, multiple=True, metavar="PATTERN",
    ),
    Option("max_depth", "--max-depth", "int | None", None, "Go no deeper than N levels below the root.", True),
    Option(
        "one_file_system", "--one-file-system", "bool", False,
        "Do not enter directories on other file systems (mounts).", True, short="-x",
    ),
    Option(
        "max_ops_per_second", "--max-ops-per-second", "float | None", None,
        "Cap the whole job's entry operations per second (all workers together).",
    ),
    Option(
        "max_bandwidth", "--max-bandwidth", "str | float | None", None,
        f"Cap the whole job's data reads, e.g. 200MB/s or 1GiB/s ({SIZES}).",
        metavar="RATE",
    ),
    # options that errors name (each function takes them as its own keyword)
    Option(
        "overwrite", "--overwrite", "bool", False, "Rewrite every destination file that exists.", True,
        jobs=COPY,
    ),
    Option(
        "resume", "--resume", "bool", False,
        "Go on with an interrupted run: only the chunks its journal lacks.", jobs=COPY + SYNC, airflow=None,
    ),
    Option(
        "manifest", "--manifest", "str | None", None,
        "Copy the rows of this manifest (relative to its root) instead of scanning SRC.", True, jobs=COPY,
    ),
    Option(
        "where", "--where", "str | None", None,
        "With --manifest: one SQL condition over the manifest's columns selecting the rows to copy "
        "(no statements, no subqueries).", True, jobs=COPY,
    ),
    Option("select", "--select", "str | None", None, "Columns or expressions over the manifest's columns."),
    Option("order_by", "--order-by", "str | None", None, "Sort keys over the manifest's columns."),
    Option("group_by", "--group-by", "str | None", None, "Grouping expressions for an aggregate select."),
    Option(
        "max_entries", "--max-entries", "int | str | None", None,
        "With --manifest: refuse (exit 2, nothing copied) when the selection has more rows than N (or N%).",
        jobs=COPY, metavar="N|P%",
    ),
    Option(
        "update", "--update", "bool", False,
        "Replace existing files that differ (size or mtime); identical ones are skipped.", True,
        jobs=COPY, decls=("-u", "--update", "--replace-changed"),
    ),
    Option("allow_incomplete", "--allow-incomplete", "bool", False, "Read a manifest without its marker."),
    # copy's own options (sync passes those it shares on to the copy it runs)
    Option(
        "manifest_out", "--manifest-out", "str | None", None,
        "Keep the scan of SRC in this manifest directory (default: a temporary one).", True, jobs=COPY,
    ),
    Option(
        "ignore_existing", "--ignore-existing", "bool", False,
        "Never touch a destination file that exists, identical or not: copy only what is missing.", True,
        jobs=COPY + SYNC,
    ),
    Option(
        "follow_symlinks", "--dereference", "bool", False, "Copy what symlinks to files point at.", True,
        short="-L", jobs=COPY, task=True,
    ),
    Option("preserve", "--preserve", "bool", False, "Same as --owner (kept for scripts).", True, jobs=COPY),
    Option(
        "xattrs", "--xattrs", "bool", True,
        "Copy extended attributes and POSIX ACLs (user.*, system.posix_acl_*; security.* and "
        "trusted.* with CAP_SYS_ADMIN; lustre.lov/ceph layouts between like file systems). "
        "One the destination refuses is a failure. S3: user.* as object metadata, both ways.", True,
        jobs=COPY + SYNC, decls=("--xattrs/--no-xattrs",), show_default=True, task=True,
    ),
    Option(
        "owner", "--owner", "bool | None", None,
        "Keep the source's owner and group (default: when root). Asked for explicitly as "
        "non-root, each refused chown is a failure.", True,
        jobs=COPY + SYNC, decls=("--owner/--no-owner",), airflow="keep_owner",  # Airflow's owner: the task's
    ),
    Option(
        "chown", "--chown", "str | None", None,
        "Give copies this owner and/or group (names on this host or numbers; USER, USER: or :GROUP).", True,
        jobs=COPY + SYNC, metavar="USER:GROUP",
    ),
    Option(
        "numeric_ids", "--numeric-ids", "bool", False,
        "Keep ids as numbers (as rsync; both trees are on this host, so names map to the same ids anyway).",
        True, jobs=COPY + SYNC,
    ),
    Option(
        "inplace", "--inplace", "bool", False,
        "Write small files straight to their names (no temp name + rename; faster on GlusterFS, not atomic).",
        True, jobs=COPY, task=True,
    ),
    Option(
        "stream", "--stream", "bool | None", None,
        "Into a new local destination, copy each directory's files as the scan lists them "
        "(default: yes, unless SRC or DST is a network or FUSE mount, where copying after the scan is faster).",
        True, jobs=COPY, decls=("--stream/--no-stream",),
    ),
    Option(
        "chunk_files", "--chunk-files", "int", 500, "Files per copy task.", True,
        jobs=COPY + SYNC, kind="count", show_default=True,
    ),
    Option(
        "chunk_bytes", "--chunk-bytes", "int", 256 << 20, f"Bytes per copy task ({SIZES}).", True,
        jobs=COPY + SYNC, kind="size", show_default=True,
    ),
    Option(
        "split_size", "--split-size", "int | None", None,
        "Copy bigger files in byte ranges of this size, in parallel "
        "(default: 256MiB, or whole files from one local disk to another).", True, jobs=COPY + SYNC, kind="size",
    ),
    Option(
        "part_size", "--part-size", "int", 8 << 20,
        "Parts of the multipart upload a big file becomes on S3 (at least 5 MiB).", True,
        jobs=COPY, cli=False,
    ),
    Option(
        "log", "--log", "str | None", None,
        "Parquet file listing failed paths (default: one in the temp dir).", jobs=COPY,
        decls=("--log", "--failure-log"),  # --failure-log: its first name
    ),
    Option(
        "allow_other_root", "--allow-other-root", "bool", False,
        "Use a manifest whose root is not the tree it was scanned from (device, inode or file system id "
        "differ, or its marker records none).", jobs=COPY + SYNC,
    ),
)  # fmt: skip
OPTIONS: dict[str, Option] = {o.name: o for o in _ALL}
PRUNE = ("exclude", "include", "max_depth", "one_file_system")
LIMITS = ("max_ops_per_second", "max_bandwidth")
PRUNE_KEY = "/".join(OPTIONS[n].flag for n in PRUNE)  # how a job's journal records its pruning, as one value


def of_job(job: str) -> tuple[Option, ...]:
    """The options that are ``job``'s own keywords (``copy``, ``sync``), in definition order: what its public
    function takes, its command shows, its Airflow operator accepts and (``binds_resume``) its journal records."""
    return tuple(o for o in _ALL if job in o.jobs)


def journal_options(job: str, values: dict[str, Any], prune: Any = None) -> dict[str, Any]:
    """What ``job``'s journal records of a run's options (``binds_resume`` ones), keyed by their flags, as
    ``dask_pfs.runtime.journals.check_options`` compares them; ``values``: each option's value by name (as the
    run uses it: a manifest's identity, the where-clause's text); ``prune``: the pruning's ``describe()``."""
    bound = {o.flag: values.get(o.name, o.default) for o in of_job(job) if o.binds_resume}
    bound[PRUNE_KEY] = prune
    return bound


def journal_default(flag: str) -> Any:
    """The value a journal written before the option ``flag`` existed stands for: its default."""
    option = next((o for o in _ALL if o.flag == flag), None)
    return option.default if option is not None else None


def named_flag(flag: str) -> Named | str:
    """The option a journal's key ``flag`` records, named for the front end (``--chunk-files``, ``chunk_files=``)."""
    option = next((o for o in _ALL if o.flag == flag), None)
    if option is not None:
        return named(option.name)
    if flag == PRUNE_KEY:
        return Named("=/".join(PRUNE), flag)
    return flag


def named(name: str, value: Any = None) -> Named:
    """Option ``name`` inside an error message; ``value`` is what Python shows it with (``overwrite=True``)."""
    option = OPTIONS.get(name)
    return Named(name, option.flag if option else "--" + name.replace("_", "-"), value)


def option_error(name: str, value: Any, text: str) -> PfsError:
    """``<option>: <text>`` about a bad value given to option ``name``."""
    return PfsError(named(name, value), f": {text}")


def prune_of(values: dict[str, Any]):
    """``operators.scan.prune.Prune`` for the pruning options' values, or None when they prune nothing."""
    from operators.scan.prune import Prune

    exclude, include = (_patterns(n, values.get(n)) for n in ("exclude", "include"))
    depth, one_fs = values.get("max_depth"), values.get("one_file_system") or False
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int)):
        raise option_error("max_depth", depth, f"must be a whole number of at least 1, got {depth!r}")
    if not isinstance(one_fs, bool):
        raise option_error("one_file_system", one_fs, f"must be True or False, got {one_fs!r}")
    try:
        prune = Prune(exclude=exclude, include=include, max_depth=depth, one_file_system=one_fs)
    except ValueError as exc:  # Prune's own words name the CLI's flags: say which option instead
        text = str(exc)
        for name in PRUNE:
            text = text.replace(OPTIONS[name].flag, str(named(name)))
        raise PfsError(text) from None
    return prune if prune.active or prune.one_file_system else None


def _patterns(name: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # one pattern, not its characters
        return (value,)
    if not isinstance(value, Sequence) or not all(isinstance(p, str) for p in value):
        raise option_error(name, value, f"must be a pattern or a list of patterns, got {value!r}")
    return tuple(value)


def limits_of(values: dict[str, Any]):
    """``operators.ratelimit.Limits`` for the job-wide caps, or None when neither is set."""
    from operators.ratelimit import Limits, parse_bandwidth

    ops, bandwidth = values.get("max_ops_per_second"), values.get("max_bandwidth")
    if ops is not None and (isinstance(ops, bool) or not isinstance(ops, int | float) or ops <= 0):
        raise option_error("max_ops_per_second", ops, f"must be a number above 0, got {ops!r}")
    rate = None
    if isinstance(bandwidth, int | float) and not isinstance(bandwidth, bool):
        if bandwidth <= 0:
            raise option_error("max_bandwidth", bandwidth, f"must be above 0, got {bandwidth!r}")
        rate = float(bandwidth)
    elif bandwidth is not None:
        try:
            rate = parse_bandwidth(str(bandwidth))
        except ValueError as exc:
            raise option_error("max_bandwidth", bandwidth, str(exc)) from None
    if ops is None and rate is None:
        return None
    return Limits(float(ops) if ops is not None else None, rate)


def renamed(**old_to_new: str) -> Callable[[Callable], Callable]:
    """Keep a keyword's old name working for a release: ``old=`` is ``new=`` with a DeprecationWarning (both
    given: refused).  The signature (``help()``, docs/api.md) shows the new name only."""

    def wrap(func: Callable) -> Callable:
        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise PfsError(f"give {new}= (or its old name {old}=), not both")
                    warnings.warn(
                        f"{func.__name__}({old}=...) is deprecated: use {new}=...", DeprecationWarning, stacklevel=2
                    )
                    kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return call

    return wrap


def job_options(*names: str) -> Callable[[Callable], Callable]:
    """Give a public engine function the options ``names`` (of :data:`PRUNE` and :data:`LIMITS`) as plain
    keyword arguments, folded into its ``prune=`` and ``limits=`` (giving both an option and the object it
    folds into is refused).  The signature and the docstring list them."""
    for name in names:
        if name not in PRUNE + LIMITS:
            raise ValueError(f"job_options: {name!r} is not a pruning or cap option")

    def wrap(func: Callable) -> Callable:
        @functools.wraps(func)
        def engine(*args: Any, **kwargs: Any) -> Any:
            given = {n: kwargs.pop(n) for n in names if n in kwargs}
            pruning = {n: v for n, v in given.items() if n in PRUNE}
            capping = {n: v for n, v in given.items() if n in LIMITS}
            if pruning:
                if kwargs.get("prune") is not None:
                    raise PfsError(f"give prune= or {', '.join(pruning)}=, not both")
                kwargs["prune"] = prune_of(pruning)
            if capping:
                if kwargs.get("limits") is not None:
                    raise PfsError(f"give limits= or {', '.join(capping)}=, not both")
                kwargs["limits"] = limits_of(capping)
            return func(*args, **kwargs)

        sig = inspect.signature(func)
        extra = [
            inspect.Parameter(
                n, inspect.Parameter.KEYWORD_ONLY, default=OPTIONS[n].default, annotation=OPTIONS[n].annotation
            )
            for n in names
        ]
        engine.__signature__ = sig.replace(parameters=[*sig.parameters.values(), *extra])  # type: ignore[attr-defined]
        engine.__doc__ = (func.__doc__ or "").rstrip() + "\n\n" + options_doc(names)
        return engine

    return wrap


def options_doc(names: Sequence[str]) -> str:
    """The docstring section listing ``names`` (indented as the functions' docstrings are)."""
    lines = ["    Options shared by the jobs (``dask_pfs.options``; the CLI's flags of the same names):", ""]
    for name in names:
        o = OPTIONS[name]
        lines.append(f"    ``{name}`` ({o.annotation}, CLI ``{o.flag}``): {o.help}")
    return "\n".join(lines) + "\n"


def click_options(*names: str) -> list[Callable]:
    """The CLI's flags for ``names``, as ``click.option`` decorators (help and type from :data:`OPTIONS`)."""
    import click

    made = []
    for name in names:
        o = OPTIONS[name]
        decls = [o.short, o.flag] if o.short else [o.flag]
        kwargs: dict[str, Any] = {"help": o.help + (" (repeatable)" if o.multiple else "")}
        if o.multiple:
            kwargs["multiple"] = True
        if o.metavar:
            kwargs["metavar"] = o.metavar
        if o.annotation == "bool":
            kwargs["is_flag"] = True
        elif name == "max_depth":
            kwargs["type"] = click.IntRange(1)
        elif name == "max_ops_per_second":
            kwargs["type"] = click.FloatRange(min=0, min_open=True)
        made.append(click.option(*decls, **kwargs))
    return made
