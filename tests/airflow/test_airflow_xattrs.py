"""The scan and verify operators' ``xattrs``: passed to the engine only when asked, and the spec the scan
operator makes records attributes when the engine runs it (the real engine on the test cluster)."""

from __future__ import annotations

import os

import pytest


def test_scan_and_verify_operators_pass_xattrs(tmp_path, dask_client):
    from airflow.sdk.exceptions import AirflowException

    from airflow_pfs.operators.scan import PfsScanOperator
    from airflow_pfs.operators.verify import PfsVerifyOperator
    from dask_pfs.manifests.manifest import open_manifest
    from dask_pfs.runtime.progress import NullProgress

    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "f").write_bytes(b"1")
    try:
        os.setxattr(tree / "f", "user.k", b"v")
    except OSError:
        pytest.skip("no user xattrs on the temp file system")
    where = {"path": str(tree), "manifest": str(tmp_path / "m")}
    assert "xattrs" not in PfsScanOperator(task_id="plain", **where).job_spec({}).kwargs  # an older worker takes it
    spec = PfsScanOperator(task_id="attrs", xattrs=True, **where).job_spec({})
    assert spec.kwargs["xattrs"] is True
    spec.call(dask_client, NullProgress())
    m = open_manifest(tmp_path / "m")
    assert m.has_xattrs and m.to_pandas().set_index("path").loc["f", "xattrs"][0]["name"] == "user.k"
    with pytest.raises(AirflowException, match="xattrs must be True or False"):
        PfsScanOperator(task_id="bad", xattrs="yes", **where).job_spec({})
    verify = PfsVerifyOperator(task_id="v", src=str(tree), dst=str(tree), xattrs=True).job_spec({})
    assert verify.kwargs["xattrs"] is True
