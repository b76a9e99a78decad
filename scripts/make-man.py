#!/usr/bin/env python3
"""Write the manual pages docs/man/pfs.1 and docs/man/pfs-<command>.1 from the click commands.

Everything comes from the commands themselves (help text, usage, options with their help), so a
page cannot drift from ``--help``: tests/test_cli_docs.py regenerates the pages and fails when the
committed ones differ.  ``python scripts/make-man.py [DIR]`` (default docs/man); read one with
``man -l docs/man/pfs-cp.1``.
"""

from __future__ import annotations

import inspect
import os
import sys

import click

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from dask_pfs.cli import cli
from dask_pfs.version import __version__


def roff(text: str) -> str:
    """Text safe in roff: backslashes and hyphens escaped, no line starting with a control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.splitlines())


def paragraphs(help_text: str) -> str:
    """Click's help text as roff: ``\\b`` blocks verbatim (.nf), other paragraphs filled."""
    out = []
    for block in inspect.cleandoc(help_text or "").split("\n\n"):
        if block.startswith("\b\n"):
            out.append(".nf\n" + roff(block[2:]) + "\n.fi")
        else:
            out.append(".PP\n" + roff(" ".join(line.strip() for line in block.splitlines())))
    return "\n".join(out)


def page(name: str, command: click.Command, ctx: click.Context, see_also: list[str]) -> str:
    usage = " ".join(command.collect_usage_pieces(ctx))
    short = command.get_short_help_str(limit=200)
    lines = [
        f'.TH "{name.upper()}" "1" "" "pfs {__version__}" "pfs manual"',
        ".SH NAME",
        f"{roff(name)} \\- {roff(short)}",
        ".SH SYNOPSIS",
        f".B {roff(ctx.command_path)}\n{roff(usage)}",
        ".SH DESCRIPTION",
        paragraphs(command.help or ""),
        ".SH OPTIONS",
    ]
    for param in command.get_params(ctx):
        record = None if isinstance(param, click.Argument) else param.get_help_record(ctx)
        if record is None:  # hidden options, arguments (in the synopsis)
            continue
        opts, text = record
        lines += [".TP", f"\\fB{roff(opts)}\\fR", roff(text) if text else ""]
    if isinstance(command, click.Group):
        lines.append(".SH COMMANDS")
        for sub in command.list_commands(ctx):
            cmd = command.get_command(ctx, sub)
            if cmd is not None and not cmd.hidden:
                lines += [".TP", f"\\fBpfs\\-{roff(sub)}\\fR(1)", roff(cmd.get_short_help_str(limit=120))]
    lines += [".SH EXIT STATUS", "0 success; 1 some entries failed (counted and logged); 2 bad input or a refused "
              "action, nothing changed; 130 interrupted (Ctrl\\-C).", ".SH SEE ALSO",
              ", ".join(f"\\fB{roff(s)}\\fR(1)" for s in see_also)]  # fmt: skip
    return "\n".join(line for line in lines if line is not None) + "\n"


def pages() -> dict[str, str]:
    """File name -> page text, for the group and every command."""
    root = click.Context(cli, info_name="pfs", **cli.context_settings)
    names = cli.list_commands(root)
    out = {"pfs.1": page("pfs", cli, root, [f"pfs-{n}" for n in names])}
    for n in names:
        command = cli.get_command(root, n)
        assert command is not None
        out[f"pfs-{n}.1"] = page(f"pfs-{n}", command, click.Context(command, info_name=n, parent=root), ["pfs"])
    return out


def main() -> None:
    target = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "docs", "man")
    os.makedirs(target, exist_ok=True)
    for name, text in pages().items():
        with open(os.path.join(target, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
