"""``pfs workers``: reach a running scheduler (with its TLS certificates) and list its workers.

The smoke test after deploying: it proves the address, the network path and the client certificate
before any job is started, and shows how many task slots a job will get.
"""

from __future__ import annotations

import sys

import click

from dask_pfs.cli import cli, echo_json, pop_scheduler_options, scheduler_options
from dask_pfs.clusters.client import ClusterOptions, client_of_scheduler
from dask_pfs.errors import PfsError
from dask_pfs.runtime.progress import human_bytes

REFUSED_CHECK_SECONDS = 5.0


def _with_scheduler_options(func):
    for opt in reversed(scheduler_options("Required (or --scheduler-file, or PFS_SCHEDULER).")):
        func = opt(func)
    return func


def _refused_now(options: ClusterOptions) -> None:
    """One plain TCP connect to a ``tcp://``/``tls://`` address first: a refused port is this command's
    answer at once (Dask's client keeps retrying a refused port for its whole connect timeout, 30 s).
    A job's client still waits for a scheduler that is starting (``client_of_scheduler``)."""
    import socket
    from urllib.parse import urlsplit

    address = options.scheduler or ""
    if "://" not in address:
        address = f"tcp://{address}" if address else ""
    parts = urlsplit(address)
    if parts.scheme not in ("tcp", "tls") or not parts.hostname or not parts.port:
        return
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=REFUSED_CHECK_SECONDS).close()
    except ConnectionRefusedError:
        raise PfsError(f"cannot reach the Dask scheduler {options.scheduler}: connection refused") from None
    except OSError:
        return  # unreachable or slow: Dask's own wait says what it finds


@cli.command("workers")
@click.option("--json", "as_json", is_flag=True, help="Print the scheduler and workers as JSON.")
@_with_scheduler_options
def workers_cmd(as_json: bool, **kwargs) -> None:
    """List the workers of a running Dask scheduler (--scheduler, --scheduler-file or PFS_SCHEDULER)."""
    options = ClusterOptions(**pop_scheduler_options(kwargs))
    if not (options.scheduler or options.scheduler_file):
        raise PfsError("give --scheduler ADDR, --scheduler-file FILE or PFS_SCHEDULER")
    _refused_now(options)
    with client_of_scheduler(options) as client:
        info = client.scheduler_info(n_workers=-1)
    workers = [
        {
            "address": addr,
            "name": str(w.get("name")),
            "threads": w.get("nthreads"),
            "memory_limit": w.get("memory_limit"),
        }
        for addr, w in sorted(info["workers"].items())
    ]
    if as_json:
        echo_json({"scheduler": info["address"], "workers": workers})
        return
    click.echo(f"scheduler {info['address']}: {len(workers)} workers, {sum(w['threads'] for w in workers)} threads")
    for w in workers:
        memory = human_bytes(w["memory_limit"]) if w["memory_limit"] else "no limit"
        click.echo(f"  {w['name']:<24} {w['address']:<28} {w['threads']} threads  {memory}")


@cli.command("retire-worker")
@click.argument("name", envvar="PFS_WORKER_NAME")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=600,
    show_default=True,
    help="Seconds to wait for the worker's running tasks.",
)
@_with_scheduler_options
def retire_worker_cmd(name: str, timeout: float, **kwargs) -> None:
    """Drain worker NAME (default: PFS_WORKER_NAME): no new tasks, wait for its running ones to finish.

    The Helm chart's workers run it as their preStop hook, so a rollout, scale-down or node drain lets
    running chunks finish. Exit codes: 0 drained; 1 tasks still running at the timeout (the scheduler
    re-runs them elsewhere once the worker stops); 2 no such worker, or no scheduler.
    """
    from dask_pfs.clusters.retire import retire_worker

    options = ClusterOptions(**pop_scheduler_options(kwargs))
    if not (options.scheduler or options.scheduler_file):
        raise PfsError("give --scheduler ADDR, --scheduler-file FILE or PFS_SCHEDULER")
    _refused_now(options)
    with client_of_scheduler(options) as client:
        address, running = retire_worker(client, name, timeout)
    if running:
        click.echo(f"worker {name} ({address}): {running} tasks still running after {timeout:g} s", err=True)
        sys.exit(1)
    click.echo(f"worker {name} ({address}) retired: no task running")
