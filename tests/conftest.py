"""Shared fixtures: a real Dask cluster with worker processes, a moto S3 server on loopback,
tree builders, and a way to run commands without the DAC capabilities (root ignores file modes)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .tls_certs import Issued

REPO = Path(__file__).resolve().parent.parent

# Trees deeper than Python's default recursion limit (1,000) are part of the suite (issue 42: depth is bounded
# only by the file system).  pytest removes old base directories with shutil.rmtree, which recurses once per
# level on Python 3.11: without room for them, the clean-up of an earlier session's deep tree ends the run.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
PFS = [sys.executable, "-m", "dask_pfs"]

# Commands run as a user's do by default: in their own process (the warm server, dask_pfs.warm, is
# opt-in).  The runtime directory is private to this session, so a server the developer started is
# never used; tests/test_warm_server.py starts its own (PFS_SERVER=on).  Removing the directory at the
# end stops them all (a server leaves when its socket is gone), the capability-dropped ones too.
SERVER_DIR = tempfile.mkdtemp(prefix="pfs-test-servers-")
os.environ["XDG_RUNTIME_DIR"] = SERVER_DIR
os.environ.pop("PFS_SERVER", None)
if os.environ.get("PFS_TEST_SERVER") == "on":  # the whole suite served (faster on a loaded host; not the default)
    os.environ["PFS_SERVER"] = "on"
os.environ.setdefault("PFS_SERVER_IDLE", "300")


# A suite started as a shell's background job (``.ci/run &``), under ``nohup`` or by a runner that ignores or
# blocks signals passes that on to every command it runs: such a command is never served
# (dask_pfs.warm.faithful) and may not be interruptible.  The commands a user types get the default
# dispositions and an empty signal mask; so do the tests' commands (tests that need an ignored or blocked
# signal set it in their own child).  SIGPIPE and SIGXFSZ are Python's own.
def _default_signal_dispositions() -> None:
    for number in range(1, signal.NSIG):
        if number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            if signal.getsignal(number) == signal.SIG_IGN:
                signal.signal(number, signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL)
        except (OSError, ValueError):  # not a signal this platform lets a process set
            continue
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


_default_signal_dispositions()


def pytest_sessionfinish(session, exitstatus) -> None:
    shutil.rmtree(SERVER_DIR, ignore_errors=True)


DROP_DAC = [
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-dac_override,-dac_read_search",
]


@pytest.fixture(scope="session")
def dask_client():
    """One LocalCluster of 2 worker *processes* shared by the suite (start-up costs ~2 s)."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=2, processes=True, dashboard_address=":0", env={"PFS_THREADS": "16"}
    )
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()


@pytest.fixture(scope="session")
def scheduler_address(dask_client) -> str:
    return dask_client.scheduler.address


@dataclass(frozen=True)
class TlsCluster:
    """A LocalCluster that speaks only mutual TLS, and the PEM files a client needs (and a rogue one)."""

    address: str  # tls://127.0.0.1:PORT
    ca_file: Path
    client: Issued  # signed by the cluster's CA
    rogue: Issued  # signed by another CA
    rogue_ca_file: Path

    def cli_args(self) -> list[str]:
        return ["--tls-ca-file", self.ca_file, "--tls-cert", self.client.cert, "--tls-key", self.client.key]


@pytest.fixture(scope="session")
def tls_cluster(tmp_path_factory):
    """Scheduler and one worker process on tls://127.0.0.1 with certificates made by the test."""
    from distributed import LocalCluster
    from distributed.security import Security

    from .tls_certs import CertificateAuthority

    certs = tmp_path_factory.mktemp("tls")
    ca = CertificateAuthority(certs, "pfs")
    node = ca.issue("node", "pfs-node")
    client = ca.issue("client", "pfs-client")
    other = CertificateAuthority(certs, "other")
    rogue = other.issue("rogue", "pfs-client")
    security = Security(
        tls_ca_file=str(ca.ca_file),
        tls_scheduler_cert=str(node.cert),
        tls_scheduler_key=str(node.key),
        tls_worker_cert=str(node.cert),
        tls_worker_key=str(node.key),
        tls_client_cert=str(client.cert),
        tls_client_key=str(client.key),
        require_encryption=True,
    )
    cluster = LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        processes=True,
        protocol="tls://",
        host="127.0.0.1",
        security=security,
        dashboard_address=":0",
        env={"PFS_THREADS": "8"},
    )
    yield TlsCluster(cluster.scheduler_address, ca.ca_file, client, rogue, other.ca_file)
    cluster.close()


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API (moto server) on 127.0.0.1; yields storage options for s3fs."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    yield {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}
    server.stop()


@pytest.fixture
def s3fs_fs(s3_server):
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server, skip_instance_cache=True)
    return fs


def run_pfs(*args: str, env: dict | None = None, check: bool = False, drop_dac: bool = False, timeout: float = 180):
    """Run the ``pfs`` CLI in a subprocess; returns CompletedProcess with text output."""
    cmd = (DROP_DAC if drop_dac else []) + PFS + [str(a) for a in args]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"pfs {' '.join(map(str, args))} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def make_tree(root: Path, spec: dict) -> Path:
    """Build a tree from {relative path: bytes | str (symlink target, prefixed '->') | None (directory)}."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, value in spec.items():
        path = os.path.join(os.fsencode(root), rel if isinstance(rel, bytes) else os.fsencode(rel))
        if value is None:
            os.makedirs(path, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if isinstance(value, str) and value.startswith("->"):
            os.symlink(os.fsencode(value[2:]), path)
        else:
            with open(path, "wb") as f:
                f.write(value if isinstance(value, bytes) else value.encode())
    return root


def make_balanced(root: Path, dirs: int = 20, files_per_dir: int = 50, size: int = 100) -> int:
    """``dirs`` directories of ``files_per_dir`` small files each; returns the number of entries."""
    for d in range(dirs):
        sub = root / f"d{d:03d}" / "sub"
        sub.mkdir(parents=True, exist_ok=True)
        for i in range(files_per_dir):
            (sub / f"f{i:04d}.dat").write_bytes(bytes([i % 251]) * (size + i))
    return dirs * (2 + files_per_dir)


def tree_digest(root: Path) -> dict[bytes, tuple]:
    """{relative path bytes: (kind, sha256 or link target)} for comparing trees byte for byte."""
    out: dict[bytes, tuple] = {}
    base = os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, base)
            if os.path.islink(full):
                out[rel] = ("symlink", os.readlink(full))
            elif os.path.isdir(full):
                out[rel] = ("directory",)
            else:
                with open(full, "rb") as f:
                    out[rel] = ("file", hashlib.sha256(f.read()).hexdigest())
    return out


@pytest.fixture
def tmp_tree(tmp_path):
    return tmp_path


def have(cmd: str) -> bool:
    return shutil.which(cmd) is not None


def can_xattr(tmp: Path) -> bool:
    """Whether the file system of ``tmp`` takes ``user.*`` extended attributes (a probe file, removed)."""
    probe = tmp / "probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, "user.x", b"1")
    except OSError:
        return False
    finally:
        probe.unlink()
    return True


AZURITE = REPO / "build" / "node" / "node_modules" / ".bin" / "azurite-blob"
AZURITE_ACCOUNT = "devstoreaccount1"  # Azurite's well-known development account and key
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass
class Azurite:
    endpoint: str
    container: str
    options: dict


def azure_request(endpoint: str, path: str, query: dict[str, str], headers: dict[str, str] | None = None) -> int:
    """A SharedKey-signed ``PUT`` without a body on Azurite (what obstore does not do: create a container,
    take a lease); its status."""
    import base64
    import hmac
    import urllib.parse
    import urllib.request
    from email.utils import formatdate

    heads = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2021-08-06", **(headers or {})}
    resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{path}" + "".join(f"\n{k}:{v}" for k, v in sorted(query.items()))
    canonical = "".join(f"{k}:{v}\n" for k, v in sorted(heads.items()))
    to_sign = "PUT\n" + "\n" * 11 + canonical + resource
    mac = hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256).digest()
    req = urllib.request.Request(
        f"{endpoint}/{path}?{urllib.parse.urlencode(query)}",
        method="PUT",
        headers={**heads, "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(mac).decode()}",
                 "Content-Length": "0"},
    )  # fmt: skip
    with urllib.request.urlopen(req) as resp:
        return resp.status


def azure_create_container(endpoint: str, container: str) -> None:
    """Create ``container`` (obstore creates no containers)."""
    assert azure_request(endpoint, container, {"restype": "container"}) == 201


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory):
    """A real Azure Blob API (Azurite, installed by scripts/ensure-tools.sh into build/node) on 127.0.0.1."""
    import re
    import select
    import time

    if not AZURITE.exists():
        pytest.fail(f"{AZURITE} missing: run scripts/ensure-tools.sh")
    where = tmp_path_factory.mktemp("azurite")
    proc = subprocess.Popen(
        [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence",
         "--extentMemoryLimit", "1024", "--skipApiVersionCheck", "--silent"],
        cwd=where,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    port, deadline, seen = None, time.monotonic() + 180, ""  # node starts slowly on a loaded host
    while port is None and time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stdout], [], [], 1)[0]:
            line = proc.stdout.readline()
            seen += line
            m = re.search(r"listens on http://127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
    if port is None:
        proc.kill()
        pytest.fail(f"Azurite did not start: {seen}")
    yield f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    proc.kill()  # in memory: nothing to keep (it takes over 10 s to stop on SIGTERM here)
    proc.wait(10)


@pytest.fixture
def azurite(azurite_server, request):
    """A new container on the session's Azurite; options as a user passes them (an adlfs connection string)."""
    import uuid

    container = f"c{uuid.uuid4().hex[:12]}"
    azure_create_container(azurite_server, container)
    conn = (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={azurite_server};"
    )
    return Azurite(azurite_server, container, {"connection_string": conn})


@dataclass
class FakeGcs:
    endpoint: str
    bucket: str
    options: dict


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    """A real GCS API: fake-gcs-server on 127.0.0.1, in memory, built by scripts/build-fake-gcs.sh (a fixed
    upstream version from the Go module proxy plus third_party/fake-gcs-server/xml-api.patch: the XML API's
    object writes and multipart uploads, which obstore sends and upstream does not serve, its issues 331 and 852).
    ``-public-host`` names the host clients send (``127.0.0.1:PORT``): the XML API is answered on it only."""
    import socket
    import time
    import urllib.request

    built = subprocess.run([str(REPO / "scripts" / "build-fake-gcs.sh")], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        pytest.fail(f"fake-gcs-server could not be built: {built.stderr.strip()}")
    binary = built.stdout.strip()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [binary, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port),
         "-public-host", f"127.0.0.1:{port}", "-external-url", endpoint, "-log-level", "warn"],
        cwd=tmp_path_factory.mktemp("fake-gcs"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/_internal/healthcheck", timeout=2):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("fake-gcs-server did not start")
            time.sleep(0.1)
    yield endpoint
    proc.kill()
    proc.wait(10)


@pytest.fixture
def fake_gcs(gcs_server):
    """A new bucket on the session's fake-gcs-server; options as a gcsfs user passes them (``endpoint_url``)."""
    import json
    import urllib.request
    import uuid

    bucket = f"g{uuid.uuid4().hex[:12]}"
    req = urllib.request.Request(
        f"{gcs_server}/storage/v1/b", data=json.dumps({"name": bucket}).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 200, resp.status
    return FakeGcs(gcs_server, bucket, {"endpoint_url": gcs_server})
