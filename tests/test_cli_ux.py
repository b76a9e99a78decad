"""A CLI that says what it does (issue 35): real trees, ``pfs`` run as a subprocess.

Each test runs the commands a new user would, and checks what they print and what they leave.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from .conftest import PFS, REPO, make_tree, run_pfs, tree_digest

FAST = ["--workers", "1"]


def _tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "src", {"a.txt": "a" * 10, "d/b.txt": "b" * 20, "d/e/c.txt": "c" * 30})


def test_cp_update_ignore_existing_and_the_deprecated_name(tmp_path):
    src, dst = _tree(tmp_path), tmp_path / "dst"
    run_pfs("cp", f"{src}/", dst, *FAST, check=True)
    (dst / "d/b.txt").write_text("mine")
    os.utime(dst / "d/b.txt", (1, 1))
    kept = run_pfs("cp", f"{src}/", dst, "--ignore-existing", *FAST)
    assert kept.returncode == 0, kept.stderr
    assert (dst / "d/b.txt").read_text() == "mine" and "3 skipped" in kept.stdout
    both = run_pfs("cp", f"{src}/", dst, "--update", "--ignore-existing", *FAST)
    assert both.returncode == 2 and "exclude each other" in both.stderr
    old = run_pfs("cp", f"{src}/", dst, "--skip-existing", *FAST)
    assert old.returncode == 0, old.stderr
    warnings = [line for line in old.stderr.splitlines() if "deprecated" in line]
    assert warnings == ["pfs: warning: --skip-existing is deprecated, use --update (same meaning)"]
    assert tree_digest(dst) == tree_digest(src)


def test_cp_dry_run_and_itemize_change_nothing(tmp_path):
    src, dst = _tree(tmp_path), tmp_path / "dst"
    run_pfs("cp", f"{src}/", dst, *FAST, check=True)
    (src / "new.txt").write_text("n")
    (dst / "a.txt").write_text("different length")
    before = tree_digest(dst)
    dry = run_pfs("cp", f"{src}/", dst, "-n", "-i", *FAST)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert ">f.st...... a.txt" in lines and ">f+++++++++ new.txt" in lines
    assert "would copy" in lines[-1] and "1 new, 1 changed" in lines[-1] and "would fail" in lines[-1]
    assert tree_digest(dst) == before and not (dst / "new.txt").exists()
    left = run_pfs("cp", f"{src}/", dst, "--dry-run", "--ignore-existing", *FAST)
    assert ">f+++++++++ new.txt" in left.stdout and "a.txt" not in left.stdout.split("would copy")[0]


def test_cp_of_one_file_names_the_new_file(tmp_path):
    src, out = _tree(tmp_path), tmp_path / "out"
    out.mkdir()
    done = run_pfs("cp", src / "a.txt", out / "new.h5", "--json", *FAST)
    summary = json.loads(done.stdout)
    assert summary["destination"] == f"{out}/new.h5" and (out / "new.h5").read_text() == "a" * 10
    # --json names nothing that is gone: the temporary scan and the removed journal
    tree = json.loads(run_pfs("cp", src, tmp_path / "copy", "--json", *FAST, check=True).stdout)
    assert tree["manifest"] is None and tree["journal"] is None


def test_sync_dry_run_says_would_delete_lists_paths_and_leaves_only_the_plan(tmp_path):
    src = _tree(tmp_path)
    dst = make_tree(tmp_path / "dst", {"a.txt": "a" * 10, "x1": "x", "x2/y": "y", "x3": "z"})
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    before = tree_digest(dst)
    dry = run_pfs("sync", src, dst, "--delete", "-n", "--show", "2", *FAST, env=env)
    assert dry.returncode == 0, dry.stderr
    out = dry.stdout.splitlines()
    assert "4 extra (would delete 4)" in out[-1] and "(kept)" not in out[-1]
    assert out[:3] == [">f..t...... a.txt", "cd+++++++++ d/", "... and 7 more (--itemize lists all)"]
    assert tree_digest(dst) == before
    every = run_pfs("sync", src, dst, "--delete", "-n", "--itemize", *FAST, env=env).stdout.splitlines()
    for line in ("*deleting   x1", "*deleting   x2/", "*deleting   x2/y", "*deleting   x3", ">f+++++++++ d/b.txt"):
        assert line in every
    done = run_pfs("sync", src, dst, "--delete", "-y", "--json", *FAST, env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["src_manifest"] is None and summary["dst_manifest"] is None
    (work,) = (tmp_path / "cache/pfs").glob("sync-*")
    assert sorted(p.name for p in work.iterdir()) == ["plan"]
    assert tree_digest(dst) == tree_digest(src)


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    src = tmp_path / "big"
    for d in range(10):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(200):
            (src / f"d{d}/f{i}").write_text("x")
    dst = tmp_path / "dst"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # a whole process group gets the signal, as a terminal's Ctrl-C does (workers included)
    cmd = [*PFS, "cp", src, dst, "--max-ops-per-second", "20", "--workers", "2"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc = subprocess.Popen(cmd, env=env, text=True, start_new_session=True, **pipes)
    deadline = time.monotonic() + 120
    while not any(dst.glob(".pfs-journal-*")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(1)
    assert proc.poll() is None, "the copy ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert err.splitlines() == ["pfs: interrupted"], err
    assert any(dst.glob(".pfs-journal-*"))  # kept for --resume


def test_incomplete_manifests_advice_and_one_line_warning(tmp_path):
    src, m = _tree(tmp_path), tmp_path / "m"
    run_pfs("scan", src, "-o", m, *FAST, check=True)
    (m / "_manifest.json").unlink()
    for cmd in (["info", m], ["du", m, *FAST]):
        refused = run_pfs(*cmd)
        assert refused.returncode == 2 and "pfs query --allow-incomplete" in refused.stderr
        assert "pass --allow-incomplete" not in refused.stderr
    read = run_pfs("query", m, "--allow-incomplete", "--select", "path")
    assert read.returncode == 0 and "d/e/c.txt" in read.stdout
    assert read.stderr.splitlines() == [
        f"pfs: warning: {m}: incomplete manifest (no completion marker): the rows written so far"
    ]


def test_diff_refuses_missing_checksums_and_a_missing_output_directory(tmp_path):
    src, m = _tree(tmp_path), tmp_path / "m"
    run_pfs("scan", src, "-o", m, *FAST, check=True)
    sums = run_pfs("diff", m, src, "--checksum", "sha256", *FAST)
    assert sums.returncode == 2 and "has no sha256 checksums" in sums.stderr
    nowhere = tmp_path / "nonexistent/dir/x.parquet"
    refused = run_pfs("diff", m, src, "-o", nowhere, *FAST)
    assert refused.returncode == 2 and "does not exist" in refused.stderr
    assert not nowhere.parent.exists()
    (src / "new.txt").write_text("n")
    changed = json.loads(run_pfs("diff", m, src, "--json", *FAST).stdout)
    assert changed["counts"]["added"] == 1 and changed["new"] == str(src) and "pfs-diff-" not in json.dumps(changed)


def test_verify_json_reports_the_report_path_as_text_mode_does(tmp_path):
    src = _tree(tmp_path)
    dst = make_tree(tmp_path / "dst", {"a.txt": "a" * 10, "d/b.txt": "B" * 20, "d/e/c.txt": "c" * 30})
    report = tmp_path / "r.parquet"
    data = json.loads(run_pfs("verify", src, dst, "--report", report, "--json", *FAST).stdout)
    assert data["report"] == str(report) == data["log"] and report.exists()
    text = run_pfs("verify", src, dst, *FAST)
    assert text.returncode == 1 and "report: " in text.stdout


def test_du_json_limit_depth_order_and_piped_query(tmp_path):
    src = make_tree(tmp_path / "src", {"a/b/c/d/e/f/g/h/i/j/k.txt": "k", "big.bin": "x" * 5000})
    long_name = "n" * 150 + ".txt"
    (src / long_name).write_text("y")
    bad = os.fsencode(src) + b"/bad\xffname.txt"
    with open(bad, "wb") as f:
        f.write(b"z")
    m = tmp_path / "m"
    run_pfs("scan", src, "-o", m, *FAST, check=True)
    du = json.loads(run_pfs("du", m, "--by", "depth", "--json", "--limit", "3").stdout)
    assert [g["key"] for g in du["groups"]] == [1, 2, 3] and du["more_groups"] == 8
    text = run_pfs("du", m, "--by", "depth", "--limit", "0").stdout
    depths = [line.split("\t")[0] for line in text.splitlines()[2:] if line and not line.startswith("total")]
    assert depths == [str(d) for d in range(1, 12)]
    piped = run_pfs("query", m, "--select", "path")
    assert long_name in piped.stdout.splitlines()  # whole values, one per line
    rows = json.loads(run_pfs("query", m, "--format", "json", "--where", "path_raw IS NOT NULL").stdout)
    (row,) = rows
    assert base64.b64decode(row["path_raw"]) == b"bad\xffname.txt"


def test_scan_into_itself_leaves_its_output_out(tmp_path):
    src = _tree(tmp_path)
    scanned = run_pfs("scan", src, "-o", src / "inside", *FAST)
    assert scanned.returncode == 0, scanned.stderr
    paths = run_pfs("query", src / "inside", "--select", "path").stdout.splitlines()[1:]
    assert sorted(paths) == ["a.txt", "d", "d/b.txt", "d/e", "d/e/c.txt"]


def test_rm_home_refuses_first_and_distinct_is_named(tmp_path):
    home = make_tree(tmp_path / "home", {"keep.txt": "k"})
    refused = run_pfs("rm", home, "-y", env={"HOME": str(home)})
    assert refused.returncode == 2 and (home / "keep.txt").exists()
    assert refused.stderr.splitlines() == [
        f"pfs: error: refusing to remove {home}: it is (or holds) your home directory (pass --force to remove "
        "it anyway)"
    ]
    m = tmp_path / "m"
    run_pfs("scan", _tree(tmp_path), "-o", m, *FAST, check=True)
    distinct = run_pfs("query", m, "--select", "DISTINCT type")
    assert distinct.returncode == 2 and "DISTINCT is not allowed" in distinct.stderr


def test_verbosity_and_the_dashboard_link(tmp_path):
    src = _tree(tmp_path)
    loud = run_pfs("-v", "cp", src, tmp_path / "v", *FAST, env={"PFS_DASHBOARD": "1"})
    assert loud.returncode == 0, loud.stderr
    assert any(line.startswith("dashboard: http") for line in loud.stderr.splitlines())
    chunks = [line for line in loud.stderr.splitlines() if line.startswith("pfs: copy ") and "files " in line]
    assert chunks, loud.stderr  # -v: a line per finished chunk
    quiet = run_pfs("-q", "cp", src, tmp_path / "q", *FAST, env={"PFS_DASHBOARD": "1"})
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout.startswith("copied ")


def test_sync_ignore_existing_copies_only_what_is_missing(tmp_path):
    src = _tree(tmp_path)
    dst = make_tree(tmp_path / "dst", {"a.txt": "mine"})
    done = run_pfs("sync", src, dst, "--ignore-existing", *FAST, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert "1 changed (left: --ignore-existing)" in done.stdout
    assert (dst / "a.txt").read_text() == "mine" and (dst / "d/e/c.txt").read_text() == "c" * 30


def _ask_on_a_terminal(args: list, answer: bytes) -> tuple[str, bytes, int]:
    """Run ``pfs ARGS`` with stdin and stderr on a pseudo-terminal (so it asks), answer its question;
    return (what it printed up to the question, what it printed in the 2 s after it, exit code)."""
    import pty
    import select

    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PFS_DASHBOARD": "0"}
    proc = subprocess.Popen([*PFS, *map(str, args)], stdin=slave, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    seen, deadline = b"", time.monotonic() + 180
    while b"[y/N]" not in seen and time.monotonic() < deadline and proc.poll() is None:
        if select.select([master], [], [], 0.5)[0]:
            seen += os.read(master, 65536)
    after, quiet_until = b"", time.monotonic() + 2
    while time.monotonic() < quiet_until:
        if select.select([master], [], [], 0.2)[0]:
            after += os.read(master, 65536)
    os.write(master, answer)
    code = proc.wait(timeout=120)
    os.close(master)
    return seen.decode(errors="replace"), after, code


def test_rm_questions_show_counts_and_y_n_with_nothing_redrawn_under_them(tmp_path):
    src, m = _tree(tmp_path), tmp_path / "m"
    run_pfs("scan", src, "-o", m, *FAST, check=True)
    asked, after, code = _ask_on_a_terminal(["rm", "--manifest", m, "--where", "type = 'file'", *FAST], b"n\n")
    assert f"Remove 3 entries (60 B) and 0 directories under {src}? [y/N]" in asked
    assert after == b"" and code == 2  # no spinner frame under the question; "no" removes nothing
    assert (src / "a.txt").exists() and (src / "d/e/c.txt").exists()
    asked, after, code = _ask_on_a_terminal(["rm", src, *FAST], b"n\n")
    assert f"Remove {src} and everything below it (3 files and links, 2 directories, 60 B)? [y/N]" in asked
    assert after == b"" and code == 2 and (src / "d/e/c.txt").exists()


def test_demo_uses_a_private_directory(tmp_path):
    import stat

    import pytest

    from dask_pfs.demo import demo_dir

    made = Path(demo_dir(None))
    try:
        assert stat.S_IMODE(made.stat().st_mode) == 0o700 and made.name.startswith("pfs-demo-")
        assert demo_dir(None) != str(made)  # a new one each time: no fixed name to plant things under
    finally:
        made.rmdir()
    planted = tmp_path / "shared"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)  # another user's /tmp/pfs-demo would be like this, or a symlink
    with pytest.raises(PermissionError, match="writable by others"):
        demo_dir(str(planted))
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(PermissionError, match="symlink"):
        demo_dir(str(tmp_path / "link"))
    mine = Path(demo_dir(str(tmp_path / "mine")))
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    makefile = (REPO / "Makefile").read_text()
    assert "/tmp/pfs-demo" not in makefile
