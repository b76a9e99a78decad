"""The operators' names for existing destination files: ``update``, ``ignore_existing``, and the
deprecated ``skip_existing`` (= ``update``), as the engine receives them."""

from __future__ import annotations

import pytest


def test_copy_operator_update_ignore_existing_and_the_old_name(tmp_path):
    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.operators.copy import PfsCopyOperator

    where = {"src": str(tmp_path / "a"), "dst": str(tmp_path / "b")}
    spec = PfsCopyOperator(task_id="ignore", ignore_existing=True, **where).job_spec({})
    assert spec.kwargs["ignore_existing"] is True and spec.kwargs["update"] is False
    assert "skip_existing" not in spec.kwargs
    with pytest.warns(DeprecationWarning, match="use update"):
        old = PfsCopyOperator(task_id="old", skip_existing=True, **where)
    assert old.job_spec({}).kwargs["update"] is True
    with pytest.raises(AirflowException, match="update and ignore_existing exclude each other"):
        PfsCopyOperator(task_id="both", update=True, ignore_existing=True, **where).job_spec({})


def test_sync_operator_ignore_existing_and_the_old_name(tmp_path):
    from airflow_pfs.operators.sync import PfsSyncOperator

    where = {"src": str(tmp_path / "a"), "dst": str(tmp_path / "b")}
    assert PfsSyncOperator(task_id="default", **where).job_spec({}).kwargs["ignore_existing"] is False
    assert PfsSyncOperator(task_id="ignore", ignore_existing=True, **where).job_spec({}).kwargs["ignore_existing"]
    with pytest.warns(DeprecationWarning, match="use update"):
        old = PfsSyncOperator(task_id="old", skip_existing=False, **where)
    assert old.job_spec({}).kwargs["ignore_existing"] is True  # update=False: changed files stay
