"""Time an auto-tuned ``pfs scan`` of TREE on a running LocalCluster, caches dropped first.

Prints the entry rate and where each worker's concurrency controller settled, with its
history (limit, measured jobs/s, mean job latency) so the climb can be read.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

from distributed import Client, LocalCluster

from dask_pfs.scan.api import scan
from operators.core import concurrency


def history() -> list:
    return list(concurrency.controller().history)


def main(tree: str, out: str) -> None:
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=4, processes=True, dashboard_address=":0", silence_logs=logging.ERROR
        ) as cluster,
        Client(cluster) as client,
    ):
        warm = os.path.join(out + "-warm")
        scan(os.path.dirname(os.path.abspath(__file__)), warm, client, overwrite=True)  # imports on workers
        cold = "remount"
        nas = os.environ.get("NAS_SH", "/work/shared/nas/nas.sh")
        if subprocess.run([nas, "remount"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
            cold = "drop_caches"  # the mount is busy (another session): drop the kernel caches instead
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            time.sleep(2)
        t = time.monotonic()
        result = scan(tree, out, client, overwrite=True)
        wall = time.monotonic() - t
        n = result.counts["entries"]
        print(
            f"pfs scan entries={n} seconds={wall:.2f} entries_per_s={n / wall:.0f} tasks={result.tasks} "
            f"concurrency={json.dumps(result.concurrency)} caches={cold}"
        )
        for worker, rows in client.run(history).items():
            print(f"  {worker}: " + " ".join(f"{lim}:{rate:.0f}/s" for _, lim, rate, _, _ in rows[-24:]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
