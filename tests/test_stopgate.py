"""A stopped job's gate, in one process (``operators.stopgate``, ``dask_pfs.runtime.stopping``): a capped
wait ends at once, the pool's threads see their task's job, and a stopped task returns what it was granted.
The cluster tests are ``tests/test_remote_stop.py``."""

from __future__ import annotations

import threading
import time

import pytest

from dask_pfs.runtime.stopping import TaskStopped, gated
from operators import ratelimit, stopgate
from operators.core.pool import get_pool
from operators.ratelimit import Limits


@pytest.fixture
def capped():
    ratelimit.configure(Limits(ops_per_second=2))
    yield
    ratelimit.configure(None)


def test_a_stop_ends_a_capped_wait_at_once(capped):
    """take_ops(20) at 2 ops/s waits ~10 s; the stop ends it within a fraction of a second, and the task
    returns TaskStopped with the operations granted before (not the refused ones)."""
    out: list = []

    def task() -> str:
        ratelimit.take_ops(1)  # granted at once (the bucket's burst)
        ratelimit.take_ops(20)  # refused by the stop while it waits
        return "finished"

    t = threading.Thread(target=lambda: out.append(gated("job-a", task)))
    t0 = time.monotonic()
    t.start()
    time.sleep(0.3)
    stopgate.stop("job-a")
    t.join(5)
    assert not t.is_alive() and time.monotonic() - t0 < 2.0
    assert out == [TaskStopped("job-a", 1, 0)]
    assert gated("job-a", task) == TaskStopped("job-a")  # a task started after the stop does nothing
    stopgate.forget("job-a")
    assert gated("job-b", lambda: "ran") == "ran"  # another job's tasks are not touched


def test_the_pool_threads_see_their_tasks_job():
    """A batch a task hands to the process's pool is refused as the task's own once its job is stopped;
    uncapped, the stop makes the loop go the paced way (ops_capped) whose take_ops refuses."""

    def batch() -> tuple[bool, bool]:
        return stopgate.requested(), ratelimit.ops_capped()

    def task() -> tuple[bool, bool]:
        return get_pool(4).submit(batch).result()

    assert gated("job-c", task) == (False, False)
    stopgate.stop("job-c")
    try:
        with stopgate.in_job("job-c"):
            assert get_pool(4).submit(batch).result() == (True, True)
            with pytest.raises(stopgate.Stopped):
                get_pool(4).submit(ratelimit.take_ops, 1).result()
        assert get_pool(4).submit(batch).result() == (False, False)  # no job: nothing stopped
    finally:
        stopgate.forget("job-c")
