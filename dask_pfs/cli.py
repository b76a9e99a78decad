"""The ``pfs`` command line: one group, one module per command under ``dask_pfs.commands``.

Exit codes: 0 success; 1 the job ran but some entries failed (errors are counted and
logged); 2 bad input or a refused action, with nothing changed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable

import click

from . import __version__
from .cluster import ClusterOptions
from .errors import PfsError
from .security import TlsFiles


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="pfs")
def cli() -> None:
    """Parallel file-system tools: scan trees into Parquet manifests and act on them with Dask."""


def scheduler_options() -> list[Callable]:
    """How to reach a running scheduler: its address or scheduler file, and the client's TLS certificates."""
    return [
        click.option(
            "--scheduler",
            envvar="PFS_SCHEDULER",
            metavar="ADDR",
            help="Dask scheduler (tcp://host:8786, tls://host:8786). Default: start a local cluster.",
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


def cluster_options(func: Callable) -> Callable:
    """Options shared by every command that runs on a cluster."""
    opts = [
        *scheduler_options(),
        click.option("--workers", type=click.IntRange(1), help="Worker processes of the local cluster."),
        click.option(
            "--threads",
            type=click.IntRange(1),
            help="I/O operations in flight per worker (default: auto-tuned while the job runs).",
        ),
        click.option(
            "--max-ops-per-second",
            envvar="PFS_MAX_OPS_PER_SECOND",
            type=click.FloatRange(min=0, min_open=True),
            help="Cap the whole job's entry operations per second (all workers together).",
        ),
        click.option(
            "--max-bandwidth",
            envvar="PFS_MAX_BANDWIDTH",
            metavar="RATE",
            help="Cap the whole job's data reads, e.g. 200MB/s or 1GiB/s.",
        ),
        click.option(
            "--cluster",
            "cluster_kind",
            type=click.Choice(["local", "slurm"]),
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
        if kwargs.pop("cluster_kind") == "slurm":
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
        limits = _limits(kwargs.pop("max_ops_per_second"), kwargs.pop("max_bandwidth"))
        kwargs["cluster"] = ClusterOptions(
            **pop_scheduler_options(kwargs),
            workers=kwargs.pop("workers"),
            threads=kwargs["threads"],
            slurm=slurm,
            limits=limits,
            dashboard=kwargs.pop("dashboard"),
        )
        return func(*args, **kwargs)

    return wrapper


def _limits(ops: float | None, bandwidth: str | None):
    """The job-wide caps as ``operators.ratelimit.Limits``, or None when neither is set."""
    if not ops and not bandwidth:
        return None
    from operators.ratelimit import Limits, parse_bandwidth

    try:
        rate = parse_bandwidth(bandwidth) if bandwidth else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-bandwidth") from None
    return Limits(ops, rate)


def echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def fail(message: str, code: int = 2) -> None:
    click.echo(f"pfs: error: {message}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """The ``pfs`` console script; exits the process (see :func:`exit_now`)."""
    exit_now(run(argv))


def run(argv: list[str] | None = None) -> int:
    """Run one ``pfs`` command and return its exit code (no process exit: usable in-process)."""
    from . import commands  # noqa: F401  (registers the subcommands)

    try:
        cli.main(args=argv, prog_name="pfs", standalone_mode=False)
    except PfsError as exc:
        click.echo(f"pfs: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("pfs: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return 2
    except KeyboardInterrupt:
        click.echo("pfs: interrupted", err=True)
        return 130
    except SystemExit as exc:
        return _code_of(exc)
    return 0


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

    atexit._run_exitfuncs()  # coverage, multiprocessing and logging handlers still run
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    main()
