"""Issue 42 A: every file pfs writes outside a destination tree goes through one writer
(``operators/core/outputs.py``).  Each reproduction of the issue, as root, with a symlink an attacker
(uid 65534, by ``chown``) planted at the temp name pfs used to write: after the command the victim is
unchanged and the command either wrote its real output or failed with one line.  Also: the modes of
what pfs makes under ``umask 000``, and the cache's and keys' directories owned by another user."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dask_pfs.errors import PfsError
from operators.core import outputs

from ..conftest import make_tree, run_pfs
from .conftest import cli, one_line_error

OTHER = 65534  # the attacker: another uid owning (or writing) a directory


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PFS_LOCK_DIR", str(tmp_path / "locks"))


def victim(tmp_path: Path) -> tuple[Path, bytes]:
    """Root's file outside everything (``/etc/victim.conf``)."""
    v = tmp_path / "etc" / "victim.conf"
    v.parent.mkdir()
    v.write_bytes(b"root's configuration\n")
    return v, v.read_bytes()


def plant(link: Path, target: Path) -> None:
    """What the attacker does: a symlink at the name pfs writes, owned by the attacker."""
    os.symlink(target, link)
    os.lchown(link, OTHER, OTHER)


def give_away(path: Path, mode: int = 0o775) -> None:
    """``chown -R user2 path; chmod 775 path``: a group project directory of another user."""
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), OTHER, OTHER)
    os.chown(path, OTHER, OTHER)
    os.chmod(path, mode)


def one_line(proc, exit_code: int = 2, *words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == exit_code and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    errors = [line for line in lines if line.startswith("pfs: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], proc.stderr  # warnings before it allowed
    for word in words:
        assert word in errors[0], errors[0]


def test_rm_manifest_failure_log_through_a_link_in_a_group_directory(tmp_path):
    """The reported case: ``._rm-failures.parquet.tmp`` planted as a link to root's file."""
    v, before = victim(tmp_path)
    t2 = make_tree(tmp_path / "t2", {"a/f1": "1", "a/f2": "2", "b/g": "3"})
    m2 = tmp_path / "m2"
    run_pfs("scan", t2, "-o", m2, "--no-progress", check=True)
    give_away(m2)
    plant(m2 / "._rm-failures.parquet.tmp", v)
    with open(t2 / "a" / "f1", "a") as f:
        f.write("changed\n")  # skipped as changed: a line of the failure log
    proc = run_pfs("rm", "--manifest", m2, "-y", "--where", "path LIKE 'a/%'", "--no-progress")
    assert v.read_bytes() == before
    one_line(proc, 2, str(m2), "uid 65534")
    assert (t2 / "a" / "f2").exists()  # refused before anything was removed


def test_rm_manifest_in_a_safe_directory_writes_its_log_beside_a_planted_link(tmp_path):
    """A link planted while the directory was open (then closed): pfs writes its real log, not through it."""
    v, before = victim(tmp_path)
    t2 = make_tree(tmp_path / "t2", {"a/f1": "1", "a/f2": "2"})
    m2 = tmp_path / "m2"
    run_pfs("scan", t2, "-o", m2, "--no-progress", check=True)
    plant(m2 / "._rm-failures.parquet.tmp", v)
    with open(t2 / "a" / "f1", "a") as f:
        f.write("changed\n")
    proc = run_pfs("rm", "--manifest", m2, "-y", "--where", "path LIKE 'a/%'", "--no-progress")
    assert proc.returncode == 0, proc.stderr  # one entry skipped as changed (logged)
    assert v.read_bytes() == before
    assert (m2 / "_rm-failures.parquet").read_bytes()[:4] == b"PAR1"
    assert (m2 / "._rm-failures.parquet.tmp").is_symlink()  # not a name of the writer's: left alone


def test_scan_overwrite_marker_through_a_link(tmp_path):
    v, before = victim(tmp_path)
    t = make_tree(tmp_path / "t", {"a/f": "1"})
    m = tmp_path / "M"
    run_pfs("scan", t, "-o", m, "--no-progress", check=True)
    plant(m / "_manifest.json.tmp", v)
    proc = run_pfs("scan", t, "-o", m, "--overwrite", "--no-progress")
    assert proc.returncode == 0, proc.stderr  # root's own directory: the real marker written
    assert v.read_bytes() == before
    assert b'"pfs-manifest"' in (m / "_manifest.json").read_bytes()
    give_away(m)  # the same directory, another user's: refused, one line
    proc = run_pfs("scan", t, "-o", m, "--overwrite", "--no-progress")
    assert v.read_bytes() == before
    one_line(proc, 2, str(m))


def test_sync_update_dst_manifest_plan_through_a_link(tmp_path):
    v, before = victim(tmp_path)
    src = make_tree(tmp_path / "src", {"a/f": "1", "b": "2"})
    dst = make_tree(tmp_path / "dst", {"a/f": "old"})
    d = tmp_path / "D"
    run_pfs("scan", dst, "-o", d, "--no-progress", check=True)
    plan = tmp_path / "D.plan"
    plan.mkdir()
    plant(plan / ".plan.parquet.tmp", v)
    plant(d / ".pfs-sync-manifest.tmp", v)
    proc = run_pfs("sync", src, dst, "--dst-manifest", d, "--update-dst-manifest", "--no-progress")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert v.read_bytes() == before
    assert (dst / "b").read_text() == "2" and (plan / "plan.parquet").read_bytes()[:4] == b"PAR1"
    code = run_pfs("query", d, "--select", "path", "--format", "tsv")
    assert "b" in code.stdout.split(), code.stdout + code.stderr  # the destination manifest was updated
    give_away(plan, 0o777)
    proc = run_pfs("sync", src, dst, "--dst-manifest", d, "--update-dst-manifest", "--no-progress")
    assert v.read_bytes() == before
    one_line(proc, 2, str(plan))


def test_cp_failure_log_in_a_cache_logs_directory_another_user_made(tmp_path, capsys, scheduler_address):
    """``$XDG_CACHE_HOME/pfs/logs`` pre-created 0777 by another user, the log's temp name a link."""
    v, before = victim(tmp_path)
    src = make_tree(tmp_path / "src", {"f": "x"})
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "f").mkdir()  # a directory where the file goes: the entry fails, so a log is written
    code, _, err = cli(capsys, "cp", f"{src}/", dst, "--overwrite", "--scheduler", scheduler_address)
    assert code == 1, err
    logs = tmp_path / "cache" / "pfs" / "logs"
    (name,) = os.listdir(logs)
    for p in logs.iterdir():
        p.unlink()
    os.chmod(logs, 0o777)
    os.chown(logs, OTHER, OTHER)
    plant(logs / f".{name}.tmp", v)
    code, _, err = cli(capsys, "cp", f"{src}/", dst, "--overwrite", "--scheduler", scheduler_address)
    assert v.read_bytes() == before
    one_line_error(code, err, 2)
    assert str(logs) in err and "uid 65534" in err
    assert sorted(os.listdir(logs)) == [f".{name}.tmp"]  # nothing written there


def test_umask_000_gives_explicit_modes(tmp_path, capsys, scheduler_address):
    """``umask 000``: the cache 0700 with its log 0600 (was 0777 and 0666); a manifest 0755 with 0644 files."""
    src = make_tree(tmp_path / "src", {"f": "x", "d/g": "y"})
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "f").mkdir()
    old = os.umask(0)
    try:
        code, _, err = cli(capsys, "cp", f"{src}/", dst, "--overwrite", "--scheduler", scheduler_address)
        assert code == 1, err
        code, _, err = cli(capsys, "scan", src, "-o", tmp_path / "out" / "m", "--scheduler", scheduler_address)
        assert code == 0, err
    finally:
        os.umask(old)
    cache = tmp_path / "cache"

    def mode(p: Path) -> int:
        return stat.S_IMODE(os.lstat(p).st_mode)

    assert {mode(cache), mode(cache / "pfs"), mode(cache / "pfs" / "logs")} == {0o700}
    assert [mode(p) for p in (cache / "pfs" / "logs").iterdir()] == [0o600]
    m = tmp_path / "out" / "m"
    assert mode(tmp_path / "out") == 0o755 and mode(m) == 0o755
    files = [p for p in m.iterdir() if p.is_file()]
    assert files and {mode(p) for p in files} == {0o644}


def test_keys_directory_under_another_users_pfs_directory_is_refused(tmp_path):
    """A ``pfs`` directory owned by another user, 0777, holding root's 0700 ``keys``: refused."""
    from dask_pfs.runtime.journals import journal_key

    journal_key()  # made as it should be
    pfs = tmp_path / "cache" / "pfs"
    os.chown(pfs, OTHER, OTHER)
    os.chmod(pfs, 0o777)
    with pytest.raises(PfsError, match="uid 65534"):
        journal_key()
    os.chown(pfs, 0, 0)
    with pytest.raises(PfsError, match="writable by group or others"):
        journal_key()
    os.chmod(pfs, 0o700)
    assert len(journal_key()) == 32


def test_the_writer_never_writes_through_a_planted_name(tmp_path):
    """The writer itself: a link at the final name is replaced (never followed), a directory that is a
    link or another user's is refused, and in a sticky directory another user's file is not replaced."""
    v, before = victim(tmp_path)
    d = tmp_path / "out"
    d.mkdir()
    plant(d / "x.json", v)
    outputs.write_bytes(d / "x.json", b"{}")
    assert v.read_bytes() == before and (d / "x.json").read_bytes() == b"{}"
    os.symlink(v.parent, tmp_path / "link")
    with pytest.raises(outputs.UnsafeOutput, match="symlink"):
        outputs.write_bytes(tmp_path / "link" / "victim.conf", b"owned")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "theirs").write_text("theirs")
    os.chown(sticky / "theirs", OTHER, OTHER)
    with pytest.raises(outputs.UnsafeOutput, match="uid 65534"):
        outputs.write_bytes(sticky / "theirs", b"mine")
    outputs.write_bytes(sticky / "mine", b"mine")
    assert sorted(os.listdir(sticky)) == ["mine", "theirs"]  # no temp file left behind
    assert v.read_bytes() == before


def test_an_object_store_output_is_one_put_of_the_complete_bytes(s3_server, s3fs_fs):
    """On S3 the writer spools and puts once: an output whose writing fails leaves no object (not even a
    truncated one), a finished one is there whole; the same API as a local output."""
    s3fs_fs.makedirs("writer-bucket", exist_ok=True)
    with pytest.raises(RuntimeError), outputs.output_file("s3://writer-bucket/out/log.parquet", s3_server) as f:
        f.write(b"PAR1 half")
        raise RuntimeError("the job died while writing")
    s3fs_fs.invalidate_cache()
    assert not s3fs_fs.exists("writer-bucket/out/log.parquet")
    with outputs.output_file("s3://writer-bucket/out/log.parquet", s3_server) as f:
        f.write(b"PAR1 whole PAR1")
    s3fs_fs.invalidate_cache()
    assert s3fs_fs.cat("writer-bucket/out/log.parquet") == b"PAR1 whole PAR1"
