"""What the CLI says about itself: README's option lists against the commands, the man pages, -V,
completion, exit code 130 and the itemize letters in --help (no cluster needed: click's CliRunner)."""

from __future__ import annotations

import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from dask_pfs.cli import cli

from .conftest import REPO, run_pfs


def _options(name: str) -> set[str]:
    """Every spelling of every option of ``pfs NAME`` (``--progress`` and ``--no-progress``, ``-n``...)."""
    root = click.Context(cli, info_name="pfs")
    command = cli.get_command(root, name)
    assert command is not None, name
    ctx = click.Context(command, info_name=name, parent=root)
    return {o for p in command.get_params(ctx) for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}


def _readme_blocks() -> list[tuple[list[str], set[str]]]:
    """README's ``<!-- options: CMD... -->`` blocks: the commands named and the options claimed for them."""
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"<!-- options: ([a-z -]+) -->(.*?)<!-- /options -->", text, re.S)
    return [(names.split(), set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", body))) for names, body in blocks]


def test_readme_option_lists_match_the_commands():
    blocks = _readme_blocks()
    assert len(blocks) >= 2, "README lost its option lists"
    covered = set()
    for names, claimed in blocks:
        assert claimed, names
        for name in names:
            missing = claimed - _options(name)
            assert not missing, f"README claims {sorted(missing)} for pfs {name}, which --help does not have"
            covered.add(name)
    assert covered == set(cli.list_commands(click.Context(cli))) - {"workers", "retire-worker", "cluster"}
    # the lists are not vacuous: a cluster option the readers lack is claimed only for the job commands
    assert "--workers" not in _options("query") and "--workers" in _options("du")


def test_man_pages_are_current(tmp_path):
    subprocess.run([sys.executable, str(REPO / "scripts/make-man.py"), str(tmp_path)], check=True, cwd=REPO)
    made = {p.name: p.read_text() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_text() for p in (REPO / "docs/man").iterdir()}
    assert made.keys() == committed.keys() and "pfs-cp.1" in made
    stale = [name for name in made if made[name] != committed[name]]
    assert not stale, f"docs/man is stale ({stale}): run scripts/make-man.py"
    assert "\\-\\-ignore\\-existing" in made["pfs-cp.1"] and "130 interrupted" in made["pfs.1"]


def test_version_help_and_completion():
    runner = CliRunner()
    assert re.match(r"pfs, version \d", runner.invoke(cli, ["-V"]).output)
    top = runner.invoke(cli, ["--help"]).output
    for text in ("-v, --verbose", "-q, --quiet", "130 interrupted", "_PFS_COMPLETE=bash_source pfs"):
        assert text in top
    # the completion the help documents works from the console script
    script = run_pfs(env={"_PFS_COMPLETE": "bash_source"})
    assert script.returncode == 0 and "_pfs_completion" in script.stdout
    words = run_pfs(env={"_PFS_COMPLETE": "bash_complete", "COMP_WORDS": "pfs cp --ign", "COMP_CWORD": "2"})
    assert "--ignore-existing" in words.stdout


@pytest.mark.parametrize("name", ["cp", "sync"])
def test_itemize_letters_and_existing_options_in_help(name):
    out = CliRunner().invoke(cli, [name, "--help"]).output
    flat = " ".join(out.split())
    for text in ("-i, --itemize", "+++++++++", "s size", "t time", "*deleting", "--ignore-existing", "-n, --dry-run"):
        assert text in flat, text
    assert "--skip-existing" not in out  # hidden: deprecated
