"""``pfs workers``: reach a running scheduler (with its TLS certificates) and list its workers.

The smoke test after deploying: it proves the address, the network path and the client certificate
before any job is started, and shows how many task slots a job will get.
"""

from __future__ import annotations

import click

from ..cli import cli, echo_json, pop_scheduler_options, scheduler_options
from ..cluster import ClusterOptions, client_of_scheduler
from ..errors import PfsError
from ..progress import human_bytes


def _with_scheduler_options(func):
    for opt in reversed(scheduler_options()):
        func = opt(func)
    return func


@cli.command("workers")
@click.option("--json", "as_json", is_flag=True, help="Print the scheduler and workers as JSON.")
@_with_scheduler_options
def workers_cmd(as_json: bool, **kwargs) -> None:
    """List the workers of a running Dask scheduler (--scheduler, --scheduler-file or PFS_SCHEDULER)."""
    options = ClusterOptions(**pop_scheduler_options(kwargs))
    if not (options.scheduler or options.scheduler_file):
        raise PfsError("give --scheduler ADDR, --scheduler-file FILE or PFS_SCHEDULER")
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
