"""Issue 42 D: one guard for every destructive target, whatever the options; one reading of a place.

``dask_pfs.guard.check_target`` decides for every job (rm TREE, rm --manifest with or without
--where, sync --delete, cp and sync into a tree) and ``dask_pfs.places.local_path`` reads every
place argument (``local://`` and ``file://`` URLs included).
"""

from __future__ import annotations

import os

import pytest

from dask_pfs import PfsError, copy, remove, scan, sync
from tests.conftest import make_tree, tree_digest


@pytest.fixture
def home_tree(tmp_path, monkeypatch):
    """A scratch tree holding a home directory (HOME points into it), scanned."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tree = make_tree(
        tmp_path / "scratch",
        {"alice/.ssh/authorized_keys": b"ssh-ed25519 AAAA", "alice/.bashrc": b"PS1=", "old/run.log": b"log"},
    )
    monkeypatch.setenv("HOME", str(tree / "alice"))
    return tree


@pytest.mark.parametrize("where", [None, "true", "path LIKE 'alice/%'", "name = 'authorized_keys'"])
def test_rm_manifest_that_reaches_the_home_directory_is_refused_whatever_the_where(
    tmp_path, home_tree, dask_client, where
):
    scan(home_tree, tmp_path / "m", client=dask_client)
    before = tree_digest(home_tree)
    with pytest.raises(PfsError, match="home directory") as err:
        remove(manifest=tmp_path / "m", where=where, client=dask_client)
    assert "\n" not in str(err.value) and tree_digest(home_tree) == before


def test_rm_manifest_beside_the_home_directory_goes_on(tmp_path, home_tree, dask_client):
    """The guard weighs what the selection reaches: rows beside the home directory are removed."""
    scan(home_tree, tmp_path / "m", client=dask_client)
    result = remove(manifest=tmp_path / "m", where="path LIKE 'old/%' OR path = 'old'", client=dask_client)
    assert (result.removed_files, result.removed_dirs, result.failed) == (1, 1, 0)
    assert (home_tree / "alice" / ".ssh" / "authorized_keys").exists() and not (home_tree / "old").exists()


def test_sync_delete_with_the_source_inside_the_destination_is_refused(tmp_path, dask_client, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    dst = make_tree(tmp_path / "dst", {"a/f": b"1", "other/g": b"2"})
    before = tree_digest(dst)
    with pytest.raises(PfsError, match=r"source .* is inside it"):
        sync(dst / "a", dst, client=dask_client, delete=True)
    assert tree_digest(dst) == before
    # without --delete nothing there is removed: allowed; a destination inside its source never is
    with pytest.raises(PfsError, match="inside the source"):
        sync(dst, dst / "other", client=dask_client)


def test_local_urls_name_the_absolute_path(tmp_path, dask_client, monkeypatch):
    """``local:///abs`` and ``file:///abs`` are /abs, never ``<cwd>/local:/abs``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    src = make_tree(tmp_path / "src", {"f": b"data"})
    for scheme in ("local", "file"):
        out = tmp_path / f"out-{scheme}"
        copy(f"{src}/", f"{scheme}://{out}", client=dask_client)
        assert (out / "f").read_bytes() == b"data"
    assert os.listdir(cwd) == []


def test_airflow_operators_read_local_urls_the_same_way():
    pytest.importorskip("airflow.sdk")
    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.paths import to_url

    assert to_url("local:///tmp/x", "dst") == ("/tmp/x", {})
    assert to_url("file:///tmp/x", "dst") == ("/tmp/x", {})
    assert to_url("s3://b/k", "dst") == ("s3://b/k", {})
    with pytest.raises(AirflowException, match="absolute"):
        to_url("local://tmp/x", "dst")
