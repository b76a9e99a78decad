"""The ``pfs`` command line: one group, one module per command under ``dask_pfs.commands``.

Exit codes: 0 success; 1 the job ran but some entries failed (errors are counted and
logged); 2 bad input or a refused action, with nothing changed; 130 interrupted (Ctrl-C: one
line on stderr, journals kept for ``--resume``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import sys
from collections.abc import Callable

# pfs never does linear algebra; numpy (pulled in by pyarrow) would otherwise start one OpenBLAS
# thread per core at import, ~0.1 s of CPU in every pfs process and every embedded worker.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click

from dask_pfs.cli_values import job_limits, kubernetes_options
from dask_pfs.clusters.client import ClusterOptions
from dask_pfs.clusters.security import TlsFiles
from dask_pfs.errors import FRONT_END, PfsError
from dask_pfs.options import OPTIONS
from dask_pfs.options import SIZES as SIZES  # the commands' size options say it too
from dask_pfs.runtime.verbosity import verbosity
from dask_pfs.version import __version__
from operators.core.outputs import UnsafeOutput
from operators.sizes import parse_size

DRIVERS = ("auto", "local", "cluster")  # where a driver runs: dask_pfs.remote.client.remote_driver


class SizeType(click.ParamType):
    """A size in bytes, in the one syntax of every pfs option (``operators.sizes``)."""

    name = "size"

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = SizeType()


COMMAND_MODULES = {  # subcommand -> module under dask_pfs.commands that registers it
    "cluster": "cluster",
    "cp": "cp",
    "diff": "diff",
    "du": "query",
    "info": "query",
    "job": "job",
    "query": "query",
    "retire-worker": "workers",
    "rm": "rm",
    "scan": "scan",
    "sync": "sync",
    "verify": "verify",
    "workers": "workers",
}


class Interrupted(Exception):
    """Ctrl-C in a command: not a KeyboardInterrupt, which click would answer with an extra blank line."""


class LazyGroup(click.Group):
    """Imports a subcommand's module only when that command runs (``pfs scan`` never loads DuckDB)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted() from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMAND_MODULES, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"{__package__}.commands.{module}")  # its @cli.command registers it
        return self.commands.get(cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="pfs")
@click.option("-v", "--verbose", count=True, help="More output: -v a line per finished chunk, -vv debug logs.")
@click.option("-q", "--quiet", is_flag=True, help="Only errors and the summary: no progress, links or warnings.")
def cli(verbose: int, quiet: bool) -> None:
    """Parallel file-system tools: scan trees into Parquet manifests and act on them with Dask.

    \b
    Exit codes: 0 success; 1 the job ran but some entries failed (counted and logged);
    2 bad input or a refused action (nothing changed); 130 interrupted (Ctrl-C).
    Shell completion: eval "$(_PFS_COMPLETE=bash_source pfs)" in ~/.bashrc
    (zsh_source, fish_source for zsh and fish). Manual pages: man -l docs/man/pfs.1 (pfs-CMD.1).
    """
    from dask_pfs.runtime.verbosity import set_verbosity

    set_verbosity(-1 if quiet else verbose)


JOB_DEFAULT = "Default: none: the job runs here, and a local cluster starts only for a job that lasts."


def scheduler_options(default: str = JOB_DEFAULT) -> list[Callable]:
    """How to reach a running scheduler: its address or scheduler file, and the client's TLS certificates;
    ``default``: what the command does without one (the end of ``--scheduler``'s help)."""
    return [
        click.option(
            "--scheduler",
            envvar="PFS_SCHEDULER",
            metavar="ADDR",
            help=f"Dask scheduler (tcp://host:8786, tls://host:8786). {default}",
        ),
        click.option("--scheduler-file", type=click.Path(), help="Dask scheduler file (batch systems)."),
        click.option(
            "--tls-ca-file",
            envvar="PFS_TLS_CA_FILE",
            metavar="PEM",
            help="CA certificate of a tls:// scheduler's cluster (mutual TLS, e.g. the Helm chart's).",
        ),
        click.option("--tls-cert", envvar="PFS_TLS_CERT", metavar="PEM", help="This client's TLS certificate."),
        click.option(
            "--tls-key", envvar="PFS_TLS_KEY", metavar="PEM", help="This client's TLS key (if not in --tls-cert)."
        ),
    ]


def pop_scheduler_options(kwargs: dict) -> dict:
    """ClusterOptions fields from the parsed :func:`scheduler_options` (removed from ``kwargs``)."""
    return {
        "scheduler": kwargs.pop("scheduler"),
        "scheduler_file": kwargs.pop("scheduler_file"),
        "security": TlsFiles.from_values(kwargs.pop("tls_ca_file"), kwargs.pop("tls_cert"), kwargs.pop("tls_key")),
    }


def driver_option() -> Callable:
    """``--driver``: where the job's driver runs when a scheduler is given (``dask_pfs.remote.client``)."""
    return click.option(
        "--driver",
        type=click.Choice(DRIVERS),
        default="auto",
        envvar="PFS_DRIVER",
        show_default=True,
        help="With a scheduler: run the job's driver here (local), or as a task on the cluster for a host "
        "that does not mount the data (cluster); auto: on the cluster when an input path is not here.",
    )


def cluster_options(func: Callable) -> Callable:
    """Options shared by every command that runs on a cluster."""
    opts = [
        *scheduler_options(),
        driver_option(),
        click.option(
            "--detach",
            is_flag=True,
            help="With the driver on the cluster: start the job and leave; it runs to its end without this "
            "client (else a client killed or cut off stops it within 5 s). Prints the job's name: pfs job NAME.",
        ),
        click.option("--workers", type=click.IntRange(1), help="Worker processes of the local cluster."),
        click.option(
            "--threads",
            type=click.IntRange(1),
            help="I/O jobs in flight per worker: listings and batches of file operations, each of which the "
            "compiled core may fan out further on its own threads (default: auto-tuned while the job runs).",
        ),
        click.option(
            "--max-ops-per-second",
            envvar="PFS_MAX_OPS_PER_SECOND",
            type=click.FloatRange(min=0, min_open=True),
            help=OPTIONS["max_ops_per_second"].help,
        ),
        click.option(
            "--max-bandwidth",
            envvar="PFS_MAX_BANDWIDTH",
            metavar="RATE",
            help=OPTIONS["max_bandwidth"].help,
        ),
        click.option(
            "--cluster",
            "cluster_kind",
            type=click.Choice(["local", "slurm", "kubernetes"]),
            default="local",
            show_default=True,
            help="Cluster to start when no scheduler is given.",
        ),
        click.option("--slurm-jobs", type=click.IntRange(1), default=1, show_default=True),
        click.option("--slurm-cores", type=click.IntRange(1), default=4, show_default=True),
        click.option("--slurm-memory", default="8GiB", show_default=True),
        click.option("--slurm-walltime", default="01:00:00", show_default=True),
        click.option("--slurm-queue"),
        click.option("--slurm-account"),
        click.option("--slurm-interface"),
        click.option("--slurm-local-directory"),
        click.option("--k8s-claim", metavar="NAME", help="--cluster kubernetes: the shared ReadWriteMany claim."),
        click.option("--k8s-mount", default="/data", show_default=True, help="Where workers mount the claim."),
        click.option("--k8s-image", help="Image with pfs (default: the chart's, ghcr.io/pfs/pfs:0.1.0)."),
        click.option("--k8s-namespace", help="Namespace of the DaskCluster (default: the kube config's)."),
        click.option("--k8s-min-workers", type=click.IntRange(0), default=1, show_default=True),
        click.option("--k8s-max-workers", type=click.IntRange(1), default=4, show_default=True),
        click.option("--k8s-cpu", help="CPU of each worker pod (requests = limits), e.g. 2."),
        click.option("--k8s-memory", help="Memory of each worker pod (requests = limits), e.g. 8Gi."),
        click.option(
            "--dashboard/--no-dashboard",
            default=None,
            envvar="PFS_DASHBOARD",
            help="Serve the local cluster's Dask dashboard (default: when stderr is a terminal).",
        ),
        click.option(
            "--progress/--no-progress",
            default=None,
            help="Live progress bar (default: on when stderr is a terminal).",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        slurm = None
        kind = kwargs.pop("cluster_kind")
        k8s = {k[4:]: kwargs.pop(k) for k in [k for k in kwargs if k.startswith("k8s_")]}
        kubernetes = kubernetes_options(kind, k8s, kwargs["threads"])
        if kind == "slurm":
            slurm = {
                "jobs": kwargs["slurm_jobs"],
                "cores": kwargs["slurm_cores"],
                "memory": kwargs["slurm_memory"],
                "walltime": kwargs["slurm_walltime"],
                "queue": kwargs["slurm_queue"],
                "account": kwargs["slurm_account"],
                "interface": kwargs["slurm_interface"],
                "local_directory": kwargs["slurm_local_directory"],
                "threads": kwargs["threads"],
            }
        for key in [k for k in kwargs if k.startswith("slurm_")]:
            kwargs.pop(key)
        limits = job_limits(kwargs.pop("max_ops_per_second"), kwargs.pop("max_bandwidth"))
        kwargs["cluster"] = ClusterOptions(
            **pop_scheduler_options(kwargs),
            driver=kwargs.pop("driver"),
            detach=kwargs.pop("detach"),
            workers=kwargs.pop("workers"),
            threads=kwargs["threads"],
            slurm=slurm,
            kubernetes=kubernetes,
            limits=limits,
            dashboard=kwargs.pop("dashboard"),
            announce=verbosity() >= 0,
        )
        return func(*args, **kwargs)

    return wrapper


def reader_options(func: Callable) -> Callable:
    """How a command that only reads a manifest (query, info) reaches one only the workers see:
    :func:`scheduler_options` and ``--driver`` -> ``cluster`` (``ClusterOptions``)."""
    for opt in reversed([*scheduler_options("Default: none: the manifest is read here."), driver_option()]):
        func = opt(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        kwargs["cluster"] = ClusterOptions(**pop_scheduler_options(kwargs), driver=kwargs.pop("driver"))
        return func(*args, **kwargs)

    return wrapper


def prune_options(func: Callable) -> Callable:
    """``--exclude``, ``--include``, ``--max-depth``, ``--one-file-system`` -> ``prune``
    (``operators.scan.prune.Prune``): the flags, their help and the folding are ``dask_pfs.options``'s,
    which the Python API's keywords of the same names share."""
    from dask_pfs.options import PRUNE, click_options, prune_of

    for opt in reversed(click_options(*PRUNE)):
        func = opt(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        values = {k: kwargs.pop(k) for k in PRUNE}
        try:
            kwargs["prune"] = prune_of(values)
        except PfsError as exc:
            raise click.BadParameter(str(exc)) from None
        return func(*args, **kwargs)

    return wrapper


def job_cli_options(job: str, *, skip: tuple[str, ...] = (), help: dict[str, str] | None = None):
    """The flags of ``job``'s own options (``dask_pfs.options.of_job``: name, help, type and default are defined
    there once), gathered into one ``options`` keyword (Python name -> value) that the command passes on to
    the engine function as it is; ``skip``: options the command declares itself, ``help``: a command's own
    words for an option."""
    from dask_pfs.options import of_job

    chosen = [o for o in of_job(job) if o.cli and o.name not in skip]
    types = {"count": click.IntRange(1), "size": SIZE}

    def decorate(func: Callable) -> Callable:
        for o in reversed(chosen):
            decls = o.decls or ((o.short, o.flag) if o.short else (o.flag,))
            kwargs: dict = {"help": (help or {}).get(o.name, o.help), "show_default": o.show_default}
            if "/" in decls[-1]:
                kwargs["default"] = o.default
            elif o.annotation == "bool":
                kwargs["is_flag"] = True
            else:
                kwargs["default"] = o.default
                if o.kind:
                    kwargs["type"] = types[o.kind]
                if o.kind == "size" and o.default:
                    kwargs["default"] = f"{o.default >> 20}MiB"  # as the help shows it; SIZE reads it back
            if o.metavar:
                kwargs["metavar"] = o.metavar
            func = click.option(*decls, o.name, **kwargs)(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            kwargs["options"] = {o.name: kwargs.pop(o.name) for o in chosen}
            return func(*args, **kwargs)

        return wrapper

    return decorate


def echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def fail(message: str, code: int = 2) -> None:
    click.echo(f"pfs: error: {message}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """The ``pfs`` console script; exits the process (see :func:`exit_now`)."""
    from dask_pfs import interrupts
    from operators import pandas_gate

    interrupts.install()  # a Ctrl-C never lands inside DuckDB's or pyarrow's module start (an abort)
    pandas_gate.refuse_implicit()  # no command uses pandas: pyarrow's own import of it is 0.3-0.5 s of CPU
    exit_now(run(argv))


def run(argv: list[str] | None = None) -> int:
    """Run one ``pfs`` command and return its exit code (no process exit: usable in-process)."""
    for stream in (sys.stdout, sys.stderr):  # a name that is not UTF-8 is printed escaped, never a crash
        with contextlib.suppress(ValueError, OSError):
            getattr(stream, "reconfigure", lambda **_: None)(errors="backslashreplace")
    front_end = FRONT_END.set("cli")  # errors name options by their flags (dask_pfs.errors.Named)
    try:
        cli.main(args=argv, prog_name="pfs", standalone_mode=False)
        sys.stdout.flush()  # a full disk (``> /dev/full``) is this command's error, not a silently lost line
    except PfsError as exc:
        click.echo(f"pfs: error: {exc}", err=True)
        return exc.exit_code
    except UnsafeOutput as exc:  # a directory the one writer refuses (operators.core.outputs): nothing written there
        click.echo(f"pfs: error: {exc}", err=True)
        return 2
    except (Interrupted, KeyboardInterrupt):  # Ctrl-C: one line, whatever the workers were doing
        click.echo("pfs: interrupted", err=True)
        return 130
    except click.exceptions.Abort:  # Ctrl-C or end of input at a question: end its line first
        click.echo("\npfs: interrupted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return 2
    except SystemExit as exc:
        return _code_of(exc)
    except OSError as exc:  # an output refused or unwritable (EACCES, EROFS, ENOSPC, EFBIG): one line, not a trace
        click.echo(f"pfs: error: {_os_error(exc)}", err=True)
        return 2
    finally:
        FRONT_END.reset(front_end)  # a Python caller of run() in this context gets Python's names again
    return 0


def _os_error(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    reason = reason[:1].lower() + reason[1:]
    where = exc.filename if exc.filename is not None else "standard output"
    return f"{os.fsdecode(where)}: {reason}"


def _code_of(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    click.echo(str(exc.code), err=True)
    return 1


def exit_now(code: int) -> None:
    """Flush and leave without interpreter teardown.

    Every output is closed and renamed into place before a command returns; what is left is
    Python freeing pyarrow, numpy and distributed module by module, about 0.5 s per command
    here, paid on every ``pfs`` call in a DAG.  ``PFS_CLEAN_EXIT=1`` keeps the normal exit.
    """
    import logging
    import os

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if os.environ.get("PFS_CLEAN_EXIT") == "1":
        sys.exit(code)
    import atexit

    _forget_stuck_children()
    atexit._run_exitfuncs()  # coverage, multiprocessing and logging handlers still run
    logging.shutdown()
    os._exit(code)


def _forget_stuck_children() -> None:
    """multiprocessing's exit handler joins every child it started: one stuck in a request to hung
    storage (a helper the job abandoned, ``dask_pfs.runtime.here``) would keep the command from ever
    exiting.  A child still running 2 s after the job ended is left behind instead (the job said so)."""
    mp_process = sys.modules.get("multiprocessing.process")
    if mp_process is None:
        return
    for child in list(mp_process._children):
        child.join(timeout=2)
        if child.exitcode is None:
            mp_process._children.discard(child)
