"""The Helm chart charts/pfs, checked with a real helm binary and offline Kubernetes schemas.

Each values file in charts/pfs/ci is rendered once per module (helm template costs ~0.1 s); assertions then
run on the parsed objects. `kubernetes-validate` checks every rendered object against the Kubernetes 1.33
OpenAPI schemas, and bad values must be rejected by values.schema.json with a message naming the key.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

pytestmark = pytest.mark.helm

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "pfs"
CI = CHART / "ci"
KUBE_VERSION = "1.33.0"
NAMESPACE = "pfs"
# values file -> release name (distinct names keep the objects apart in one validation run)
CASES = {"default-values": "dflt", "pvc-values": "rel", "hostpath-values": "hpc"}


def find_helm() -> str | None:
    found = os.environ.get("HELM") or shutil.which("helm")
    if found:
        return found
    go = shutil.which("go")
    if go:
        gopath = subprocess.run([go, "env", "GOPATH"], capture_output=True, text=True).stdout.strip()
        cand = Path(gopath, "bin", "helm")
        if gopath and cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return None


@pytest.fixture(scope="module")
def helm() -> str:
    path = find_helm()
    if path is None:
        pytest.skip("helm not found (run scripts/ensure-helm.sh)")
    return path


def run_helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def template_args(release: str, chart: Path = CHART, *extra: str) -> list[str]:
    return ["template", release, str(chart), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION, *extra]


def render(helm: str, release: str, *extra: str, chart: Path = CHART) -> str:
    return run_helm(helm, *template_args(release, chart, *extra)).stdout


def parse(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.fixture(scope="module")
def rendered_text(helm: str) -> dict[str, str]:
    return {name: render(helm, rel, "-f", str(CI / f"{name}.yaml")) for name, rel in CASES.items()}


@pytest.fixture(scope="module")
def rendered(rendered_text: dict[str, str]) -> dict[str, list[dict]]:
    return {name: parse(text) for name, text in rendered_text.items()}


def get(objs: list[dict], kind: str, name_suffix: str) -> dict:
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    assert len(hits) == 1, f"expected one {kind} *{name_suffix}, got {[o['metadata']['name'] for o in hits]}"
    return hits[0]


def kinds(objs: list[dict]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def container(obj: dict) -> dict:
    (c,) = pod_spec(obj)["containers"]
    return c


def env_of(c: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def mounts_of(c: dict) -> dict[str, dict]:
    return {m["mountPath"]: m for m in c.get("volumeMounts", [])}


def volumes_of(obj: dict) -> dict[str, dict]:
    return {v["name"]: v for v in pod_spec(obj).get("volumes", [])}


def workloads(objs: list[dict]) -> list[dict]:
    return [o for o in objs if o["kind"] in ("Deployment", "Job")]


# --- lint and schema validation of the output ---


def test_lint_strict(helm: str) -> None:
    run_helm(helm, "lint", "--strict", str(CHART))
    for name in CASES:
        out = run_helm(helm, "lint", "--strict", str(CHART), "-f", str(CI / f"{name}.yaml")).stdout
        assert "0 chart(s) failed" in out, out


def test_rendered_objects_match_kubernetes_schemas(rendered_text: dict[str, str]) -> None:
    validator = Path(sys.executable).with_name("kubernetes-validate")
    cmd = [str(validator)] if validator.exists() else [sys.executable, "-m", "kubernetes_validate"]
    stream = "\n---\n".join(rendered_text.values())
    proc = subprocess.run(
        [*cmd, "--strict", "-k", KUBE_VERSION, "-"], input=stream, capture_output=True, text=True, timeout=120
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    n_objects = sum(len(parse(t)) for t in rendered_text.values())
    assert out.count("passed for resource") == n_objects, out


# --- defaults ---


def test_defaults_render_scheduler_and_workers_only(rendered: dict[str, list[dict]]) -> None:
    objs = rendered["default-values"]
    assert {k for k, _ in kinds(objs)} == {"ServiceAccount", "Service", "Deployment"}
    svc = get(objs, "Service", "-scheduler")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"scheduler": 8786, "dashboard": 8787}
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "scheduler"

    sched = get(objs, "Deployment", "-scheduler")
    assert sched["spec"]["replicas"] == 1
    c = container(sched)
    assert c["command"] == ["dask"]
    assert c["args"][:5] == ["scheduler", "--port", "8786", "--dashboard-address", ":8787"]

    worker = get(objs, "Deployment", "-worker")
    assert worker["spec"]["replicas"] == 2
    c = container(worker)
    assert c["command"] == ["dask"]
    args = c["args"]
    assert args[:2] == ["worker", "tcp://dflt-pfs-scheduler:8786"]
    assert args[args.index("--nthreads") + 1] == "4"
    assert args[args.index("--nworkers") + 1] == "1"
    assert "--memory-limit" not in args
    assert env_of(c)["PFS_THREADS"] == "64"
    assert env_of(c)["DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED"] == "False"  # see dask_pfs/cluster.py
    assert "shared" not in volumes_of(worker)
    assert c["image"] == "ghcr.io/pfs/pfs:0.1.0"


def test_every_pod_is_locked_down(rendered: dict[str, list[dict]]) -> None:
    for name, objs in rendered.items():
        for obj in workloads(objs):
            where = f"{name}: {obj['kind']}/{obj['metadata']['name']}"
            spec = pod_spec(obj)
            assert spec["securityContext"]["runAsNonRoot"] is True, where
            assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert "fsGroup" not in spec["securityContext"], where  # no recursive chown of the shared FS
            assert spec["automountServiceAccountToken"] is False, where
            vols = volumes_of(obj)
            for c in spec["containers"]:
                sc = c["securityContext"]
                assert sc["readOnlyRootFilesystem"] is True, where
                assert sc["allowPrivilegeEscalation"] is False, where
                assert sc["capabilities"]["drop"] == ["ALL"], where
                mounts = mounts_of(c)
                assert "emptyDir" in vols[mounts["/tmp"]["name"]], where
                assert "emptyDir" in vols[mounts["/dask-local"]["name"]], where
                assert env_of(c)["DASK_TEMPORARY_DIRECTORY"] == "/dask-local", where


# --- Lustre through a PVC, Job, NetworkPolicy, Airflow JSON connection ---


def test_pvc_workers_mount_the_claim(rendered: dict[str, list[dict]]) -> None:
    objs = rendered["pvc-values"]
    worker = get(objs, "Deployment", "-worker")
    spec = pod_spec(worker)
    assert worker["spec"]["replicas"] == 8
    assert volumes_of(worker)["shared"]["persistentVolumeClaim"] == {
        "claimName": "lustre-scratch",
        "readOnly": False,
    }
    c = container(worker)
    assert mounts_of(c)["/lustre/scratch"] == {
        "name": "shared",
        "mountPath": "/lustre/scratch",
        "readOnly": False,
    }
    args = c["args"]
    assert args[args.index("--nthreads") + 1] == "4"
    assert args[args.index("--memory-limit") + 1] == "6GiB"
    assert env_of(c)["PFS_THREADS"] == "128"
    assert c["image"] == "registry.example.org/hpc/pfs:0.1.0"
    assert c["imagePullPolicy"] == "Always"
    assert c["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["nodeSelector"] == {"lustre.example.org/client": "true"}
    assert spec["tolerations"][0]["key"] == "hpc"
    assert "podAntiAffinity" in spec["affinity"]
    # The scheduler never touches the file system.
    sched = get(objs, "Deployment", "-scheduler")
    assert "shared" not in volumes_of(sched)
    assert "nodeSelector" not in pod_spec(sched)


def test_pvc_job_runs_pfs_against_the_scheduler(rendered: dict[str, list[dict]]) -> None:
    job = get(rendered["pvc-values"], "Job", "-job-1")
    spec = pod_spec(job)
    assert spec["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] == 86400
    c = container(job)
    assert c["command"] == ["pfs"]
    assert c["args"] == [
        "scan",
        "/lustre/scratch/project",
        "-o",
        "/lustre/scratch/.pfs/manifests/project",
        "--no-progress",
    ]
    env = env_of(c)
    assert env["PFS_SCHEDULER"] == "tcp://rel-pfs-scheduler:8786"
    assert env["DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"] == "300s"
    assert "/lustre/scratch" in mounts_of(c)
    assert volumes_of(job)["shared"]["persistentVolumeClaim"]["claimName"] == "lustre-scratch"
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "job"


def test_pvc_network_policy(rendered: dict[str, list[dict]]) -> None:
    objs = rendered["pvc-values"]
    pol = get(objs, "NetworkPolicy", "-scheduler")
    assert pol["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "scheduler"
    assert pol["spec"]["policyTypes"] == ["Ingress"]
    dask_rule, dash_rule = pol["spec"]["ingress"]
    assert dask_rule["ports"] == [{"port": 8786, "protocol": "TCP"}]
    own, extra = dask_rule["from"]
    assert own["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "rel"
    (expr,) = own["podSelector"]["matchExpressions"]
    assert expr["key"] == "app.kubernetes.io/component" and sorted(expr["values"]) == [
        "job",
        "jupyter",
        "worker",
    ]
    assert extra["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "airflow"}
    assert dash_rule["ports"] == [{"port": 8787, "protocol": "TCP"}]
    dash_ns = dash_rule["from"][0]["namespaceSelector"]["matchLabels"]
    assert dash_ns == {"kubernetes.io/metadata.name": "monitoring"}
    # The selected pods carry the labels the policy matches on.
    for suffix, comp in (("-worker", "worker"), ("-job-1", "job")):
        kind = "Job" if comp == "job" else "Deployment"
        labels = get(objs, kind, suffix)["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] == comp and labels["app.kubernetes.io/instance"] == "rel"
    wpol = get(objs, "NetworkPolicy", "-worker")
    assert wpol["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"
    assert len(wpol["spec"]["ingress"][0]["from"]) == 2


def test_pvc_airflow_connection_json(rendered: dict[str, list[dict]]) -> None:
    secret = get(rendered["pvc-values"], "Secret", "-airflow-connection")
    (key,) = secret["stringData"]
    assert key == "AIRFLOW_CONN_PFS_DASK_DEFAULT"
    conn = json.loads(secret["stringData"][key])
    assert conn == {
        "conn_type": "pfs_dask",
        "host": "rel-pfs-scheduler.pfs.svc.cluster.local",
        "port": 8786,
        "extra": {"threads": 128},
    }


# --- hostPath, read-only, Jupyter, Airflow URI connection ---


def test_hostpath_read_only_mount(rendered: dict[str, list[dict]]) -> None:
    objs = rendered["hostpath-values"]
    worker = get(objs, "Deployment", "hpc-pfs-worker")
    assert volumes_of(worker)["shared"]["hostPath"] == {"path": "/lustre", "type": "Directory"}
    c = container(worker)
    assert mounts_of(c)["/lustre"]["readOnly"] is True
    assert c["args"][c["args"].index("--nthreads") + 1] == "2"
    assert "--no-nanny" in c["args"]
    env = env_of(c)
    assert env["PFS_THREADS"] == "32" and env["EXTRA"] == "1"
    assert volumes_of(worker)["tmp"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "512Mi"}
    assert pod_spec(worker)["securityContext"]["runAsUser"] == 12345


def test_hostpath_jupyter(rendered: dict[str, list[dict]]) -> None:
    objs = rendered["hostpath-values"]
    dep = get(objs, "Deployment", "hpc-pfs-jupyter")
    c = container(dep)
    assert c["image"] == "ghcr.io/pfs/pfs-jupyter:0.1.0"
    assert c["command"] == ["jupyter"] and c["args"][0] == "lab"
    assert "--ServerApp.root_dir=/lustre" in c["args"]
    assert env_of(c)["PFS_SCHEDULER"] == "tcp://hpc-pfs-scheduler:8786"
    token_ref = next(e for e in c["env"] if e["name"] == "JUPYTER_TOKEN")["valueFrom"]["secretKeyRef"]
    secret = get(objs, "Secret", "hpc-pfs-jupyter")
    assert token_ref == {"name": "hpc-pfs-jupyter", "key": "token"}
    assert base64.b64decode(secret["data"]["token"]).decode() == "not-a-secret-token"
    assert mounts_of(c)["/lustre"]["readOnly"] is True
    svc = get(objs, "Service", "hpc-pfs-jupyter")
    assert svc["spec"]["ports"][0]["port"] == 8888
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "jupyter"
    assert not [o for o in objs if o["kind"] in ("Job", "NetworkPolicy")]


def test_hostpath_airflow_connection_uri(rendered: dict[str, list[dict]]) -> None:
    secret = get(rendered["hostpath-values"], "Secret", "-airflow-connection")
    uri = secret["stringData"]["AIRFLOW_CONN_LUSTRE_PFS"]
    parts = urlsplit(uri)
    assert parts.scheme == "pfs-dask"  # Airflow turns '-' into '_': conn_type pfs_dask
    assert (parts.hostname, parts.port) == ("hpc-pfs-scheduler.pfs.svc.cluster.local", 8786)
    assert parse_qs(parts.query) == {"threads": ["32"], "manifest_root": ["/lustre/.pfs/manifests"]}


# --- overrides that need their own render ---


def test_port_and_generated_jupyter_token(helm: str) -> None:
    objs = parse(
        render(
            helm,
            "x",
            "--set",
            "scheduler.service.port=9786",
            "--set",
            "jupyter.enabled=true",
            "--set",
            "job.enabled=true",
            "--set",
            "job.ttlSecondsAfterFinished=null",
        )
    )
    worker = container(get(objs, "Deployment", "-worker"))
    assert worker["args"][1] == "tcp://x-pfs-scheduler:9786"
    job = get(objs, "Job", "-job-1")
    assert env_of(container(job))["PFS_SCHEDULER"] == "tcp://x-pfs-scheduler:9786"
    assert "ttlSecondsAfterFinished" not in job["spec"]
    token = base64.b64decode(get(objs, "Secret", "-jupyter")["data"]["token"]).decode()
    assert len(token) == 32 and token.isalnum()
    assert "shared" not in volumes_of(get(objs, "Deployment", "-jupyter"))


@pytest.fixture(scope="module")
def notes_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart with a ConfigMap carrying NOTES.txt's text (helm template skips NOTES)."""
    chart = tmp_path_factory.mktemp("chart") / "pfs"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "notes-check.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
        '  notes: {{ include "pfs.notes" . | toJson }}\n'
    )
    return chart


@pytest.mark.parametrize("case", ["default-values", "pvc-values", "hostpath-values"])
def test_notes_explain_how_to_connect(helm: str, notes_chart: Path, case: str) -> None:
    out = render(
        helm,
        CASES[case],
        "-f",
        str(CI / f"{case}.yaml"),
        "--show-only",
        "templates/notes-check.yaml",
        chart=notes_chart,
    )
    notes = yaml.safe_load(out)["data"]["notes"]
    assert "kubectl --namespace pfs port-forward svc/" in notes
    assert "pfs info --scheduler tcp://localhost:8786" in notes
    if case == "default-values":
        assert "WARNING: sharedStorage.enabled is false" in notes
    if case == "pvc-values":
        assert "AIRFLOW_CONN_PFS_DASK_DEFAULT" in notes and "logs -f job/rel-pfs-job-1" in notes
    if case == "hostpath-values":
        assert "read-only" in notes and "hpc-pfs-jupyter" in notes and 'conn_id="lustre_pfs"' in notes


# --- values rejected by values.schema.json ---

BAD_VALUES = {
    "replicas-as-string": (["--set-string", "worker.replicas=3"], ["/worker/replicas", "want integer"]),
    "claim-missing": (["--set", "sharedStorage.enabled=true"], ["/sharedStorage/existingClaim"]),
    "hostpath-missing": (
        ["--set", "sharedStorage.enabled=true", "--set", "sharedStorage.type=hostPath"],
        ["/sharedStorage/hostPath"],
    ),
    "hostpath-relative": (
        [
            "--set",
            "sharedStorage.enabled=true",
            "--set",
            "sharedStorage.type=hostPath",
            "--set",
            "sharedStorage.hostPath=lustre",
        ],
        ["/sharedStorage/hostPath", "^/"],
    ),
    "unknown-storage-type": (["--set", "sharedStorage.type=nfs"], ["/sharedStorage/type", "existingClaim"]),
    "typo-key": (["--set", "worker.replica=3"], ["additional properties 'replica' not allowed"]),
    "zero-threads": (["--set", "worker.threads=0"], ["/worker/threads"]),
    "pfs-threads-string": (["--set-string", "worker.pfsThreads=many"], ["/worker/pfsThreads"]),
    "bad-conn-id": (["--set", "airflowConnection.connId=pfs-dask"], ["/airflowConnection/connId"]),
    "bad-pull-policy": (["--set", "image.pullPolicy=Sometimes"], ["/image/pullPolicy"]),
    "job-without-args": (["--set", "job.enabled=true", "--set-json", "job.args=[]"], ["/job/args"]),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_schema_rejects_bad_values(helm: str, case: str) -> None:
    args, needles = BAD_VALUES[case]
    proc = run_helm(helm, *template_args("bad", CHART, *args), check=False)
    assert proc.returncode != 0, f"{case} rendered:\n{proc.stdout[:500]}"
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
