"""``operators.core.localfs``: a local path read without fsspec means what fsspec's local file system
reads (issue 43), and every other URL still goes to fsspec."""

from __future__ import annotations

import os

import fsspec
import fsspec.utils
import pytest
from fsspec.implementations.local import LocalFileSystem

from dask_pfs.places import protocol_of
from operators.core import localfs


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    (tmp_path / "d" / "sub").mkdir()
    (tmp_path / "file").write_text("y")
    (tmp_path / "link-dir").symlink_to(tmp_path / "d")
    (tmp_path / "link-file").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    return tmp_path


NAMES = ["d", "d/", "d/f", "d/sub", "file", "link-dir", "link-file", "dangling", "nothing", "d/nothing/x"]


@pytest.mark.parametrize("name", NAMES)
def test_local_files_answer_as_fsspecs_local_file_system(tree, name):
    url = f"{tree}/{name}"
    fs, path = localfs.url_to_fs(url)
    assert isinstance(fs, localfs.LocalFiles)
    theirs, their_path = fsspec.core.url_to_fs(url)
    assert isinstance(theirs, LocalFileSystem) and path == their_path
    assert fs.exists(path) == theirs.exists(their_path)
    assert fs.isdir(path) == theirs.isdir(their_path)
    try:
        want: object = sorted(theirs.ls(their_path, detail=False))
    except OSError as exc:
        want = type(exc)
    try:
        got: object = sorted(fs.ls(path))
    except OSError as exc:
        got = type(exc)
    assert got == want
    if theirs.isdir(their_path) or not theirs.exists(their_path):
        return
    with fs.open(path, "r") as mine, theirs.open(their_path, "r") as other:
        assert mine.read() == other.read()


def test_rm_as_fsspecs(tree):
    fs = localfs.LocalFiles()
    with pytest.raises(ValueError, match="recursive"):
        fs.rm(str(tree / "d"))
    fs.rm(str(tree / "link-dir"))  # the link, not what it names
    assert (tree / "d" / "f").exists() and not os.path.lexists(tree / "link-dir")
    fs.rm(str(tree / "d"), recursive=True)
    assert not (tree / "d").exists()
    with pytest.raises(ValueError, match="to read"):
        fs.open(str(tree / "file"), "w")


@pytest.mark.parametrize(
    "url",
    ["relative/path", "~/x", "/tmp/a::b", "memory://x/y", "simplecache::file:///tmp/x", "/tmp/a://b", "file://rel"],
)
def test_anything_but_a_plain_absolute_path_goes_to_fsspec(url):
    if url == "/tmp/a://b":  # fsspec reads a protocol "/tmp/a" and refuses it: so does this
        with pytest.raises(ValueError, match="Protocol not known"):
            localfs.url_to_fs(url)
        return
    fs, path = localfs.url_to_fs(url)
    assert not isinstance(fs, localfs.LocalFiles)
    theirs, their_path = fsspec.core.url_to_fs(url)
    assert type(fs) is type(theirs) and path == their_path


@pytest.mark.parametrize("url", ["/tmp/x", "file:///tmp/x/", "local:///tmp/y", "/"])
def test_local_urls_are_read_as_fsspec_reads_them(url):
    fs, path = localfs.url_to_fs(url)
    assert isinstance(fs, localfs.LocalFiles) and path == fsspec.core.url_to_fs(url)[1]
    assert localfs.url_to_fs(url, auto_mkdir=True)[0] is not fs  # options: fsspec's own


@pytest.mark.parametrize(
    "text", ["a", "/x/y", "file:///x", "s3://b/k", "simplecache::s3://x", "local://x", "a::b://c", "", "http://x::y"]
)
def test_the_protocol_is_fsspecs(text):
    assert protocol_of(text) == fsspec.utils.get_protocol(text)
