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
    Option("overwrite", "--overwrite", "bool", False, "Replace what is there."),
    Option("resume", "--resume", "bool", False, "Finish the interrupted run its journal describes."),
    Option("manifest", "--manifest", "str | None", None, "A manifest whose rows the job acts on."),
    Option("where", "--where", "str | None", None, "One SQL condition over the manifest's columns."),
    Option("select", "--select", "str | None", None, "Columns or expressions over the manifest's columns."),
    Option("order_by", "--order-by", "str | None", None, "Sort keys over the manifest's columns."),
    Option("group_by", "--group-by", "str | None", None, "Grouping expressions for an aggregate select."),
    Option("max_entries", "--max-entries", "int | str | None", None, "Refuse a selection larger than N (or N%)."),
    Option("update", "--update", "bool", False, "Replace destination files that differ."),
    Option("allow_incomplete", "--allow-incomplete", "bool", False, "Read a manifest without its marker."),
)  # fmt: skip
OPTIONS: dict[str, Option] = {o.name: o for o in _ALL}
PRUNE = ("exclude", "include", "max_depth", "one_file_system")
LIMITS = ("max_ops_per_second", "max_bandwidth")


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
