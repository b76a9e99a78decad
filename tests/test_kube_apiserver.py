"""The chart on a real Kubernetes API server: kube-apiserver + etcd on loopback, no nodes.

kind and k3s need a container engine or GitHub downloads, which this machine lacks; kube-apiserver builds
from Go modules (scripts/ensure-kube-apiserver.sh, ~10 min once) and Debian ships etcd. With no controllers
nothing runs, but every object goes through the server's validation and admission (enum values, immutable
fields, the PodDisruptionBudget and HPA APIs), and `helm install`/`upgrade` run for real: `lookup` sees the
Secrets, so the TLS certificates and the Job must survive an upgrade. Skipped when a tool is missing.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from .test_helm import CASES, CHART, CI, find_helm, template_args

pytestmark = pytest.mark.kube

NAMESPACE = "pfs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_apiserver() -> str | None:
    found = os.environ.get("KUBE_APISERVER") or shutil.which("kube-apiserver")
    if found:
        return found
    go = shutil.which("go")
    if go:
        gopath = subprocess.run([go, "env", "GOPATH"], capture_output=True, text=True).stdout.strip()
        cand = Path(gopath, "bin", "kube-apiserver")
        if gopath and os.access(cand, os.X_OK):
            return str(cand)
    return None


def wait_ready(url: str, token: str, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{url} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, context=ctx, timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} not ready after {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def kube(tmp_path_factory) -> dict[str, str]:
    """Environment (KUBECONFIG, HELM) for kubectl and helm against a fresh etcd + kube-apiserver."""
    tools = {
        "kube-apiserver": find_apiserver(),
        "etcd": shutil.which("etcd"),
        "kubectl": shutil.which("kubectl"),
        "helm": find_helm(),
    }
    missing = [name for name, path in tools.items() if not path]
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (scripts/ensure-kube-apiserver.sh, scripts/ensure-helm.sh)")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    work = tmp_path_factory.mktemp("kube")
    sa_key = work / "sa.key"
    sa_key.write_bytes(
        rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    token = secrets.token_hex(16)
    (work / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n")
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    procs = []
    etcd_log, api_log = work / "etcd.log", work / "apiserver.log"
    try:
        etcd = subprocess.Popen(
            [tools["etcd"], "--data-dir", str(work / "etcd"), "--listen-client-urls", etcd_url,
             "--advertise-client-urls", etcd_url, "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-cluster", f"default=http://127.0.0.1:{peer_port}"],
            stdout=etcd_log.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append(etcd)
        api = subprocess.Popen(
            [tools["kube-apiserver"], "--etcd-servers", etcd_url, "--bind-address", "127.0.0.1",
             "--secure-port", str(api_port), "--cert-dir", str(work / "certs"),
             "--token-auth-file", str(work / "tokens.csv"), "--authorization-mode", "AlwaysAllow",
             "--service-account-issuer", "https://kubernetes.default.svc",
             "--service-account-key-file", str(sa_key), "--service-account-signing-key-file", str(sa_key),
             "--service-cluster-ip-range", "10.96.0.0/16", "--enable-priority-and-fairness=false",
             # Debian's etcd 3.4.23 lacks the watch progress requests the watch cache needs (lists then time
             # out with "Too large resource version"); read through to etcd instead
             "--watch-cache=false"],
            stdout=api_log.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append(api)
        wait_ready(f"https://127.0.0.1:{api_port}/readyz", token, api, api_log)
        kubeconfig = work / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "local",
                            "cluster": {
                                "server": f"https://127.0.0.1:{api_port}",
                                "insecure-skip-tls-verify": True,
                            },
                        }
                    ],
                    "users": [{"name": "admin", "user": {"token": token}}],
                    "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
                    "current-context": "local",
                }
            )
        )
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HELM": tools["helm"], "KUBECTL": tools["kubectl"]}
        for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            env[var] = str(work / var.lower())
        kubectl(env, "create", "namespace", NAMESPACE)
        yield env
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def run(cmd: list[str], env: dict, stdin: str | None = None) -> str:
    proc = subprocess.run(cmd, env=env, input=stdin, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def kubectl(env: dict, *args: str, stdin: str | None = None) -> str:
    return run([env["KUBECTL"], *args], env, stdin)


def helm(env: dict, *args: str) -> str:
    return run([env["HELM"], *args], env)


def get(env: dict, kind: str, name: str) -> dict:
    return yaml.safe_load(kubectl(env, "-n", NAMESPACE, "get", kind, name, "-o", "yaml"))


def names(env: dict, kind: str) -> list[str]:
    out = kubectl(env, "-n", NAMESPACE, "get", kind, "-o", "jsonpath={.items[*].metadata.name}")
    return sorted(out.split())


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_chart_passes_server_side_validation(kube: dict, case: str) -> None:
    """Every object of every ci values file, through the API server's validation and admission."""
    rendered = helm(kube, *template_args(CASES[case], CHART, "-f", str(CI / f"{case}.yaml")))
    out = kubectl(kube, "apply", "--dry-run=server", "-n", NAMESPACE, "-f", "-", stdin=rendered)
    n_objects = sum(1 for d in yaml.safe_load_all(rendered) if d)
    assert out.count("(server dry run)") == n_objects, out


def test_the_server_catches_what_the_schemas_do_not(kube: dict) -> None:
    probe = '{"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": -5}'
    rendered = helm(kube, *template_args("neg", CHART, "--set-json", f"worker.livenessProbe={probe}"))
    proc = subprocess.run(
        [kube["KUBECTL"], "apply", "--dry-run=server", "-n", NAMESPACE, "-f", "-"],
        env=kube, input=rendered, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "livenessProbe.periodSeconds: Invalid value: -5: must be greater than or equal to 0" in proc.stderr


def test_install_then_upgrades_keep_certificates_and_the_job(kube: dict) -> None:
    values = ["-n", NAMESPACE, "-f", str(CI / "pvc-values.yaml")]
    helm(kube, "install", "up", str(CHART), *values)
    tls, client = get(kube, "secret", "up-pfs-tls")["data"], get(kube, "secret", "up-pfs-tls-client")["data"]
    (job_name,) = names(kube, "job")
    job_uid = get(kube, "job", job_name)["metadata"]["uid"]
    airflow = get(kube, "secret", "up-pfs-airflow-connection")["data"]

    # an upgrade that leaves the Job alone: same certificates (lookup), same Job object, new worker count
    helm(kube, "upgrade", "up", str(CHART), *values, "--set", "worker.replicas=3")
    assert get(kube, "secret", "up-pfs-tls")["data"] == tls
    assert get(kube, "secret", "up-pfs-tls-client")["data"] == client
    assert get(kube, "secret", "up-pfs-airflow-connection")["data"] == airflow
    assert names(kube, "job") == [job_name] and get(kube, "job", job_name)["metadata"]["uid"] == job_uid
    assert get(kube, "deployment", "up-pfs-worker")["spec"]["replicas"] == 3

    # a lost client Secret is re-issued by the same CA; the cluster's certificate stays
    kubectl(kube, "-n", NAMESPACE, "delete", "secret", "up-pfs-tls-client")
    helm(kube, "upgrade", "up", str(CHART), *values, "--set", "worker.replicas=3")
    renewed = get(kube, "secret", "up-pfs-tls-client")["data"]
    assert get(kube, "secret", "up-pfs-tls")["data"] == tls
    assert renewed["ca.crt"] == tls["ca.crt"] and renewed["tls.crt"] != client["tls.crt"]
    assert_signed_by(base64.b64decode(renewed["tls.crt"]), base64.b64decode(tls["ca.crt"]))

    # asking for a new run replaces the Job
    helm(kube, "upgrade", "up", str(CHART), *values, "--set", "job.runId=again")
    (new_job,) = names(kube, "job")
    assert new_job != job_name
    helm(kube, "uninstall", "up", "-n", NAMESPACE)


def assert_signed_by(cert_pem: bytes, ca_pem: bytes) -> None:
    from cryptography import x509

    cert, ca = x509.load_pem_x509_certificate(cert_pem), x509.load_pem_x509_certificate(ca_pem)
    cert.verify_directly_issued_by(ca)  # raises if the signature or issuer does not match
