"""``pfs job NAME``: the state of a detached job (``--detach``), its result once it has finished.

Reads the job's state record signed with the token in its job file (``dask_pfs.remote.detached``); a
client that unpickles nothing (msgpack only), so a peer of the scheduler can neither run code here nor
pass a forged record off as the job's.
"""

from __future__ import annotations

import sys

import click

from dask_pfs.cli import cli, echo_json, pop_scheduler_options, scheduler_options
from dask_pfs.clusters.client import ClusterOptions, client_of_scheduler
from dask_pfs.errors import PfsError


def _with_scheduler_options(func):
    for opt in reversed(scheduler_options("Required (or --scheduler-file, or PFS_SCHEDULER).")):
        func = opt(func)
    return func


@cli.command("job")
@click.argument("name")
@click.option("--cancel", is_flag=True, help="Stop the job: no new I/O, its caps held until its last task ends.")
@click.option("--forget", is_flag=True, help="Once it has ended: drop its record from the scheduler and its job file.")
@_with_scheduler_options
def job_cmd(name: str, cancel: bool, forget: bool, **kwargs) -> None:
    """The state of a detached job (pfs CMD ... --detach) as JSON: running with its counters, finished with
    its result (exit code: the job's), cancelled or error (exit 2)."""
    from distributed import Event

    from dask_pfs.remote import control, detached
    from dask_pfs.remote.driver import CANCELLED, DONE, ERROR, FINISHED, MISSING, cancel_name

    options = ClusterOptions(**pop_scheduler_options(kwargs))
    if not (options.scheduler or options.scheduler_file):
        raise PfsError("give --scheduler ADDR, --scheduler-file FILE or PFS_SCHEDULER")
    token = detached.load(name)
    with client_of_scheduler(options, untrusted=True) as client:
        if cancel:
            Event(cancel_name(name), client=client).set()
        state, record = control.status(client, name, token)
        if state == FINISHED:
            control.release(client, name)  # the outcome is in the record: no result held on a worker
        if forget and state in (*DONE, MISSING):
            control.forget(client, name)
            detached.job_file(name).unlink(missing_ok=True)
    shown = {"name": name, "state": state}
    shown |= {k: v for k, v in record.items() if k in ("title", "counters", "result", "error", "stop", "question")}
    echo_json(shown)
    if state == FINISHED:
        code = (record.get("result") or {}).get("exit_code", 0)
        sys.exit(code if isinstance(code, int) else 1)
    if state in (ERROR, CANCELLED, MISSING):
        sys.exit(2)
