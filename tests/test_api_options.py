"""The Python API takes what the CLI takes as plain keywords, the same names in every job
(``dask_pfs.options``), and its errors name the Python argument while the CLI's name the flag."""

from __future__ import annotations

import inspect
import os

import pytest

import dask_pfs
from dask_pfs import PfsError, copy, open_manifest, remove, scan, sync, verify
from dask_pfs.options import LIMITS, OPTIONS, PRUNE

from .conftest import make_tree, run_pfs

TREE = {"keep/a.txt": b"a", "keep/b.txt": b"bb", ".git/config": b"c", "deep/x/y/z.txt": b"z"}


def paths(manifest) -> set[str]:
    return set(open_manifest(manifest).to_pandas()["path"])


def test_prune_and_caps_are_plain_keywords(tmp_path):
    src = make_tree(tmp_path / "src", TREE)
    scan(src, tmp_path / "m", exclude=[".git/"], max_depth=3, max_ops_per_second=10_000, max_bandwidth="1GB/s")
    assert ".git" not in paths(tmp_path / "m") and "keep/a.txt" in paths(tmp_path / "m")
    assert "deep/x/y/z.txt" not in paths(tmp_path / "m") and "deep/x/y" in paths(tmp_path / "m")
    scan(src, tmp_path / "m1", exclude=".git/")  # one pattern as a string, not its characters
    assert ".git" not in paths(tmp_path / "m1")

    result = copy(src, tmp_path / "dst", include=["*.txt"], exclude=["deep/"], max_bandwidth=50e6)
    assert result.exit_code == 0
    copied = {p.relative_to(tmp_path / "dst").as_posix() for p in (tmp_path / "dst").rglob("*") if p.is_file()}
    assert copied == {"keep/a.txt", "keep/b.txt"}
    assert verify(tmp_path / "dst", tmp_path / "dst", max_ops_per_second=5_000).exit_code == 0
    synced = sync(src, tmp_path / "mirror", exclude=[".git/"], max_ops_per_second=5_000)
    assert synced.exit_code == 0 and not (tmp_path / "mirror" / ".git").exists()
    assert (tmp_path / "mirror" / "deep/x/y/z.txt").read_bytes() == b"z"
    removed = remove(tmp_path / "mirror", exclude=["keep/"], dry_run=True)
    assert removed.exit_code == 0 and (tmp_path / "mirror" / "deep").exists()


def test_every_job_lists_the_same_names():
    """One name per option across jobs, in each signature (what help() and completion show) and docstring."""
    for fn, names in ((scan, PRUNE + LIMITS), (copy, PRUNE + LIMITS), (remove, PRUNE + LIMITS),
                      (sync, PRUNE + LIMITS), (verify, LIMITS)):  # fmt: skip
        params = inspect.signature(fn).parameters
        for name in names:
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (fn.__name__, name)
            assert params[name].default == OPTIONS[name].default
            assert f"``{name}``" in (fn.__doc__ or ""), (fn.__name__, name)
        assert ("prune" in params and "limits" in params) or fn is verify


def test_python_errors_name_python_arguments(tmp_path):
    src = make_tree(tmp_path / "src", {"a": b"1"})
    scan(src, tmp_path / "m")
    with pytest.raises(PfsError, match=r"already holds a manifest; pass overwrite=True to replace it"):
        scan(src, tmp_path / "m")
    with pytest.raises(PfsError, match=r"^where= needs manifest="):
        copy(src, tmp_path / "dst", where="size > 0")
    with pytest.raises(PfsError, match=r"^where= refused: ';' ends a statement"):
        open_manifest(tmp_path / "m").to_pandas(where="1=1; select 1")
    with pytest.raises(PfsError, match=r"^max_bandwidth='fast': not a bandwidth"):
        scan(src, tmp_path / "m2", max_bandwidth="fast")
    with pytest.raises(PfsError, match=r"^max_depth= must be at least 1"):
        scan(src, tmp_path / "m2", max_depth=0)
    with pytest.raises(PfsError, match=r"give prune= or exclude=, not both"):
        from operators.scan.prune import Prune

        scan(src, tmp_path / "m2", exclude=["a"], prune=Prune(exclude=("b",)))
    assert not (tmp_path / "m2").exists() and not (tmp_path / "dst").exists()
    assert issubclass(dask_pfs.IncompleteManifestError, PfsError)


def test_cli_errors_keep_cli_names(tmp_path):
    src = make_tree(tmp_path / "src", {"a": b"1"})
    run_pfs("scan", src, "-o", tmp_path / "m", check=True)
    again = run_pfs("scan", src, "-o", tmp_path / "m")
    assert again.returncode == 2 and "pass --overwrite to replace it" in again.stderr, again.stderr
    where = run_pfs("cp", src, tmp_path / "dst", "--where", "size > 0")
    assert where.returncode == 2 and "--where needs --manifest" in where.stderr, where.stderr
    depth = run_pfs("scan", src, "-o", tmp_path / "m3", "--max-depth", "0")
    assert depth.returncode == 2 and "--max-depth" in depth.stderr, depth.stderr


def test_api_reference_is_current_and_lists_each_argument_once():
    """docs/api.md is generated from the signatures and docstrings (scripts/make-api-doc.py); each shared
    option is one row, taken by every job it applies to, under its one name."""
    import subprocess
    import sys

    from .conftest import REPO

    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/make-api-doc.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    text = (REPO / "docs/api.md").read_text()
    for name in PRUNE + LIMITS:
        rows = [line for line in text.splitlines() if line.startswith(f"| `{name}` |")]
        assert len(rows) == 1, (name, rows)
        assert "scan, copy, remove, sync" in rows[0] or name in LIMITS, rows


# one refusal of each job, raised below the API: (Python call, its words; CLI arguments, the CLI's words)
def _refusals(tmp_path):
    src = make_tree(tmp_path / "src", {"a": b"1", "d/b": b"2"})
    scan(src, tmp_path / "m")
    m = tmp_path / "m"
    return [
        (lambda: scan(src, tmp_path / "m2", resume=True, overwrite=True),
         "resume=True and overwrite=True exclude each other",
         ("scan", src, "-o", tmp_path / "m2", "--resume", "--overwrite"),
         "--resume and --overwrite exclude each other"),
        (lambda: copy(src, tmp_path / "dst", overwrite=True, update=True),
         "overwrite=True and update=True exclude each other",
         ("cp", src, tmp_path / "dst", "--overwrite", "--update"), "--overwrite and --update exclude each other"),
        (lambda: copy(src, tmp_path / "dst", chown="no-such-user-pfs"),
         "chown='no-such-user-pfs': no user named 'no-such-user-pfs' on this host",
         ("cp", src, tmp_path / "dst", "--chown", "no-such-user-pfs"), "--chown: no user named 'no-such-user-pfs'"),
        (lambda: copy(None, tmp_path / "dst", manifest=m, exclude=["a"]),
         "exclude=/include=/max_depth=/one_file_system= choose what a scan of SRC keeps; with manifest= select rows "
         "with where=",
         ("cp", "--manifest", m, tmp_path / "dst", "--exclude", "a"),
         "--exclude/--include/--max-depth/--one-file-system choose what a scan of SRC keeps; with --manifest select "
         "rows with --where"),
        (lambda: remove(manifest=m, exclude=["a"]),
         "exclude=/include=/max_depth=/one_file_system= prune a tree walk; with manifest=, where=",
         ("rm", "--manifest", m, "--exclude", "a"),
         "--exclude/--include/--max-depth/--one-file-system prune a tree walk; with --manifest, --where"),
        (lambda: remove(manifest=m, max_entries="lots"),
         "max_entries=: not a count or a percentage",
         ("rm", "--manifest", m, "--max-entries", "lots"), "--max-entries: not a count or a percentage"),
        (lambda: sync(src, tmp_path / "mirror", delete=True, max_delete="lots"),
         "max_delete=: not a count or a percentage",
         ("sync", src, tmp_path / "mirror", "--delete", "--max-delete", "lots"),
         "--max-delete: not a count or a percentage"),
        (lambda: verify(), "give SRC and DST (trees), or src_manifest= / dst_manifest=", None, None),
    ]  # fmt: skip


def test_each_job_words_its_refusals_for_python_and_for_the_cli(tmp_path):
    for call, python_words, argv, cli_words in _refusals(tmp_path):
        with pytest.raises(PfsError) as err:
            call()
        assert python_words in str(err.value), (str(err.value), python_words)
        assert "--" not in str(err.value), str(err.value)
        if argv is not None:
            done = run_pfs(*argv)
            assert done.returncode == 2 and cli_words in done.stderr, (argv, done.stderr)
    assert not (tmp_path / "dst").exists() and not (tmp_path / "mirror").exists()


def test_old_keyword_names_still_work_with_a_warning(tmp_path):
    """One name per thing across jobs: the tree a job reads is ``src`` (was ``url`` in scan), the Parquet file of
    entries that failed or differ is ``log`` (was ``failure_log`` in copy, ``report`` in verify)."""
    src = make_tree(tmp_path / "src", {"a": b"1"})
    with pytest.warns(DeprecationWarning, match=r"scan\(url=\.\.\.\) is deprecated: use src=\.\.\."):
        scan(url=src, out=tmp_path / "m")
    assert paths(tmp_path / "m") >= {"a"}
    make_tree(tmp_path / "dst", {"a": b"22"})
    with pytest.warns(DeprecationWarning, match=r"copy\(failure_log=\.\.\.\) is deprecated: use log=\.\.\."):
        failed = copy(f"{src}/", tmp_path / "dst", failure_log=tmp_path / "failed.parquet")
    assert failed.failed == 1 and failed.log == str(tmp_path / "failed.parquet") and failed.failure_log == failed.log
    with pytest.warns(DeprecationWarning, match=r"verify\(report=\.\.\.\) is deprecated: use log=\.\.\."):
        differs = verify(src, tmp_path / "dst", report=tmp_path / "differs.parquet")
    assert differs.log == str(tmp_path / "differs.parquet") and os.path.exists(differs.log)
    with pytest.raises(PfsError, match=r"give log= \(or its old name report=\), not both"):
        verify(src, tmp_path / "dst", report=tmp_path / "r1", log=tmp_path / "r2")
    for fn in (scan, copy, verify):  # help() and docs/api.md show the new names only
        assert not {"url", "failure_log", "report"} & set(inspect.signature(fn).parameters), fn.__name__
    logged = run_pfs("cp", f"{src}/", tmp_path / "dst", "--log", tmp_path / "cli.parquet")
    assert logged.returncode == 1 and os.path.exists(tmp_path / "cli.parquet"), logged.stderr
    old = run_pfs("verify", src, tmp_path / "dst", "--report", tmp_path / "old.parquet")
    assert old.returncode == 1 and os.path.exists(tmp_path / "old.parquet"), old.stderr
