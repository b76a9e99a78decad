"""Copy's options are defined once (``dask_pfs.options``): the API function takes each, ``pfs cp --help``
shows each the CLI has, the journal binds a resume to exactly those that say so, and a resume with another
value is refused naming the option as the front end calls it."""

from __future__ import annotations

import inspect
import json
import os

import pytest

from dask_pfs import PfsError, copy, sync
from dask_pfs.options import LIMITS, PRUNE, PRUNE_KEY, of_job
from dask_pfs.runtime.journals import open_journal, read_job

from .conftest import make_tree, run_pfs

# what a call takes besides the job's options: where it runs and how, not what it does
RUNTIME = {
    "copy": {"src", "dst", "client", "cluster", "threads", "progress", "storage_options", "dst_storage_options",
             "journal", "limits", "prune", "selection", "skip_existing"},
    "sync": {"src", "dst", "client", "cluster", "threads", "progress", "storage_options", "dst_storage_options",
             "limits", "prune", "confirm", "src_manifest", "dst_manifest", "plan", "checksum", "delete", "max_delete",
             "dry_run", "update_dst_manifest"},
}  # fmt: skip


@pytest.mark.parametrize("fn", [copy, sync], ids=["copy", "sync"])
def test_the_api_takes_every_option_and_nothing_undefined(fn):
    job = fn.__name__
    params = inspect.signature(fn).parameters
    defined = {o.name: o for o in of_job(job)}
    assert defined, job
    for name, o in defined.items():
        assert name in params, f"{job}() lacks option {name}"
        assert params[name].default == o.default, (name, params[name].default, o.default)
    undefined = set(params) - set(defined) - RUNTIME[job] - set(PRUNE) - set(LIMITS)
    assert not undefined, f"{job}() takes {undefined}, which dask_pfs.options does not define"


@pytest.mark.parametrize("command", ["cp", "sync"])
def test_help_shows_every_cli_option(command):
    job = {"cp": "copy"}.get(command, command)
    shown = run_pfs(command, "--help", check=True).stdout
    for o in of_job(job):
        if o.cli:
            assert o.flag in shown, (command, o.flag)
        else:
            assert o.flag not in shown, (command, o.flag)
    assert "--part-size" not in shown  # a Python-only option stays out of the CLI


def _journal_of(dst) -> dict:
    (path,) = [p for p in os.listdir(dst) if p.startswith(".pfs-journal-")]
    return read_job(open_journal(os.path.join(dst, path)))


def test_journal_binds_exactly_the_options_that_say_so(tmp_path):
    src = make_tree(tmp_path / "src", {"a": b"new", "d/b": b"b"})
    dst = make_tree(tmp_path / "dst", {"a": b"old!"})  # exists and differs: a failure keeps the journal
    result = copy(f"{src}/", dst, chunk_files=7)
    assert result.failed == 1
    options = _journal_of(dst)["options"]
    assert set(options) == {o.flag for o in of_job("copy") if o.binds_resume} | {PRUNE_KEY}
    assert options["--chunk-files"] == 7 and options["--overwrite"] is False

    with pytest.raises(
        PfsError, match=r"ran with chunk_files=7, this run with chunk_files=9: resume with the same chunk_files="
    ):
        copy(f"{src}/", dst, chunk_files=9, resume=True)
    cli = run_pfs("cp", f"{src}/", dst, "--resume", "--chunk-files", "9")
    words = "ran with --chunk-files 7, this run with --chunk-files 9: resume with the same --chunk-files (or start"
    assert cli.returncode == 2 and words + " over without --resume)" in cli.stderr, cli.stderr
    assert copy(f"{src}/", dst, chunk_files=7, resume=True).failed == 1  # the same options: resumed


def test_a_journal_from_before_an_option_resumes_at_its_default(tmp_path):
    """A journal written before an option existed lacks it: that stands for the option's default."""
    src = make_tree(tmp_path / "src", {"a": b"new"})
    dst = make_tree(tmp_path / "dst", {"a": b"old!"})
    assert copy(f"{src}/", dst).failed == 1
    (name,) = [p for p in os.listdir(dst) if p.startswith(".pfs-journal-")]
    jr = open_journal(dst / name)
    job = read_job(jr)
    del job["options"]["--inplace"]
    jr.rewrite_job(job)
    assert json.dumps(read_job(jr)["options"]).count("--inplace") == 0
    with pytest.raises(PfsError, match="inplace="):
        copy(f"{src}/", dst, resume=True, inplace=True)
    assert copy(f"{src}/", dst, resume=True, overwrite=False).failed == 1  # same options: resumed, same failure


def test_options_the_tasks_take_as_they_are_are_copy_spec_fields(tmp_path):
    """``task`` options go to ``CopySpec`` under their own names (no third list in copy()); one that works: -L."""
    import dataclasses

    from operators.copy.spec import CopySpec

    task = {o.name for o in of_job("copy") if o.task}
    assert task and task <= {f.name for f in dataclasses.fields(CopySpec)}
    src = make_tree(tmp_path / "src", {"real": b"data", "link": "->real"})
    assert copy(f"{src}/", tmp_path / "dst", follow_symlinks=True, inplace=True, xattrs=False).failed == 0
    assert not (tmp_path / "dst/link").is_symlink() and (tmp_path / "dst/link").read_bytes() == b"data"
