#!/usr/bin/env python3
"""How many requests a tool really has in flight on a FUSE mount: its threads waiting on a FUSE answer.

    benchmarks/probe/fuse_inflight.py PATTERN_FILE [PERIOD_S]

Waits for a process whose command line matches the regular expression in PATTERN_FILE (in a file, so this
script's own command line never matches), then every PERIOD_S (0.2) reads the kernel wait channel of every
thread of that process and its descendants (``/proc/PID/task/TID/wchan``) until it exits, and prints one
line: its command, the mean and peak count of threads in ``request_wait_answer`` (a synchronous FUSE
request sent, its answer not yet back) and the most common wait channels.  Run it in a loop beside a
benchmark to give each run its line.

Why: a tool's own figure (``--threads``, a probe's ``-t``) is not what reaches the server.  On the gluster
harness at 1 ms (RESULTS.md, "Network: gluster and latfs"), ``pstat -R -t 64`` had 7 requests waiting on
average (its other threads waited in ``fuse_lock_inode``: lookups in one directory are serialized when
the FUSE server does not enable parallel directory operations), while ``pfs rm --threads 32`` on its two
workers and ``prm.py -j 64`` had the same 42.  Reads that miss the page cache wait in
``folio_wait_bit_common`` on asynchronous readahead requests, which this does not count.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import time


def processes(pattern: re.Pattern[str]) -> tuple[dict[int, int], dict[int, str]]:
    """Parent of every process, and the command lines of those matching ``pattern`` (never this one)."""
    parent, match = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            parent[int(pid)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if pattern.search(cmd):
            match[int(pid)] = cmd
    return parent, match


def wait_channels(pids: set[int]) -> collections.Counter[str]:
    out: collections.Counter[str] = collections.Counter()
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                    out[f.read().strip()] += 1
        except OSError:
            continue
    return out


def main() -> None:
    with open(sys.argv[1]) as f:
        pattern = re.compile(f.read().strip())
    period = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
    while True:  # the topmost match (time -> pfs -> workers: the one whose parent does not match)
        parent, match = processes(pattern)
        tops = [p for p in match if parent.get(p) not in match]
        if tops:
            root, cmd = tops[0], match[tops[0]]
            break
        time.sleep(0.1)
    t0, series, hist = time.monotonic(), [], collections.Counter()
    while os.path.exists(f"/proc/{root}"):
        parent, _ = processes(pattern)
        tree, grew = {root}, True
        while grew:
            new = {p for p, pp in parent.items() if pp in tree and p not in tree}
            tree |= new
            grew = bool(new)
        waits = wait_channels(tree)
        series.append(waits["request_wait_answer"])
        hist.update(waits)
        time.sleep(period)
    mean = sum(series) / max(len(series), 1)
    print(
        f"{time.strftime('%H:%M:%S')} {time.monotonic() - t0:.1f}s {cmd[:110]} | samples {len(series)} "
        f"fuse-waiting mean {mean:.1f} peak {max(series or [0])} | {hist.most_common(6)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
