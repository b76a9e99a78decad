"""The image `make image` builds, run as the Helm chart runs it: podman containers instead of pods.

`helm template` of charts/pfs with the default values (plus the scan Job and a shared volume, both off by default)
gives the scheduler's, the workers' and the Job's commands, args, env, volume mounts and security context; each
runs as a podman container of the image those pods name: uid 10001, read-only root file system, all
capabilities dropped, the chart's generated TLS Secrets as read-only mounts, the emptyDirs and the shared claim as
bind mounts. The host network stands in for the pod network (the Service name maps to 127.0.0.1 and ports are
set to free ones). From the host, `pfs scan`, `pfs cp` and `pfs rm --manifest` run through that scheduler with
`--driver cluster`; one worker container is killed while it copies, and the copy must still complete byte for byte.

Marker `image`: `make test-image` (which builds the image first) runs it; CI runs that target (.ci/run).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed import Client
from distributed.security import Security
from distributed.versions import VersionMismatchWarning

from .test_helm import b64, container, find_helm, get, parse, pod_spec

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "pfs"
UID = 10001
RELEASE = "pfs"
# The image as measured in docs/deploy.md, plus room for dependency updates: a bound on accidental growth.
MAX_IMAGE_MB = 600


def podman_flags() -> list[str]:
    """The flags scripts/build-image.sh builds with (runc, ulimits, host network), read from one place."""
    text = (ROOT / "scripts" / "podman-flags.sh").read_text()
    match = re.search(r"^PODMAN_FLAGS=\((.*)\)$", text, re.M)
    assert match, "PODMAN_FLAGS=(...) not found in scripts/podman-flags.sh"
    return shlex.split(match.group(1))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def tree_digest(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every regular file under root (pfs's own journals and manifests left out)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(".pfs"):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def chown_tree(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, UID, UID, follow_symlinks=False)


class Pods:
    """Pods of the rendered chart as podman containers: volumes, env and args mapped as the kubelet would."""

    def __init__(self, objs: list[dict], image: str, work: Path, shared: Path, ports: dict[str, int]) -> None:
        self.objs, self.image, self.work, self.shared, self.ports = objs, image, work, shared, ports
        self.prefix = f"pfs-test-{uuid.uuid4().hex[:8]}"
        self.names: list[str] = []
        self.secrets: dict[str, Path] = {}
        for obj in objs:
            if obj["kind"] == "Secret" and obj.get("data"):
                d = work / "secrets" / obj["metadata"]["name"]
                d.mkdir(parents=True)
                for key, text in b64(obj).items():
                    (d / key).write_text(text)
                    (d / key).chmod(0o644)  # a Secret volume's default mode; readable by the pod's user
                self.secrets[obj["metadata"]["name"]] = d

    def host_dir(self, name: str, volume: dict) -> Path:
        if "emptyDir" in volume:
            d = self.work / "pods" / name / volume["name"]
            d.mkdir(parents=True)
            os.chown(d, UID, UID)
            return d
        if "secret" in volume:
            src = self.secrets[volume["secret"]["secretName"]]
            d = self.work / "pods" / name / volume["name"]
            d.mkdir(parents=True)
            for item in volume["secret"]["items"]:
                shutil.copy(src / item["key"], d / item["path"])
                (d / item["path"]).chmod(0o644)
            return d
        assert "persistentVolumeClaim" in volume, volume
        return self.shared

    def run_args(self, obj: dict, name: str, port_map: dict[str, str] | None = None) -> list[str]:
        """`podman run` arguments for the pod template of ``obj`` under the container name ``name``."""
        spec = pod_spec(obj) if obj["kind"] != "Job" else obj["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        user = f"{spec['securityContext']['runAsUser']}:{spec['securityContext']['runAsGroup']}"
        sc = c["securityContext"]
        args = ["--name", name, "--user", user, "--add-host", f"{RELEASE}-scheduler:127.0.0.1"]
        if sc["readOnlyRootFilesystem"]:
            args += ["--read-only", "--read-only-tmpfs=false"]  # nothing writable but the volumes, as in the pod
        args += [f"--cap-drop={cap.lower()}" for cap in sc["capabilities"]["drop"]]
        if not sc["allowPrivilegeEscalation"]:
            args += ["--security-opt", "no-new-privileges"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        for m in c["volumeMounts"]:
            host = self.host_dir(name, volumes[m["name"]])
            args += ["-v", f"{host}:{m['mountPath']}" + (":ro" if m.get("readOnly") else "")]
        env: dict[str, str] = {}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            else:
                assert e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name", e
                env[e["name"]] = name
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        cargs = [expand(a, env) for a in c.get("args", [])]
        for old, new in (port_map or {}).items():
            cargs = [new if a == old else a for a in cargs]
        assert c["image"] == self.image
        return [*args, "--entrypoint", json.dumps(c["command"]), self.image, *cargs]

    def start(self, obj: dict, name: str, port_map: dict[str, str] | None = None) -> str:
        name = f"{self.prefix}-{name}"
        self.names.append(name)
        podman("run", "-d", *podman_flags(), *self.run_args(obj, name, port_map))
        return name

    def run_to_end(self, obj: dict, name: str, timeout: float) -> subprocess.CompletedProcess[str]:
        name = f"{self.prefix}-{name}"
        self.names.append(name)
        return podman("run", *podman_flags(), *self.run_args(obj, name), timeout=timeout, check=False)

    def logs(self) -> str:
        return "\n".join(
            f"--- {n}\n{podman('logs', '--tail', '40', n, check=False).stderr[-4000:]}" for n in self.names
        )

    def remove(self) -> None:
        if self.names:
            podman("rm", "-f", "-t", "0", *self.names, check=False, timeout=180)


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of args and env values."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), text)


def wait_health(port: int, name: str, deadline_s: float = 180) -> float:
    """Seconds until http://127.0.0.1:PORT/health answers ok (the pods' probes)."""
    start = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
                if resp.read() == b"ok":
                    return time.monotonic() - start
        except OSError:
            pass
        state = podman("inspect", "-f", "{{.State.Status}}", name, check=False).stdout.strip()
        assert state == "running", f"{name} is {state}:\n{podman('logs', name, check=False).stderr[-4000:]}"
        assert time.monotonic() - start < deadline_s, f"no /health on {port} from {name}"
        time.sleep(0.1)


def dashboard_serves(port: int) -> None:
    """The scheduler's dashboard page (bokeh) and every script it loads answer 200."""
    base = f"http://127.0.0.1:{port}"
    with urllib.request.urlopen(f"{base}/status", timeout=60) as resp:
        page = resp.read().decode()
    scripts = re.findall(r'<script[^>]* src="([^"]+)"', page)
    assert any("bokeh" in src for src in scripts), page[:2000]
    for src in scripts:
        url = src if src.startswith("http") else f"{base}/{src.lstrip('/')}"
        with urllib.request.urlopen(url, timeout=60) as resp:
            assert resp.status == 200 and resp.read(), url


@pytest.fixture(scope="module")
def image_objs() -> tuple[str, list[dict], dict[str, int]]:
    helm = find_helm()
    if helm is None or shutil.which("podman") is None:
        pytest.fail("the image test needs helm and podman: run `make test-image` (it installs and builds them)")
    ports = {"scheduler": free_port(), "dashboard": free_port(), "http": free_port()}
    sets = {
        "job.enabled": "true",  # the scan Job, with its default args (scan /data)
        "sharedStorage.enabled": "true",
        "sharedStorage.existingClaim": "shared",
        "scheduler.service.port": ports["scheduler"],  # host network: free ports instead of 8786-8788
        "scheduler.service.dashboardPort": ports["dashboard"],
        "worker.httpPort": ports["http"],
    }
    cmd = [helm, "template", RELEASE, str(CHART), "--namespace", "pfs", "--kube-version", "1.31.0"]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    objs = parse(proc.stdout)
    image = container(get(objs, "Deployment", "-worker"))["image"]
    if podman("image", "exists", image, check=False).returncode != 0:
        pytest.fail(f"image {image} (the chart's default) not built: run `make image`")
    return image, objs, ports


def test_image_is_small_and_runs_as_10001(image_objs) -> None:
    """Non-root by default, starts on a read-only root, has the compiled core and the extras; size bounded."""
    image, _, _ = image_objs
    (info,) = json.loads(podman("image", "inspect", image).stdout)
    assert info["Config"]["User"] == "10001:10001"
    assert info["Size"] < MAX_IMAGE_MB * 1e6, f"image {image} is {info['Size'] / 1e6:.0f} MB (docs/deploy.md)"
    assert podman("run", "--rm", *podman_flags(), "--read-only", image, "--version").stdout.startswith("pfs")
    probe = "import os, operators._native, s3fs, paramiko, bokeh; print(os.getuid(), os.getgid())"
    out = podman("run", "--rm", *podman_flags(), "--read-only", "--entrypoint", "python", image, "-c", probe)
    assert out.stdout.split() == ["10001", "10001"], out.stdout + out.stderr


@pytest.fixture()
def pods(image_objs, tmp_path: Path) -> Iterator[tuple[Pods, dict[str, int], Path]]:
    image, objs, ports = image_objs
    shared = tmp_path / "shared"
    shared.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    p = Pods(objs, image, work, shared, ports)
    try:
        yield p, ports, shared
    except BaseException:
        print(p.logs())
        raise
    finally:
        p.remove()


def host_pfs(pods: Pods, ports: dict[str, int], *args: str) -> subprocess.Popen[str]:
    """`pfs ARGS --driver cluster` on the host, with the chart's client certificate (the Secret a user downloads)."""
    client = pods.secrets[f"{RELEASE}-tls-client"]
    env = {
        **os.environ,
        "PFS_SCHEDULER": f"tls://127.0.0.1:{ports['scheduler']}",
        "PFS_TLS_CA_FILE": str(client / "ca.crt"),
        "PFS_TLS_CERT": str(client / "tls.crt"),
        "PFS_TLS_KEY": str(client / "tls.key"),
    }
    exe = Path(sys.executable).with_name("pfs")
    return subprocess.Popen(
        [str(exe), *args, "--driver", "cluster"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@contextlib.contextmanager
def scheduler_client(pods: Pods, ports: dict[str, int]) -> Iterator[Client]:
    """A Dask client of the scheduler container, with the client certificate (host and image Pythons differ in
    their patch level: Dask's version-mismatch warning is expected)."""
    client = pods.secrets[f"{RELEASE}-tls-client"]
    sec = Security(
        tls_ca_file=str(client / "ca.crt"),
        tls_client_cert=str(client / "tls.crt"),
        tls_client_key=str(client / "tls.key"),
        require_encryption=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VersionMismatchWarning)
        with Client(f"tls://127.0.0.1:{ports['scheduler']}", security=sec, timeout=120) as c:
            yield c


def workers_and_tasks(c: Client) -> dict[str, list[str]]:
    """worker name -> keys it is processing."""
    names = {addr: w["name"] for addr, w in c.scheduler_info(n_workers=-1)["workers"].items()}
    return {names[addr]: [str(k) for k in keys] for addr, keys in c.processing().items() if addr in names}


def test_chart_pods_as_containers_scan_copy_through_a_killed_worker_and_remove(pods) -> None:
    p, ports, shared = pods
    objs = p.objs
    src = shared / "src"
    payload = {f"d{i % 6}/f{i:03d}.bin": os.urandom(128 * 1024 + i) for i in range(48)}
    for rel, data in payload.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    chown_tree(shared)

    # cold start, as a rollout does it: the scheduler, then both workers at once
    t0 = time.monotonic()
    p.start(get(objs, "Deployment", "-scheduler"), "scheduler")
    ready = wait_health(ports["dashboard"], p.names[-1])
    dashboard_serves(ports["dashboard"])
    worker = get(objs, "Deployment", "-worker")
    http = {f"{p.prefix}-worker-{w}": port for w, port in (("w0", ports["http"]), ("w1", free_port()))}
    t1 = time.monotonic()
    for name, port in http.items():
        p.start(worker, name.removeprefix(f"{p.prefix}-"), {f":{ports['http']}": f":{port}"})
    with scheduler_client(p, ports) as c:
        c.wait_for_workers(2, timeout=300)
        joined = time.monotonic() - t1
        for name, port in http.items():
            wait_health(port, name)  # the workers' probes
        total = time.monotonic() - t0
        print(f"cold start: scheduler ready in {ready:.1f} s, 2 workers joined in {joined:.1f} s (total {total:.1f} s)")

        # the scan Job, its command and client Secret as rendered (default args: pfs scan /data -o ...)
        (job_obj,) = [o for o in objs if o["kind"] == "Job"]
        job = p.run_to_end(job_obj, "job", timeout=300)
        assert job.returncode == 0, job.stdout + job.stderr
        assert (shared / ".pfs" / "manifests" / "scan").is_dir()

        code, out, err = finish(host_pfs(p, ports, "scan", "/data/src", "-o", "/data/.pfs/manifests/src", "--json"))
        assert code == 0, err
        assert json.loads(out)["counts"]["files"] == len(payload)

        # the copy, throttled to last seconds; one worker container is killed while it runs copy tasks (not the
        # one running the job's driver, a task too)
        cp = host_pfs(p, ports, "cp", "/data/src", "/data/dst", "--chunk-files", "2", "--max-bandwidth", "2MB/s")
        victim, deadline = None, time.monotonic() + 240
        while victim is None:
            assert cp.poll() is None, f"cp ended before a worker could be killed: {finish(cp)}"
            assert time.monotonic() < deadline, "no worker ran copy tasks"
            tasks = workers_and_tasks(c)
            driver = [w for w, keys in tasks.items() if any(k.startswith("pfs-cli-") for k in keys)]
            busy = [w for w, keys in tasks.items() if keys and w not in driver]
            started = (shared / "dst").is_dir() and any(f.is_file() for f in (shared / "dst").rglob("*.bin"))
            if driver and busy and started:
                victim = busy[0]
            time.sleep(0.05)
        podman("kill", "-s", "KILL", victim)
        copied_at_kill = len(tree_digest(shared / "dst")) if (shared / "dst").exists() else 0
        code, out, err = finish(cp, timeout=600)
        assert code == 0, out + err
        print(f"killed {victim} with {copied_at_kill} of {len(payload)} files copied")
        assert 0 < copied_at_kill < len(payload), "the worker was not killed mid-copy"
        assert tree_digest(shared / "dst") == tree_digest(src)
        assert sorted(workers_and_tasks(c)) == sorted(set(http) - {victim})

    code, out, err = finish(host_pfs(p, ports, "scan", "/data/dst", "-o", "/data/.pfs/manifests/dst", "--json"))
    assert code == 0, err
    assert json.loads(out)["counts"]["files"] == len(payload)
    code, out, err = finish(host_pfs(p, ports, "rm", "--manifest", "/data/.pfs/manifests/dst", "--yes", "--json"))
    assert code == 0, out + err
    assert tree_digest(shared / "dst") == {}
    assert tree_digest(src) == {rel: hashlib.sha256(data).hexdigest() for rel, data in payload.items()}
