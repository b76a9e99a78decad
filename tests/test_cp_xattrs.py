"""cp and sync keep extended attributes, POSIX ACLs and owners (issue 31), checked with the tools an
admin would use: ``getfattr -d -m - -R`` and ``getfacl -R`` of source and copy are equal.

Trees live on a tmpfs (/dev/shm: ``user.*`` attributes on kernels >= 6.6, values up to 64 KiB; ext4
holds one block).  latfs (/mnt/lat, FUSE) refuses every attribute: the destination that refuses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import PFS, REPO, run_pfs

SHM = Path("/dev/shm")
BIG = bytes(range(256)) * 256  # 64 KiB, every byte value
DROP = "-dac_override,-dac_read_search,-chown,-fowner"
NON_ROOT = ["setpriv", f"--bounding-set={DROP}", f"--inh-caps={DROP}"]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setfacl") or not shutil.which("getfattr"),
    reason="needs root, setfacl and getfattr (scripts/ensure-tools.sh)",
)


@pytest.fixture
def shm():
    if not SHM.is_dir():
        pytest.skip("no /dev/shm")
    d = Path(tempfile.mkdtemp(prefix="pfs-xattrs-", dir=SHM))
    probe = d / "probe"
    probe.touch()
    try:
        os.setxattr(probe, "user.probe", BIG)
    except OSError:
        shutil.rmtree(d)
        pytest.skip("this tmpfs takes no 64 KiB user.* attribute (kernel < 6.6?)")
    probe.unlink()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def make_tree(root: Path) -> Path:
    """User attributes (a binary and a 64 KiB value), ACLs (access and default), owners, a hard
    link, a sparse file, a symlink and a FIFO."""
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a").write_bytes(b"alpha")
    os.setxattr(root / "a", "user.bin", b"\x00\xff\x01\n")
    os.setxattr(root / "a", "user.big", BIG)
    os.setxattr(root / "a", "trusted.h31a", b"root only")  # copied with CAP_SYS_ADMIN
    subprocess.run(["setfacl", "-m", "u:1234:rw,g:5678:r", str(root / "a")], check=True)
    os.link(root / "a", root / "sub" / "a-link")
    with open(root / "sparse", "wb") as f:
        f.truncate(4 << 20)
        f.seek(2 << 20)
        f.write(b"middle")
    os.setxattr(root / "sparse", "user.kind", b"holes")
    os.setxattr(root / "sparse", "security.h31a", b"admin")  # listed to all, written with CAP_SYS_ADMIN
    subprocess.run(["setfacl", "-d", "-m", "u:1234:rwx", str(root / "sub")], check=True)
    os.setxattr(root / "sub", "user.dir", b"d")
    (root / "sub" / "deep" / "owned").write_text("x")
    os.chown(root / "sub" / "deep" / "owned", 1234, 5678)
    os.chown(root / "sub" / "deep", 1234, 5678)
    os.chmod(root / "sub" / "deep" / "owned", 0o6755)  # set-id bits survive the chown (chown first)
    os.symlink("a", root / "link")
    os.lchown(root / "link", 1234, 5678)
    os.mkfifo(root / "fifo")
    return root


def attrs(root: Path) -> str:
    """``getfattr -d -m - -R`` of the tree (links not followed), per entry, sorted by path."""
    out = subprocess.run(
        ["getfattr", "-h", "-d", "-m", "-", "-R", "--absolute-names", "."],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return "\n\n".join(sorted(b.strip() for b in out.split("\n\n") if b.strip()))


def acls(root: Path) -> str:
    """``getfacl -R -P`` of the tree (with owners and modes), per entry, sorted by path."""
    out = subprocess.run(["getfacl", "-R", "-P", "."], cwd=root, capture_output=True, text=True, check=True).stdout
    return "\n\n".join(sorted(b.strip() for b in out.split("\n\n") if b.strip()))


def owners(root: Path) -> dict[str, tuple[int, int]]:
    return {
        os.path.relpath(os.path.join(d, n), root): (s.st_uid, s.st_gid)
        for d, dirs, files in os.walk(root)
        for n in dirs + files
        for s in [os.lstat(os.path.join(d, n))]
    }


def test_cp_gives_equal_getfattr_and_getfacl(shm):
    src = make_tree(shm / "src")
    run_pfs("cp", f"{src}/", shm / "dst", check=True)
    dst = shm / "dst"
    assert "user.big=0s" in attrs(dst) and "default:user:1234:rwx" in acls(dst)
    assert attrs(dst) == attrs(src)
    assert acls(dst) == acls(src)  # owners, modes (set-id bits too) and ACLs
    assert owners(dst) == owners(src)
    assert os.getxattr(dst / "a", "user.big") == BIG
    assert os.lstat(dst / "a").st_ino == os.lstat(dst / "sub" / "a-link").st_ino
    assert os.lstat(dst / "sparse").st_blocks * 512 < 1 << 20


def test_no_xattrs_and_no_owner_drop_them(shm):
    src = make_tree(shm / "src")
    run_pfs("cp", "--no-xattrs", "--no-owner", f"{src}/", shm / "dst", check=True)
    dst = shm / "dst"
    assert "user." not in attrs(dst) and "posix_acl" not in attrs(dst)
    assert set(owners(dst).values()) == {(0, 0)}


def test_chown_sets_ids_and_refuses_unknown_names(shm):
    src = make_tree(shm / "src")
    run_pfs("cp", "--chown", "4321:8765", f"{src}/", shm / "d1", check=True)
    assert set(owners(shm / "d1").values()) == {(4321, 8765)}
    run_pfs("cp", "--chown", ":root", "--numeric-ids", f"{src}/", shm / "d2", check=True)
    got = owners(shm / "d2")
    assert got["sub/deep/owned"] == (1234, 0) and got["a"] == (0, 0)  # the user kept, the group given
    bad = run_pfs("cp", "--chown", "no-such-user-h31a:", f"{src}/", shm / "d3")
    assert bad.returncode == 2 and "no user named 'no-such-user-h31a'" in bad.stderr
    assert "Traceback" not in bad.stderr and not (shm / "d3").exists()


def test_sync_chown_compares_the_given_owner_and_settles(shm):
    """The plan compares the destination's owners with the ``--chown`` ids (passed to DuckDB as parameters,
    never pasted into the SQL): a second sync changes nothing; an owner changed under the copy is put back."""
    src = make_tree(shm / "src")
    dst = shm / "dst"
    run_pfs("sync", "--chown", "4321:8765", "--numeric-ids", src, dst, "--plan", shm / "p1", check=True)
    assert set(owners(dst).values()) == {(4321, 8765)}
    again = run_pfs("sync", "--chown", "4321:8765", "--numeric-ids", src, dst, "--plan", shm / "p2", "-n", check=True)
    assert "0 changed" in again.stdout + again.stderr, again.stdout + again.stderr
    os.chown(dst / "a", 4321, 1)
    run_pfs("sync", "--chown", "4321:8765", "--numeric-ids", src, dst, "--plan", shm / "p3", check=True)
    assert owners(dst)["a"] == (4321, 8765)


def test_without_chown_capability_keeps_what_it_may_and_counts_what_was_asked(shm):
    """Root with CAP_CHOWN/CAP_FOWNER/DAC dropped (as a user): by default no chown is tried and
    user.* attributes and ACLs are kept; ``--owner`` asks for the owners: each refusal counted."""
    src = make_tree(shm / "src")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [*NON_ROOT, *PFS, "cp"]
    quiet = subprocess.run([*cmd, f"{src}/", str(shm / "d1")], capture_output=True, text=True, env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert "user.bin" in attrs(shm / "d1") and "user:1234:rw" in acls(shm / "d1")
    log = shm / "f.parquet"
    asked = subprocess.run(
        [*cmd, "--owner", "--failure-log", str(log), f"{src}/", str(shm / "d2")], capture_output=True, text=True,
        env=env,
    )  # fmt: skip
    assert asked.returncode == 1, asked.stderr
    import pyarrow.parquet as pq

    failed = {r["path"]: r["error"] for r in pq.read_table(log).to_pylist()}
    assert "owner 1234:5678: Operation not permitted" in failed["sub/deep/owned"]
    assert "owner 1234:5678: Operation not permitted" in failed["link"]
    assert "a" not in failed  # root's own file: chown to 0:0 is allowed


def test_sync_copies_keep_attributes_unless_told_not_to(shm):
    """sync's copy gets the same options (which entries sync copies is h31b's: attribute changes)."""
    src = make_tree(shm / "src")
    run_pfs("sync", src, shm / "d1", "--plan", shm / "p1", check=True)
    assert attrs(shm / "d1") == attrs(src) and acls(shm / "d1") == acls(src)
    run_pfs("sync", src, shm / "d2", "--plan", shm / "p2", "--no-xattrs", "--no-owner", check=True)
    assert "user." not in attrs(shm / "d2") and set(owners(shm / "d2").values()) == {(0, 0)}


def test_cp_r_is_accepted(shm):
    src = make_tree(shm / "src")
    run_pfs("cp", "-r", f"{src}/", shm / "dst", check=True)
    assert attrs(shm / "dst") == attrs(src)


def test_trusted_attributes_need_cap_sys_admin(shm):
    """Without CAP_SYS_ADMIN ``trusted.*`` is not listed and ``security.*`` not written: neither is
    copied, and that is no failure (``cp -a`` as a user does the same)."""
    src = make_tree(shm / "src")
    run_pfs("cp", f"{src}/", shm / "d1", check=True)
    assert os.getxattr(shm / "d1" / "a", "trusted.h31a") == b"root only"
    assert os.getxattr(shm / "d1" / "sparse", "security.h31a") == b"admin"
    drop = ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    got = subprocess.run([*drop, *PFS, "cp", f"{src}/", str(shm / "d2")], capture_output=True, text=True, env=env)
    assert got.returncode == 0, got.stderr
    assert "trusted.h31a" not in os.listxattr(shm / "d2" / "a") and os.getxattr(shm / "d2" / "a", "user.big") == BIG
    assert "security.h31a" not in os.listxattr(shm / "d2" / "sparse")


def test_big_files_copied_in_ranges_keep_attributes(shm):
    """Files over --split-size are written by range tasks and finished apart (``finish``): same result."""
    src = make_tree(shm / "src")
    run_pfs("cp", "--split-size", "1MiB", f"{src}/", shm / "dst", check=True)
    assert os.getxattr(shm / "dst" / "sparse", "user.kind") == b"holes"
    assert attrs(shm / "dst") == attrs(src) and acls(shm / "dst") == acls(src)


def test_copy_xattrs_phases_split_layouts_from_the_rest(shm):
    """``layouts`` (before a range's data) copies no ordinary attribute; ``rest`` copies them and no
    layout; a bad phase is a ValueError.  (Layout names themselves need Lustre or CephFS.)"""
    import operators._native as native

    (shm / "s").write_bytes(b"x")
    os.setxattr(shm / "s", "user.a", b"1")
    for phase, want in (("layouts", []), ("rest", ["user.a"]), ("all", ["user.a"])):
        (shm / phase).write_bytes(b"")
        fd = os.open(shm / phase, os.O_WRONLY)
        try:
            assert native.copy_xattrs(os.fsencode(shm / "s"), fd, False, phase) == []
        finally:
            os.close(fd)
        assert os.listxattr(shm / phase) == want, phase
    with pytest.raises(ValueError, match="phase is all, layouts or rest"):
        native.copy_xattrs(os.fsencode(shm / "s"), os.fsencode(shm / "all"), False, "data")
