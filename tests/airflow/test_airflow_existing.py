"""The operators' names for existing destination files: ``update``, ``ignore_existing``, and the
deprecated ``skip_existing`` (= ``update``), as the engine receives them; the other options of the copy
engine and the names the operators share with the Python API."""

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


def test_copy_and_sync_operators_pass_xattrs_and_keep_owner(tmp_path):
    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.operators.copy import PfsCopyOperator
    from airflow_pfs.operators.sync import PfsSyncOperator

    where = {"src": str(tmp_path / "a"), "dst": str(tmp_path / "b")}
    for cls in (PfsCopyOperator, PfsSyncOperator):
        default = cls(task_id="d", **where)
        assert (default.job_spec({}).kwargs["xattrs"], default.job_spec({}).kwargs["owner"]) == (True, None)
        off = cls(task_id="off", xattrs=False, keep_owner=False, **where)
        assert (off.job_spec({}).kwargs["xattrs"], off.job_spec({}).kwargs["owner"]) == (False, False)
        assert off.owner == "airflow"  # Airflow's own task owner is untouched
        with pytest.raises(AirflowException, match="keep_owner must be"):
            cls(task_id="bad", keep_owner="yes", **where).job_spec({})


def test_copy_operator_takes_every_option_of_the_copy_engine(tmp_path):
    """``dask_pfs.options`` defines copy's options once: the operator accepts each by its Airflow name and passes
    it on, so an option added there needs no edit here."""
    from airflow_pfs.operators.copy import PfsCopyOperator
    from dask_pfs.options import of_job

    where = {"src": str(tmp_path / "a"), "dst": str(tmp_path / "b"), "manifest": str(tmp_path / "m")}
    given = {}
    for o in of_job("copy"):
        if o.airflow_name is None or o.name in where:
            continue
        if o.annotation.startswith("bool"):
            given[o.airflow_name] = o.name == "update" or (o.name not in ("overwrite", "ignore_existing")
                                                           and not o.default)  # fmt: skip
        else:
            given[o.airflow_name] = str(tmp_path / o.name) if o.name in ("manifest_out", "log") else 7
    given["where"] = "size > 1"
    spec = PfsCopyOperator(task_id="all", **where, **given).job_spec({})
    assert [o.name for o in of_job("copy") if o.airflow_name is None] == ["resume"]  # a retry resumes
    for o in of_job("copy"):
        if o.airflow_name is not None and o.name not in where:
            assert str(spec.kwargs[o.name]).strip() == str(given[o.airflow_name]), (o.name, spec.kwargs.get(o.name))
    assert spec.kwargs["owner"] is True and "keep_owner" not in spec.kwargs  # BaseOperator's owner: the task's
    PfsCopyOperator.partial(task_id="mapped", **where, **given)  # dynamic mapping takes them too (the signature)


def test_operators_use_the_engine_names_and_keep_the_old_ones_with_a_warning(tmp_path):
    """The tree a task reads is ``src`` (PfsScanOperator's ``path`` before), the Parquet file of entries that
    failed or differ ``log`` (PfsVerifyOperator's ``report_path`` before), as in the Python API."""
    import warnings

    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.operators.scan import PfsScanOperator
    from airflow_pfs.operators.verify import PfsVerifyOperator

    tree, out = str(tmp_path / "t"), str(tmp_path / "m")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert PfsScanOperator(task_id="new", src=tree, manifest=out).job_spec({}).args == (tree, out)
        spec = PfsVerifyOperator(task_id="v", src=tree, dst=out, log=str(tmp_path / "r")).job_spec({})
        assert spec.kwargs["log"] == str(tmp_path / "r") and "report" not in spec.kwargs
    with pytest.warns(DeprecationWarning, match=r"PfsScanOperator\(path=\.\.\.\) is deprecated: use src="):
        old = PfsScanOperator(task_id="old", path=tree, manifest=out)
    assert old.job_spec({}).args == (tree, out)
    with pytest.warns(DeprecationWarning, match=r"report_path=\.\.\.\) is deprecated: use log="):
        verify_old = PfsVerifyOperator(task_id="vo", src=tree, dst=out, report_path=str(tmp_path / "r"))
    assert verify_old.job_spec({}).kwargs["log"] == str(tmp_path / "r")
    with pytest.raises(AirflowException, match="give src \\(or its old name path\\), not both"):
        PfsScanOperator(task_id="both", src=tree, path=tree, manifest=out)


def test_sync_operator_takes_the_options_sync_shares_with_copy(tmp_path):
    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.operators.sync import PfsSyncOperator
    from dask_pfs.options import of_job

    where = {"src": str(tmp_path / "a"), "dst": str(tmp_path / "b")}
    given = {"keep_owner": False, "xattrs": False, "chown": "0:0", "numeric_ids": True, "chunk_files": 9,
             "chunk_bytes": 1 << 20, "split_size": 1 << 22, "allow_other_root": True}  # fmt: skip
    assert set(given) == {o.airflow_name for o in of_job("sync")} - {None, "ignore_existing"}  # all of them
    spec = PfsSyncOperator(task_id="all", **where, **given).job_spec({})
    PfsSyncOperator.partial(task_id="mapped", **where, **given)  # dynamic mapping takes them too (the signature)
    for o in of_job("sync"):
        if o.airflow_name in given:
            assert spec.kwargs[o.name] == given[o.airflow_name], o.name
    with pytest.raises(AirflowException, match="keep_owner must be True, False or None, got 'yes'"):
        PfsSyncOperator(task_id="bad", **where, keep_owner="yes").job_spec({})
