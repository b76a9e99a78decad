"""Resume: a `pfs cp` driver SIGKILLed mid-copy, then `--resume` finishes only what is left."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import time

from operators.copy import TEMP_MARK
from operators.journal import Journal
from tests.conftest import PFS, REPO, make_balanced, run_pfs, tree_digest

MiB = 1 << 20


def journal_lines(dst) -> int:
    files = glob.glob(os.path.join(dst, ".pfs-journal-*", "done.jsonl"))
    if not files:
        return 0
    with open(files[0], "rb") as f:
        return f.read().count(b"\n")


def test_journal_survives_torn_lines_and_restarts(tmp_path):
    j = Journal(str(tmp_path / "j"))
    j.start({"token": "abc"})
    j.record("c0", files=2)
    j.record("b1.r0")
    j.close()
    with open(tmp_path / "j" / "done.jsonl", "ab") as f:
        f.write(b'{"id": "c9", "fi')  # a SIGKILL in the middle of a write
    again = Journal(str(tmp_path / "j"))
    assert again.job() == {"token": "abc"} and set(again.done()) == {"c0", "b1.r0"}
    again.start({"token": "new"})
    assert again.done() == {} and again.job()["token"] == "new"
    again.remove()
    assert not (tmp_path / "j").exists()


def test_cp_driver_killed_then_resume_completes(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_balanced(src, dirs=12, files_per_dir=30, size=2000)
    (src / "big.bin").write_bytes(os.urandom(6 * MiB))
    args = ["cp", f"{src}/", str(dst), "--chunk-files", "2", "--split-size", "128K", "--workers", "1", "--json"]
    proc = subprocess.Popen(
        PFS + args,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the driver and its LocalCluster: killed together, like a lost client
    )
    seen = 0
    deadline = time.monotonic() + 240
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            seen = journal_lines(dst)
            if seen >= 20:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"the copy finished before it could be killed: {proc.stderr.read()[-2000:]}"
        assert seen >= 20, "no chunks journaled in time"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert tree_digest(dst) != tree_digest(src)  # really interrupted
    journal = glob.glob(os.path.join(dst, ".pfs-journal-*"))
    assert len(journal) == 1 and os.path.exists(os.path.join(journal[0], "manifest", "_manifest.json"))
    done = Journal(journal[0]).done()
    assert len(done) >= seen

    resumed = run_pfs(*args, "--resume", check=True)
    summary = json.loads(resumed.stdout)
    assert summary["exit_code"] == 0
    assert summary["resumed"] >= len(done)  # the journaled chunks and ranges were not done again
    assert "scan" not in summary["phases"]  # the interrupted run's manifest was reused
    total_items = 12 * 30 // 2 + 6 * MiB // (128 * 1024)
    assert summary["resumed"] + summary["counts"]["files"] // 2 <= total_items + 1
    assert not glob.glob(os.path.join(dst, ".pfs-journal-*"))  # deleted after a clean finish
    assert tree_digest(dst) == tree_digest(src)
    assert not [n for _, ds, fs in os.walk(os.fsencode(dst)) for n in ds + fs if TEMP_MARK in n]
