"""``--cluster kubernetes``: the DaskCluster resource pfs asks the dask-kubernetes operator for.

No API server runs here, so the resource is rendered (``cluster_resource``, the dict ``KubeCluster``
is given) and checked against the operator's own DaskCluster CRD schema and, pod by pod, against the
Kubernetes 1.33 schemas (kubernetes-validate, strict: unknown fields fail).  Starting a cluster
without a reachable API is a clear refusal (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from dask_pfs.clusters.kubernetes import KubernetesOptions, cluster_resource
from tests.conftest import run_pfs

pytest.importorskip("dask_kubernetes")
jsonschema = pytest.importorskip("jsonschema")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

OPTS = KubernetesOptions(
    claim="lustre-scratch",
    mount_path="/lustre/scratch",
    image="registry.example.org/hpc/pfs:0.1.0",
    name="pfs-nightly",
    min_workers=2,
    max_workers=10,
    threads=64,
    cpu="2",
    memory="8Gi",
    run_as_user=4242,
)


@pytest.fixture(scope="module")
def resource() -> dict:
    return cluster_resource(OPTS)


def _crd_schema() -> dict:
    import dask_kubernetes

    chart = Path(dask_kubernetes.__file__).parent / "operator/deployment/helm/dask-kubernetes-operator"
    crd = chart / "crds" / "daskcluster.yaml"
    doc = yaml.safe_load(crd.read_text())
    (version,) = [v for v in doc["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def test_daskcluster_matches_the_operators_crd(resource):
    assert resource["apiVersion"] == "kubernetes.dask.org/v1" and resource["kind"] == "DaskCluster"
    assert resource["metadata"]["name"] == "pfs-nightly"
    jsonschema.validate(resource, _crd_schema())
    bad = {**resource, "spec": {**resource["spec"], "worker": {**resource["spec"]["worker"], "replicas": "two"}}}
    with pytest.raises(jsonschema.ValidationError):  # the check can fail
        jsonschema.validate(bad, _crd_schema())


@pytest.mark.parametrize("role", ["worker", "scheduler"])
def test_pods_are_valid_kubernetes_objects(resource, role):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"x-{role}"}, "spec": resource["spec"][role]["spec"]}
    kubernetes_validate.validate(pod, "1.33.0", strict=True)


def test_workers_mount_the_claim_and_run_pfs_settings(resource):
    worker = resource["spec"]["worker"]
    assert worker["replicas"] == 2  # the minimum; the DaskAutoscaler grows it up to the maximum
    pod = worker["spec"]
    (c,) = pod["containers"]
    assert c["command"] == ["dask"] and c["args"][:5] == ["worker", "--nthreads", "4", "--nworkers", "1"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "lustre-scratch"}} in pod["volumes"]
    assert {"name": "data", "mountPath": "/lustre/scratch"} in c["volumeMounts"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["PFS_THREADS"] == "64" and env["DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED"] == "False"
    assert c["resources"] == {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}
    assert pod["securityContext"]["runAsUser"] == 4242 and c["securityContext"]["readOnlyRootFilesystem"] is True
    sched = resource["spec"]["scheduler"]["spec"]
    assert sched["containers"][0]["args"][0] == "scheduler"
    assert all(v["name"] != "data" for v in sched["volumes"])  # the scheduler never touches the data


def test_options_are_checked():
    for bad in ({"claim": ""}, {"claim": "c", "mount_path": "data"}, {"claim": "c", "min_workers": 5, "max_workers": 2},
                {"claim": "c", "name": "Upper_Case"}):  # fmt: skip
        with pytest.raises(ValueError):
            KubernetesOptions(**bad)
    assert cluster_resource(KubernetesOptions(claim="c"))["metadata"]["name"].startswith("pfs-")


def test_cli_refuses_without_a_claim_or_a_reachable_api(tmp_path):
    proc = run_pfs("scan", tmp_path, "-o", tmp_path / "m", "--cluster", "kubernetes")
    assert proc.returncode == 2 and "--k8s-claim" in proc.stderr
    env = {"KUBECONFIG": str(tmp_path / "no-such-kubeconfig"), "KUBERNETES_SERVICE_HOST": ""}
    proc = run_pfs("scan", tmp_path, "-o", tmp_path / "m", "--cluster", "kubernetes", "--k8s-claim", "c", env=env,
                   timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "could not start a DaskCluster: no Kubernetes API" in proc.stderr
    assert "Traceback" not in proc.stderr  # nothing left for dask-kubernetes' exit hook to close
    assert not os.path.exists(tmp_path / "m" / "_manifest.json")
