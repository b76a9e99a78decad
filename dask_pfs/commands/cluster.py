"""``pfs cluster status|start|stop``: this user's warm servers (``dask_pfs.warm``).

A server is private to one user and one set of credentials, limits and installed code (its key);
several can run at once (e.g. a shell's and a capability-dropped service's).  Each leaves on its own
after ``PFS_SERVER_IDLE`` seconds without a command; ``stop`` lets running commands finish first.
"""

from __future__ import annotations

import os
import time

import click

from dask_pfs.cli import cli, echo_json
from dask_pfs.errors import PfsError


@cli.group("cluster")
def cluster_group() -> None:
    """This user's warm pfs servers (opt-in): while one runs, commands it can run faithfully start in ~0.1 s."""


def _ask(where: str, key: str, op: str) -> dict | None:
    """A server's answer to ``op`` (``status``, ``stop``), after checking it is one this process may use
    (``{"refused": why}`` otherwise); None when no server listens under ``key``."""
    from dask_pfs.warm import client, identity, wire

    sock = client.connect(os.path.join(where, f"{key}.sock"))
    if sock is None:
        return None
    with sock:
        sock.settimeout(5)
        pid, refused = wire.verified_peer(sock, identity.context_of(), identity_only=True)
        if refused:
            return {"key": key, "pid": pid, "refused": refused}
        wire.send(sock, {"op": op})
        answer = wire.Reader(sock).read() or {}
    answer.pop("op", None)
    return {"key": key, **answer, "rss_bytes": _rss(pid)}


def _keys(where: str) -> list[str]:
    if not where:
        return []
    return sorted(name[: -len(".sock")] for name in os.listdir(where) if name.endswith(".sock"))


def _servers(where: str) -> list[dict]:
    return [answer for key in _keys(where) if (answer := _ask(where, key, "status")) is not None]


def _rss(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _where(create: bool = False) -> str:
    from dask_pfs.warm import identity

    where = identity.socket_dir(create=create)
    if where is None and not create and not os.path.lexists(identity.socket_path_base()):
        return ""  # nothing was ever started here
    if where is None:
        raise PfsError("no private directory for servers ($XDG_RUNTIME_DIR/pfs or /tmp/pfs-UID owned by you, 0700)")
    return where


@cluster_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the servers as JSON.")
def status_cmd(as_json: bool) -> None:
    """List this user's warm servers (pid, commands served, idle time, memory)."""
    from dask_pfs.warm import identity

    mine = identity.server_key()
    servers = _servers(_where())
    for server in servers:
        server["this_environment"] = server.get("key") == mine
    if as_json:
        echo_json(servers)
        return
    if not servers:
        click.echo("no pfs server running (pfs cluster start starts one; commands run in their own process)")
    for s in servers:
        if "refused" in s:
            click.echo(f"{s['key']}  pid {s['pid']}  not usable by this process: {s['refused']}")
            continue
        rss = f"{s['rss_bytes'] / 2**20:.0f} MiB" if s.get("rss_bytes") else "?"
        state = "stopping" if s["stopping"] else f"{s['running']} running, idle {s['idle']:.0f} s"
        mark = "  (this environment)" if s["this_environment"] else ""
        age = time.time() - s["started"]
        click.echo(f"{s['key']}  pid {s['pid']}  up {age:.0f} s  {s['served']} served  {state}  {rss}{mark}")


@cluster_group.command("start")
@click.option("--timeout", type=click.FloatRange(min=0), default=60, show_default=True, help="Seconds to wait.")
def start_cmd(timeout: float) -> None:
    """Start the server for this environment and wait until it answers."""
    from dask_pfs.warm import client, identity

    where, key = _where(create=True), identity.server_key()
    try:
        ready = client.start_server(where, key, wait=timeout)
    except OSError as exc:
        raise PfsError(f"cannot start a server in {where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise PfsError(str(exc)) from None
    if not ready:
        raise PfsError(f"the server did not answer within {timeout:g} s (its log: {os.path.join(where, key)}.log)")
    click.echo(f"pfs server {key} ready")


@cluster_group.command("stop")
@click.option("--all", "every", is_flag=True, help="Every server of this user, not only this environment's.")
def stop_cmd(every: bool) -> None:
    """Stop the server (running commands finish first)."""
    from dask_pfs.warm import identity

    where = _where()
    stopped = 0
    for key in _keys(where) if every else [identity.server_key()]:
        answer = _ask(where, key, "stop")
        if answer is None:
            continue
        if "refused" in answer:
            click.echo(f"{key}: not stopped, not usable by this process: {answer['refused']}", err=True)
            continue
        click.echo(f"{key}: pid {answer.get('pid')} stopping ({answer.get('running', 0)} commands running)")
        stopped += 1
    if not stopped:
        click.echo("no pfs server to stop")
