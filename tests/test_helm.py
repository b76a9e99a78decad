"""The Helm chart charts/pfs, checked with a real helm binary and offline Kubernetes schemas.

Each values file in charts/pfs/ci is rendered once per module (helm template costs ~0.1 s); assertions then
run on the parsed objects. `kubernetes-validate` checks every rendered object against the Kubernetes 1.33
OpenAPI schemas, and bad values must be rejected by values.schema.json with a message naming the key.
"""

from __future__ import annotations

import base64
import datetime
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
    """The helm the set-up provides (``scripts/ensure-helm.sh``, run by ``make test``): one that renders
    the chart as the docs print it, not whichever helm happens to be on PATH."""
    if os.environ.get("HELM"):
        return os.environ["HELM"]
    proc = subprocess.run([str(ROOT / "scripts" / "ensure-helm.sh")], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


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


def get_job(objs: list[dict], release: str) -> dict:
    """The one Job; its name is <release>-pfs-job-<hash of its pod template>."""
    (job,) = [o for o in objs if o["kind"] == "Job"]
    assert job["metadata"]["name"].startswith(f"{release}-pfs-job-"), job["metadata"]["name"]
    return job


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


def b64(secret: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def workloads(objs: list[dict]) -> list[dict]:
    return [o for o in objs if o["kind"] in ("Deployment", "Job")]


# --- lint and schema validation of the output ---


def test_lint_strict(helm: str) -> None:
    run_helm(helm, "lint", "--strict", str(CHART))
    for name in CASES:
        out = run_helm(helm, "lint", "--strict", str(CHART), "-f", str(CI / f"{name}.yaml")).stdout
        assert "0 chart(s) failed" in out, out


def test_documented_commands_work_as_printed(helm: str) -> None:
    """docs/deploy.md and the chart README print `helm lint`/`helm template` with no --kube-version: the helm
    the set-up builds must accept the chart's kubeVersion (>=1.25) by default (a plain `go install` of helm
    defaults to Kubernetes v1.20 and refuses it)."""
    run_helm(helm, "lint", "--strict", str(CHART))
    kinds = {obj["kind"] for obj in parse(run_helm(helm, "template", "t", str(CHART)).stdout)}
    assert {"Deployment", "Service"} <= kinds, kinds


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


def test_defaults_render_a_secured_scheduler_and_workers(rendered: dict[str, list[dict]]) -> None:
    objs = rendered["default-values"]
    assert {k for k, _ in kinds(objs)} == {
        "ServiceAccount",
        "Service",
        "Deployment",
        "Secret",
        "NetworkPolicy",
        "PodDisruptionBudget",
    }
    assert {n for k, n in kinds(objs) if k == "Secret"} == {"dflt-pfs-tls", "dflt-pfs-tls-client"}
    svc = get(objs, "Service", "-scheduler")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"scheduler": 8786, "dashboard": 8787}
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "scheduler"

    sched = get(objs, "Deployment", "-scheduler")
    assert sched["spec"]["replicas"] == 1
    c = container(sched)
    assert c["command"] == ["dask"]
    assert c["args"][:5] == ["scheduler", "--port", "8786", "--dashboard-address", ":8787"]
    assert tls_args(c["args"]) == TLS_FILES
    assert env_of(c)["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] == "True"
    # HTTP probes: a TCP probe of the tls:// port would log a failed handshake every time
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "dashboard"}

    worker = get(objs, "Deployment", "-worker")
    assert worker["spec"]["replicas"] == 2
    c = container(worker)
    assert c["command"] == ["dask"]
    args = c["args"]
    assert args[:2] == ["worker", "tls://dflt-pfs-scheduler:8786"]
    assert tls_args(args) == TLS_FILES
    assert args[args.index("--nthreads") + 1] == "4"
    assert args[args.index("--nworkers") + 1] == "1"
    assert "--memory-limit" not in args
    assert "--no-dashboard" in args  # /health and /metrics stay on --dashboard-address; no bokeh import at start
    assert env_of(c)["PFS_THREADS"] == "auto"  # pfs's concurrency controller tunes it (operators.core.concurrency)
    assert env_of(c)["DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED"] == "False"  # see dask_pfs/clusters/client.py
    assert "shared" not in volumes_of(worker)
    assert c["image"] == "ghcr.io/pfs/pfs:0.1.0"


def test_default_image_is_what_make_image_builds(rendered: dict[str, list[dict]]) -> None:
    """`make image` (scripts/build-image.sh) tags the image the chart's pods run by default."""
    made = subprocess.run(
        [str(ROOT / "scripts" / "build-image.sh"), "--print-name"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "IMAGE"},  # the default name, not an override
    )
    assert made.returncode == 0, made.stderr
    for obj in workloads(rendered["default-values"]):
        for c in pod_spec(obj)["containers"]:
            assert c["image"] == made.stdout.strip(), obj["metadata"]["name"]


TLS_FILES = {
    "--tls-ca-file": "/etc/pfs/tls/ca.crt",
    "--tls-cert": "/etc/pfs/tls/tls.crt",
    "--tls-key": "/etc/pfs/tls/tls.key",
}


def tls_args(args: list[str]) -> dict[str, str]:
    return {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--tls-")}


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
                if name == "hostpath-values":  # TLS off there
                    assert "tls" not in vols and "/etc/pfs/tls" not in mounts, where
                    continue
                # every pod holds the CA, its certificate and key, read-only; never the CA's key
                assert mounts["/etc/pfs/tls"] == {"name": "tls", "mountPath": "/etc/pfs/tls", "readOnly": True}
                items = vols["tls"]["secret"]["items"]
                assert sorted(i["key"] for i in items) == ["ca.crt", "tls.crt", "tls.key"], where


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
    assert env_of(c)["XDG_CACHE_HOME"] == "/lustre/scratch/.pfs/cache"  # remote drivers' journals, shared
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
    job = get_job(rendered["pvc-values"], "rel")
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
    assert env["PFS_SCHEDULER"] == "tls://rel-pfs-scheduler:8786"
    assert env["DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"] == "300s"
    # the client certificate through Dask's configuration, which pfs reads when no --tls-* is given
    assert env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"] == "/etc/pfs/tls/tls.crt"
    assert env["DASK_DISTRIBUTED__COMM__TLS__CA_FILE"] == "/etc/pfs/tls/ca.crt"
    assert env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] == "True"
    assert volumes_of(job)["tls"]["secret"]["secretName"] == "rel-pfs-tls-client"
    assert "ttlSecondsAfterFinished" not in job["spec"]  # kept: a deleted Job would run again on upgrade
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
    for obj, comp in ((get(objs, "Deployment", "-worker"), "worker"), (get_job(objs, "rel"), "job")):
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] == comp and labels["app.kubernetes.io/instance"] == "rel"
    wpol = get(objs, "NetworkPolicy", "-worker")
    assert wpol["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"
    assert len(wpol["spec"]["ingress"][0]["from"]) == 2


def test_pvc_airflow_connection_json(rendered: dict[str, list[dict]]) -> None:
    secret = get(rendered["pvc-values"], "Secret", "-airflow-connection")
    (key,) = secret["stringData"]
    assert key == "AIRFLOW_CONN_PFS_DASK_DEFAULT"
    conn = json.loads(secret["stringData"][key])
    extra = conn.pop("extra")
    assert conn == {"conn_type": "pfs_dask", "host": "rel-pfs-scheduler.pfs.svc.cluster.local", "port": 8786}
    assert extra["threads"] == 128 and extra["protocol"] == "tls"
    # the generated client certificate, inline: the Secret alone is enough for Airflow
    client = b64(get(rendered["pvc-values"], "Secret", "rel-pfs-tls-client"))
    assert (extra["tls_ca_file"], extra["tls_cert"], extra["tls_key"]) == (
        client["ca.crt"],
        client["tls.crt"],
        client["tls.key"],
    )


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
    assert "XDG_CACHE_HOME" not in env  # not on a read-only mount
    assert volumes_of(worker)["tmp"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "512Mi"}
    assert pod_spec(worker)["securityContext"]["runAsUser"] == 12345


def test_hostpath_jupyter(rendered: dict[str, list[dict]]) -> None:
    objs = rendered["hostpath-values"]
    dep = get(objs, "Deployment", "hpc-pfs-jupyter")
    c = container(dep)
    assert c["image"] == "ghcr.io/pfs/pfs-jupyter:0.1.0"
    assert c["command"] == ["jupyter"] and c["args"][0] == "lab"
    assert "--ServerApp.root_dir=/lustre" in c["args"]
    assert env_of(c)["PFS_SCHEDULER"] == "tcp://hpc-pfs-scheduler:8786"  # TLS off in this values file
    assert not [e for e in env_of(c) if "__TLS__" in e or "REQUIRE_ENCRYPTION" in e]
    token_ref = next(e for e in c["env"] if e["name"] == "JUPYTER_TOKEN")["valueFrom"]["secretKeyRef"]
    secret = get(objs, "Secret", "hpc-pfs-jupyter")
    assert token_ref == {"name": "hpc-pfs-jupyter", "key": "token"}
    assert base64.b64decode(secret["data"]["token"]).decode() == "not-a-secret-token"
    assert mounts_of(c)["/lustre"]["readOnly"] is True
    svc = get(objs, "Service", "hpc-pfs-jupyter")
    assert svc["spec"]["ports"][0]["port"] == 8888
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "jupyter"
    assert not [o for o in objs if o["kind"] in ("Job", "NetworkPolicy")]
    worker = container(get(objs, "Deployment", "hpc-pfs-worker"))
    assert worker["args"][1] == "tcp://hpc-pfs-scheduler:8786" and not tls_args(worker["args"])


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
    assert worker["args"][1] == "tls://x-pfs-scheduler:9786"
    job = get_job(objs, "x")
    assert env_of(container(job))["PFS_SCHEDULER"] == "tls://x-pfs-scheduler:9786"
    assert "ttlSecondsAfterFinished" not in job["spec"]
    token = base64.b64decode(get(objs, "Secret", "-jupyter")["data"]["token"]).decode()
    assert len(token) == 32 and token.isalnum()
    jupyter = get(objs, "Deployment", "-jupyter")
    assert "shared" not in volumes_of(jupyter)
    assert volumes_of(jupyter)["tls"]["secret"]["secretName"] == "x-pfs-tls-client"
    env = env_of(container(jupyter))  # a plain distributed.Client(DASK_SCHEDULER_ADDRESS) works in a notebook
    assert env["DASK_SCHEDULER_ADDRESS"] == "tls://x-pfs-scheduler:9786"
    assert env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"] == "/etc/pfs/tls/tls.key"


def test_jupyter_network_policy(helm: str) -> None:
    """Jupyter holds the client key and the shared volume: no pod reaches it unless listed in jupyterIngress."""
    closed = parse(render(helm, "x", "--set", "jupyter.enabled=true"))
    pol = get(closed, "NetworkPolicy", "x-pfs-jupyter")
    assert pol["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "pfs",
        "app.kubernetes.io/instance": "x",
        "app.kubernetes.io/component": "jupyter",
    }
    labels = get(closed, "Deployment", "x-pfs-jupyter")["spec"]["template"]["metadata"]["labels"]
    assert pol["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert pol["spec"]["policyTypes"] == ["Ingress"] and pol["spec"]["ingress"] == []  # deny all

    peer = {"podSelector": {"matchLabels": {"pfs.io/jupyter-client": "true"}}}
    opened = parse(
        render(
            helm,
            "x",
            "--set",
            "jupyter.enabled=true",
            "--set",
            "jupyter.service.port=9888",
            "--set-json",
            f"networkPolicy.jupyterIngress=[{json.dumps(peer)}]",
        )
    )
    (rule,) = get(opened, "NetworkPolicy", "x-pfs-jupyter")["spec"]["ingress"]
    assert rule == {"from": [peer], "ports": [{"port": 9888, "protocol": "TCP"}]}

    assert not [o for o in parse(render(helm, "x")) if o["metadata"]["name"].endswith("-jupyter")]  # Jupyter off
    no_policies = parse(render(helm, "x", "--set", "jupyter.enabled=true", "--set", "networkPolicy.enabled=false"))
    assert not [o for o in no_policies if o["kind"] == "NetworkPolicy"]


# --- TLS ---


def test_generated_certificates_secure_a_real_dask_cluster(rendered: dict[str, list[dict]], tmp_path: Path) -> None:
    """The chart's CA and certificates (sprig's genCA/genSignedCert) run a Dask scheduler and worker on tls://
    with the files the pods mount; the Airflow connection's certificate gets in, another CA's does not."""
    from cryptography import x509
    from distributed import LocalCluster
    from distributed.security import Security

    from dask_pfs import ClusterOptions, PfsError, connect
    from dask_pfs.clusters.security import TlsFiles

    from .tls_certs import CertificateAuthority

    objs = rendered["pvc-values"]
    server, client = b64(get(objs, "Secret", "rel-pfs-tls")), b64(get(objs, "Secret", "rel-pfs-tls-client"))
    assert get(objs, "Secret", "rel-pfs-tls")["type"] == "kubernetes.io/tls"
    assert server["ca.crt"] == client["ca.crt"] and "ca.key" not in client
    cert = x509.load_pem_x509_certificate(server["tls.crt"].encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "rel-pfs-scheduler.pfs.svc.cluster.local" in names
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime > datetime.timedelta(days=3600)  # tls.validityDays 3650

    for key, text in server.items():
        (tmp_path / key).write_text(text)
    files = {k: str(tmp_path / k) for k in server}
    node = {"tls_ca_file": files["ca.crt"]}
    for role in ("scheduler", "worker", "client"):  # client: the LocalCluster object's own connection
        node |= {f"tls_{role}_cert": files["tls.crt"], f"tls_{role}_key": files["tls.key"]}
    conn = json.loads(get(objs, "Secret", "-airflow-connection")["stringData"]["AIRFLOW_CONN_PFS_DASK_DEFAULT"])
    extra = conn["extra"]
    as_airflow = TlsFiles(extra["tls_ca_file"], extra["tls_cert"], extra["tls_key"])
    rogue = CertificateAuthority(tmp_path / "rogue", "rogue").issue("c", "pfs-client")
    with LocalCluster(
        n_workers=1,
        processes=False,
        protocol="tls://",
        host="127.0.0.1",
        security=Security(**node, require_encryption=True),
        dashboard_address=":0",
    ) as cluster:
        with connect(ClusterOptions(scheduler=cluster.scheduler_address, security=as_airflow)) as dask:
            assert dask.submit(len, "pfs", pure=False).result() == 3
        with dask_config({"distributed.comm.timeouts.connect": "5s"}), pytest.raises(PfsError, match="cannot reach"):
            bad = TlsFiles(files["ca.crt"], str(rogue.cert), str(rogue.key))
            with connect(ClusterOptions(scheduler=cluster.scheduler_address, security=bad)):
                pass


def test_rendered_containers_run_a_secured_cluster(rendered: dict[str, list[dict]], tmp_path: Path) -> None:
    """The scheduler's, a worker's and the Job's commands and environment exactly as rendered, run as local
    processes (container paths, names and ports mapped to this machine): the probes' /health answers, the Job's
    scan gets through with the client Secret, and the worker's preStop hook drains it."""
    import socket
    import time
    import urllib.request

    from .conftest import make_tree

    objs = rendered["pvc-values"]

    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    ports = {"sched": free_port(), "dash": free_port(), "http": free_port()}
    address = f"tls://127.0.0.1:{ports['sched']}"
    tree = make_tree(tmp_path / "data" / "project", {"a/one": "1", "a/two": "22", "b/three": "333"})
    (tmp_path / "local").mkdir()
    for secret in ("rel-pfs-tls", "rel-pfs-tls-client"):
        (tmp_path / secret).mkdir()
        for key, text in b64(get(objs, "Secret", secret)).items():
            (tmp_path / secret / key).write_text(text)

    def localize(text: str, secret: str) -> str:
        for container_path, here in (
            ("tls://rel-pfs-scheduler:8786", address),
            ("/etc/pfs/tls", str(tmp_path / secret)),
            ("/dask-local", str(tmp_path / "local")),
            ("/lustre/scratch/.pfs/manifests/project", str(tmp_path / "manifest")),
            ("/lustre/scratch/project", str(tree)),
            ("$(POD_NAME)", "worker-a"),
            (":8787", f":{ports['dash']}"),
            (":8788", f":{ports['http']}"),
        ):
            text = text.replace(container_path, here)
        return str(ports["sched"]) if text == "8786" else text

    def command(c: dict, secret: str) -> tuple[list[str], dict[str, str]]:
        exe = {"dask": [sys.executable, "-m", "dask"], "pfs": [sys.executable, "-m", "dask_pfs"]}[c["command"][0]]
        args = [localize(a, secret) for a in c.get("args", [])]
        env = {k: localize(v, secret) for k, v in env_of(c).items() if v is not None}
        return exe + args, {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), **env}

    def health(port: int, proc: subprocess.Popen) -> str:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
                    return resp.read().decode()
            except OSError:
                assert time.monotonic() < deadline, f"no /health on {port}"
                time.sleep(0.2)

    sched_c, worker_c = container(get(objs, "Deployment", "-scheduler")), container(get(objs, "Deployment", "-worker"))
    logs = {name: (tmp_path / f"{name}.log").open("w") for name in ("scheduler", "worker")}
    procs = []
    try:
        cmd, env = command(sched_c, "rel-pfs-tls")
        procs.append(subprocess.Popen(cmd, env=env, stdout=logs["scheduler"], stderr=subprocess.STDOUT))
        assert health(ports["dash"], procs[0]) == "ok"  # the scheduler's probes
        cmd, env = command(worker_c, "rel-pfs-tls")
        procs.append(subprocess.Popen(cmd, env=env, stdout=logs["worker"], stderr=subprocess.STDOUT))
        assert health(ports["http"], procs[1]) == "ok"  # the worker's probes

        cmd, env = command(container(get_job(objs, "rel")), "rel-pfs-tls-client")
        job = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=180)
        assert job.returncode == 0, job.stderr
        assert json.loads(job.stdout)["counts"]["files"] == 3
        no_cert = {k: v for k, v in env.items() if "__TLS__" not in k}
        refused = subprocess.run(
            [sys.executable, "-m", "dask_pfs", "workers"], env=no_cert, capture_output=True, text=True, timeout=120
        )
        assert refused.returncode == 2 and "requires TLS" in refused.stderr, refused.stderr

        pre_stop = worker_c["lifecycle"]["preStop"]["exec"]["command"]
        cmd, env = command({"command": pre_stop[:1], "args": pre_stop[1:], "env": worker_c["env"]}, "rel-pfs-tls")
        drained = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        assert drained.returncode == 0, drained.stderr
        assert "worker worker-a (tls://" in drained.stdout and "retired: no task running" in drained.stdout
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=60)
        for log in logs.values():
            log.close()


def dask_config(values: dict):
    import dask

    return dask.config.set(values)


def test_existing_tls_secret(helm: str) -> None:
    """Certificates from cert-manager or a site CA: nothing generated, the Secrets named are mounted, and the
    Airflow connection names files where Airflow mounts the client Secret."""
    objs = parse(
        render(
            helm,
            "ext",
            "--set",
            "tls.existingSecret=site-pfs-cluster",
            "--set",
            "tls.existingClientSecret=site-pfs-client",
            "--set",
            "job.enabled=true",
            "--set",
            "airflowConnection.enabled=true",
        )
    )
    assert not [o for o in objs if o["kind"] == "Secret" and "tls" in o["metadata"]["name"]]
    for suffix in ("-scheduler", "-worker"):
        assert volumes_of(get(objs, "Deployment", suffix))["tls"]["secret"]["secretName"] == "site-pfs-cluster"
    assert volumes_of(get_job(objs, "ext"))["tls"]["secret"]["secretName"] == "site-pfs-client"
    conn = json.loads(get(objs, "Secret", "-airflow-connection")["stringData"]["AIRFLOW_CONN_PFS_DASK_DEFAULT"])
    assert conn["extra"] == {
        "protocol": "tls",
        "tls_ca_file": "/etc/pfs/tls/ca.crt",
        "tls_cert": "/etc/pfs/tls/tls.crt",
        "tls_key": "/etc/pfs/tls/tls.key",
    }


# --- operations: Job names, probes, disruption budget, drain, autoscaling ---


def test_job_and_scheduler_survive_upgrades_that_leave_them_alone(helm: str) -> None:
    def job_name(*sets: str) -> str:
        args = [a for kv in ("job.enabled=true", *sets) for a in ("--set", kv)]
        return get_job(parse(render(helm, "up", *args, "--show-only", "templates/job.yaml")), "up")["metadata"]["name"]

    first = job_name()
    # the scheduler's pod is not touched by worker tuning either (Recreate: a new pod would drop every job)
    sched = [
        get(parse(render(helm, "up", *sets, "--show-only", "templates/scheduler.yaml")), "Deployment", "-scheduler")
        for sets in ([], ["--set", "worker.pfsThreads=16", "--set", "worker.replicas=9", "--set", "worker.threads=2"])
    ]
    assert sched[0]["spec"]["template"] == sched[1]["spec"]["template"]
    assert job_name("worker.replicas=7", "worker.threads=8", "scheduler.service.dashboardPort=9999") == first
    changed = {job_name("job.args={scan,/data/other,-o,/data/m}"), job_name("job.runId=2"), job_name("image.tag=v9")}
    assert first not in changed and len(changed) == 3


def test_workers_have_probes_a_budget_and_drain_before_stopping(rendered: dict[str, list[dict]]) -> None:
    objs = rendered["pvc-values"]
    worker = get(objs, "Deployment", "-worker")
    spec, c = pod_spec(worker), container(worker)
    assert c["ports"] == [{"name": "http", "containerPort": 8788, "protocol": "TCP"}]
    assert c["args"][c["args"].index("--dashboard-address") + 1] == ":8788"  # the worker's HTTP server
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    assert c["livenessProbe"]["failureThreshold"] * c["livenessProbe"]["periodSeconds"] >= 120  # busy workers
    # preStop: no new tasks, running ones finish; then SIGTERM and 20 s for `dask worker` to close
    assert spec["terminationGracePeriodSeconds"] == 600
    assert c["lifecycle"]["preStop"]["exec"]["command"] == ["pfs", "retire-worker", "--timeout", "580"]
    env = env_of(c)
    assert env["PFS_WORKER_NAME"] == "$(POD_NAME)" and env["PFS_SCHEDULER"] == "tls://rel-pfs-scheduler:8786"
    assert env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"] == "/etc/pfs/tls/tls.crt"  # for the preStop client
    pdb = get(objs, "PodDisruptionBudget", "-worker")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= worker["spec"]["template"]["metadata"]["labels"].items()
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"


def test_autoscaling_and_budget_options(helm: str) -> None:
    objs = parse(
        render(
            helm,
            "hpa",
            "--set",
            "worker.autoscaling.enabled=true",
            "--set",
            "worker.autoscaling.maxReplicas=40",
            "--set-string",
            "worker.podDisruptionBudget.minAvailable=50%",
            "--set",
            "worker.drainOnStop=false",
            "--set",
            "worker.terminationGracePeriodSeconds=60",
        )
    )
    worker = get(objs, "Deployment", "-worker")
    assert "replicas" not in worker["spec"]  # the HPA owns it; an upgrade must not reset it
    assert "lifecycle" not in container(worker) and pod_spec(worker)["terminationGracePeriodSeconds"] == 60
    hpa = get(objs, "HorizontalPodAutoscaler", "-worker")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hpa-pfs-worker"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 40)
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600
    assert get(objs, "PodDisruptionBudget", "-worker")["spec"] == {
        "minAvailable": "50%",
        "selector": {"matchLabels": worker["spec"]["selector"]["matchLabels"]},
    }


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
    if case == "default-values":
        assert "WARNING: sharedStorage.enabled is false" in notes
    if case in ("default-values", "pvc-values"):
        secret = f"{CASES[case]}-pfs-tls-client"
        assert "pfs workers --scheduler tls://localhost:8786" in notes
        assert f"get secret {secret} -o jsonpath='{{.data.tls\\.key}}' | base64 -d > pfs-tls.key" in notes
        assert "export PFS_TLS_CA_FILE=$PWD/pfs-ca.crt PFS_TLS_CERT=$PWD/pfs-tls.crt" in notes
        assert "WARNING" not in notes.replace("WARNING: sharedStorage", "")
    if case == "pvc-values":
        job = get_job(parse(render(helm, "rel", "-f", str(CI / "pvc-values.yaml"))), "rel")["metadata"]["name"]
        assert "AIRFLOW_CONN_PFS_DASK_DEFAULT" in notes and f"logs -f job/{job}" in notes
        assert "exec -it deploy/rel-pfs-worker -- \\\n     pfs scan /lustre/scratch/project" in notes
        # the port-forwarded client runs commands itself: their drivers run on the cluster
        remote = "export PFS_SCHEDULER=tls://localhost:8786\n   pfs scan /lustre/scratch/project -o "
        assert remote + "/lustre/scratch/.pfs/manifests/project" in notes
        assert "Its extras carry the client certificate and key" in notes
    if case == "hostpath-values":
        assert "read-only" in notes and "hpc-pfs-jupyter" in notes and 'conn_id="lustre_pfs"' in notes
        assert "pfs workers --scheduler tcp://localhost:8786" in notes and "PFS_TLS" not in notes
        assert "WARNING: tls.enabled is false: whoever reaches port 8786 runs code" in notes
        assert "WARNING: networkPolicy.enabled is false" in notes


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
    "pfs-threads-zero": (["--set", "worker.pfsThreads=0"], ["/worker/pfsThreads", "value must be 'auto'"]),
    "bad-conn-id": (["--set", "airflowConnection.connId=pfs-dask"], ["/airflowConnection/connId"]),
    "bad-pull-policy": (["--set", "image.pullPolicy=Sometimes"], ["/image/pullPolicy"]),
    "job-without-args": (["--set", "job.enabled=true", "--set-json", "job.args=[]"], ["/job/args"]),
    "client-secret-alone": (["--set", "tls.existingClientSecret=c"], ["/tls/existingClientSecret"]),
    "tls-relative-mount": (["--set", "tls.mountPath=certs"], ["/tls/mountPath"]),
    "short-grace-period": (
        ["--set", "worker.terminationGracePeriodSeconds=5"],
        ["/worker/terminationGracePeriodSeconds"],
    ),
    "hpa-without-metrics": (
        ["--set", "worker.autoscaling.enabled=true", "--set-json", "worker.autoscaling.metrics=[]"],
        ["/worker/autoscaling/metrics"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_schema_rejects_bad_values(helm: str, case: str) -> None:
    args, needles = BAD_VALUES[case]
    proc = run_helm(helm, *template_args("bad", CHART, *args), check=False)
    assert proc.returncode != 0, f"{case} rendered:\n{proc.stdout[:500]}"
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_pfs_threads_null_is_auto_and_a_number_fixes_it(helm: str, tmp_path: Path) -> None:
    """``worker.pfsThreads`` (issue 46): ``auto`` by default, and ``null`` (unset with ``--set``, or ``~`` in a
    values file) is ``auto`` too, which the workers' concurrency controller tunes (``operators.core.concurrency``);
    a number fixes the operations in flight per worker process; 0 is refused (above) with a message naming
    ``auto``."""
    values = tmp_path / "v.yaml"
    values.write_text("worker:\n  pfsThreads: ~\n")
    for extra, want in (
        ([], "auto"),
        (["--set", "worker.pfsThreads=null"], "auto"),
        (["-f", str(values)], "auto"),
        (["--set", "worker.pfsThreads=8"], "8"),
    ):
        worker = get(parse(render(helm, "thr", *extra)), "Deployment", "-pfs-worker")
        assert env_of(container(worker))["PFS_THREADS"] == want, extra
