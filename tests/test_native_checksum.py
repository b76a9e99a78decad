"""The core's checksums (``operators._native.checksum_files``, ``native/src/checksum.rs``): the
digests xxhash and hashlib give, files opened relative to their parents without following a
symlink anywhere below the root, and every unreadable file an error text, never an exception."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time

import pytest
import xxhash

from operators import ratelimit
from operators.checksum import ALGORITHMS, checksum_local_files, fill_table
from operators.rows import rows_to_table
from tests.conftest import DROP_DAC, REPO, have

MiB = 1 << 20


def expected(algorithm: str, data: bytes) -> str:
    h = xxhash.xxh3_128() if algorithm == "xxh3" else hashlib.new(algorithm)
    h.update(data)
    return f"{algorithm}:{h.hexdigest()}"


@pytest.fixture
def files(tmp_path):
    """Empty, small, several-block (past the 64 KiB first buffer and a 4 MiB block), nested, non-UTF-8."""
    root = tmp_path / "t"
    (root / "a" / "b").mkdir(parents=True)
    content = {
        b"empty": b"",
        b"small": b"hello",
        b"big": os.urandom(9 * MiB + 123),
        b"a/b/deep": b"deep" * 1000,
        b"odd-\xff\xfe": b"name that is not UTF-8",
    }
    for rel, data in content.items():
        with open(os.path.join(os.fsencode(root), rel), "wb") as f:
            f.write(data)
    return root, content


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_digests_equal_xxhash_and_hashlib(files, algorithm):
    root, content = files
    got = checksum_local_files(root, list(content), algorithm, threads=4)
    assert got == [(True, expected(algorithm, data)) for data in content.values()]


def test_a_batch_spread_over_core_threads_keeps_its_order(tmp_path):
    root = tmp_path / "many"
    root.mkdir()
    names = [f"f{i:04d}".encode() for i in range(500)]
    for i, name in enumerate(names):
        (root / name.decode()).write_bytes(str(i).encode() * (i % 7))
    got = checksum_local_files(root, names, "md5", threads=8)
    assert got == [(True, expected("md5", str(i).encode() * (i % 7))) for i in range(500)]


def test_symlinks_are_never_followed_below_the_root(tmp_path):
    """A file that is a link, and a parent directory swapped for a link to outside: error texts,
    and the outside file is never read (its digest appears nowhere)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(b"secret")
    root = tmp_path / "t"
    root.mkdir()
    (root / "link").symlink_to(outside / "f")
    (root / "sub").symlink_to(outside)  # was a directory when scanned; now a link out of the tree
    got = checksum_local_files(root, [b"link", b"sub/f", b"../outside/f", b"./link", b"sub//f"], "sha256")
    assert all(not ok for ok, _ in got), got
    assert got[0][1].startswith("OSError: [Errno 40]")  # ELOOP: O_NOFOLLOW on the file
    assert got[1][1].startswith(("OSError: [Errno 40]", "NotADirectoryError"))  # the parent is not followed
    assert all(text == "OSError: [Errno 22] Invalid argument" for _, text in got[2:])  # never leaves the root
    assert expected("sha256", b"secret") not in {text for _, text in got}


def test_vanished_and_unreadable_files_are_error_texts(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    (root / "ok").write_bytes(b"x")
    (root / "dir").mkdir()
    got = checksum_local_files(root, [b"gone", b"dir", b"ok", b"nodir/x"], "xxh3")
    assert got[0] == (False, "FileNotFoundError: [Errno 2] No such file or directory")
    assert got[1] == (False, "IsADirectoryError: [Errno 21] Is a directory")
    assert got[2] == (True, expected("xxh3", b"x"))
    assert got[3][0] is False and got[3][1].startswith("FileNotFoundError")


@pytest.mark.skipif(not have("setpriv"), reason="setpriv not installed")
def test_permission_denied_with_dac_dropped(tmp_path):
    root = tmp_path / "t"
    (root / "closed").mkdir(parents=True)
    (root / "closed" / "f").write_bytes(b"x")
    (root / "locked").write_bytes(b"y")
    (root / "locked").chmod(0)
    (root / "closed").chmod(0)
    (root / "open").write_bytes(b"z")
    code = (
        "import sys; from operators.checksum import checksum_local_files\n"
        "for ok, text in checksum_local_files(sys.argv[1], [b'locked', b'closed/f', b'open'], 'md5'): print(ok, text)\n"
    )
    try:
        out = subprocess.run(
            [*DROP_DAC, sys.executable, "-c", code, str(root)], capture_output=True, text=True, cwd=REPO, check=True
        ).stdout.splitlines()
    finally:
        (root / "closed").chmod(0o755)
    assert out[0] == "False PermissionError: [Errno 13] Permission denied"
    assert out[1] == "False PermissionError: [Errno 13] Permission denied"  # the parent cannot be opened
    assert out[2] == f"True {expected('md5', b'z')}"


def test_fill_table_puts_sums_and_errors_in_their_columns(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    (root / "a").write_bytes(b"aaa")
    rows = [_row("a", 3), _row("gone", 5)]
    table = rows_to_table(rows)

    def sums(files):
        return checksum_local_files(root, [p.encode() for p, _, _ in files], "xxh3", [s for _, _, s in files])

    table, failures = fill_table(table, sums)
    assert table.column("checksum").to_pylist() == [expected("xxh3", b"aaa"), None]
    assert table.column("error").to_pylist() == [
        None,
        "checksum: FileNotFoundError: [Errno 2] No such file or directory",
    ]
    assert failures == ["gone: checksum: FileNotFoundError: [Errno 2] No such file or directory"]


def test_bandwidth_cap_paces_the_batches(tmp_path):
    """Under --max-bandwidth the bytes of each small batch are taken before it is read."""
    root = tmp_path / "t"
    root.mkdir()
    names = [f"f{i:02d}".encode() for i in range(48)]
    for name in names:
        (root / name.decode()).write_bytes(b"x" * 100_000)
    ratelimit.configure(ratelimit.Limits(bytes_per_second=2_000_000))
    try:
        t0 = time.monotonic()
        got = checksum_local_files(root, names, "xxh3", [100_000] * len(names))
        took = time.monotonic() - t0
    finally:
        ratelimit.configure(None)
    assert all(ok for ok, _ in got)
    assert took >= 1.5  # 4.8 MB at 2 MB/s, less the bucket's first burst


def _row(path: str, size: int) -> tuple:
    from operators.schema import ROW_COLUMNS

    values: dict = dict.fromkeys(ROW_COLUMNS)
    values.update(path=path, size=size, type="file")
    return tuple(values[c] for c in ROW_COLUMNS)


@pytest.mark.skipif(not have("strace"), reason="strace not installed (scripts/ensure-tools.sh)")
def test_parents_shared_by_consecutive_paths_are_opened_once(tmp_path):
    """A batch's parents stay open from the root down (``relpath::Parents``): moving to a sibling
    directory opens one component, not the whole path again (each is a lookup and an open on
    network storage).  Counted on the real ``openat`` calls, one core thread."""
    root = tmp_path / "t"
    rels = []
    for i in range(10):
        leaf = root / "a" / "b" / "c" / "d" / f"x{i}"
        leaf.mkdir(parents=True)
        for j in range(3):
            (leaf / f"f{j}").write_bytes(b"x")
            rels.append(f"a/b/c/d/x{i}/f{j}".encode())
    log = tmp_path / "strace.log"
    code = (
        "import sys; from operators import _native\n"
        f"r = _native.checksum_files(sys.argv[1].encode(), {rels!r}, 'md5', 1)\n"
        "assert all(ok for ok, _ in r), r\n"
    )
    subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=openat", "-o", str(log), sys.executable, "-c", code, str(root)],
        cwd=REPO,
        check=True,
    )
    dirs = re.findall(r'openat\(\d+, "(?:[abcd]|x\d)", [^)]*O_DIRECTORY', log.read_text())
    assert len(dirs) == 4 + 10  # a, b, c, d once; each x once (was 5 opens per x)
