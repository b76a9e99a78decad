"""A scheduler that speaks only mutual TLS (the Helm chart's default): pfs reaches it with the client
certificates given as options, environment variables or ``ClusterOptions``, and everyone else is refused.

The cluster (tests/conftest.py ``tls_cluster``) is a real LocalCluster with a worker process on
tls://127.0.0.1, its certificates made by the test (tests/tls_certs.py).
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import time

import pytest

from dask_pfs import ClusterOptions, PfsError, connect, open_manifest
from dask_pfs.clusters.security import TlsFiles

from .conftest import make_tree, run_pfs

# A refused handshake must not wait out Dask's 30 s connect timeout.
FAST_FAIL = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "10s"}
NO_TLS_ENV = {"PFS_TLS_CA_FILE": "", "PFS_TLS_CERT": "", "PFS_TLS_KEY": "", "PFS_SCHEDULER": ""}


def scheduler_task_prefixes(address: str, tls) -> set[str]:
    with connect(ClusterOptions(scheduler=address, security=tls)) as client:
        return set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes)))


def test_scan_through_a_tls_scheduler_with_client_certificates(tls_cluster, tmp_path):
    src = make_tree(tmp_path / "src", {"a/one.txt": "1", "a/b/two.txt": "22", "three.txt": "333"})
    out = tmp_path / "m"
    proc = run_pfs(
        "scan", src, "-o", out, "--scheduler", tls_cluster.address, *tls_cluster.cli_args(), "--json",
        "--no-progress", env=NO_TLS_ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    counts = summary["counts"]
    assert (counts["entries"], counts["files"], counts["errors"]) == (5, 3, 0)
    assert open_manifest(str(out)).info["counts"]["files"] == 3
    tls = TlsFiles(str(tls_cluster.ca_file), str(tls_cluster.client.cert), str(tls_cluster.client.key))
    assert any(p.startswith("pfs-scan") for p in scheduler_task_prefixes(tls_cluster.address, tls))


def test_certificates_from_the_environment_and_tls_by_default(tls_cluster):
    """PFS_TLS_* variables; an address without a scheme becomes tls:// when certificates are given."""
    env = {
        **NO_TLS_ENV,
        "PFS_TLS_CA_FILE": str(tls_cluster.ca_file),
        "PFS_TLS_CERT": str(tls_cluster.client.cert),
        "PFS_TLS_KEY": str(tls_cluster.client.key),
        "PFS_SCHEDULER": tls_cluster.address.removeprefix("tls://"),
    }
    proc = run_pfs("workers", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    listing = json.loads(proc.stdout)
    assert listing["scheduler"] == tls_cluster.address
    (worker,) = listing["workers"]
    assert worker["address"].startswith("tls://127.0.0.1:") and worker["threads"] == 2


def test_connect_takes_pem_text_or_a_security_object(tls_cluster):
    """What the Airflow connection's extras and a notebook pass: PEM text, or distributed's Security."""
    from distributed.security import Security

    pem = TlsFiles(
        tls_cluster.ca_file.read_text(),
        tls_cluster.client.cert.read_text(),
        tls_cluster.client.key.read_text(),
    )
    security = Security(
        tls_ca_file=str(tls_cluster.ca_file),
        tls_client_cert=str(tls_cluster.client.cert),
        tls_client_key=str(tls_cluster.client.key),
        require_encryption=True,
    )
    for given in (pem, security):
        with connect(ClusterOptions(scheduler=tls_cluster.address, security=given)) as client:
            assert client.submit(sum, [1, 2, 3], pure=False).result() == 6


def test_a_client_without_a_certificate_is_refused_by_the_scheduler(tls_cluster, caplog):
    """The server side: a TLS client that trusts the CA but shows no certificate gets no session (TLS 1.3
    sends the verdict after the handshake: the client sees the alert, or under load only the closed socket,
    while the scheduler logs why it refused)."""
    host, port = tls_cluster.address.removeprefix("tls://").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(tls_cluster.ca_file))
    ctx.check_hostname = False
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        pytest.raises(ssl.SSLError) as err,
        ctx.wrap_socket(raw) as conn,
    ):
        conn.sendall(b"\0" * 8)
        conn.recv(1)  # TLS 1.3: the server's verdict on the (missing) certificate arrives here
    if isinstance(err.value, ssl.SSLEOFError):  # the scheduler's loop logs its refusal when it gets to it
        deadline = time.monotonic() + 10
        while "PEER_DID_NOT_RETURN_A_CERTIFICATE" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    refused = "CERTIFICATE_REQUIRED" in str(err.value).upper() or (
        isinstance(err.value, ssl.SSLEOFError) and "PEER_DID_NOT_RETURN_A_CERTIFICATE" in caplog.text
    )
    assert refused, (err.value, caplog.text)


def test_a_certificate_from_another_ca_is_refused(tls_cluster, caplog):
    """Refused for its certificate, not unreachable (pfs prints "cannot reach" for both): the
    scheduler, in this process, logs that it failed the handshake because it could not verify it."""
    caplog.set_level(logging.WARNING, logger="distributed.comm")
    proc = run_pfs(
        "workers", "--scheduler", tls_cluster.address, "--tls-ca-file", tls_cluster.ca_file,
        "--tls-cert", tls_cluster.rogue.cert, "--tls-key", tls_cluster.rogue.key, env={**NO_TLS_ENV, **FAST_FAIL},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"pfs: error: cannot reach the Dask scheduler {tls_cluster.address}" in proc.stderr
    assert "Traceback" not in proc.stderr

    def refusals() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if "TLS handshake failed" in r.getMessage() and "CERTIFICATE_VERIFY_FAILED" in r.getMessage()
        ]

    deadline = time.monotonic() + 10  # the scheduler's loop logs it when it gets to it
    while not refusals() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert refusals(), (proc.stderr, caplog.text)
    assert "Timed out trying to connect" not in proc.stderr  # what an unreachable scheduler gives


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "requires TLS: give the cluster's CA and a client certificate"),
        (["--tls-cert", "client.crt"], "missing: CA file"),
        (["--tls-ca-file", "ca.crt", "--tls-cert", "/no/such.crt"], "TLS CA file ca.crt: not a readable file"),
    ],
)
def test_missing_or_partial_certificates_are_bad_input(tls_cluster, tmp_path, args, needle):
    proc = run_pfs("workers", "--scheduler", tls_cluster.address, *args, env=NO_TLS_ENV)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr


def test_plain_tcp_with_certificates_is_refused_before_connecting(tls_cluster):
    plain = tls_cluster.address.replace("tls://", "tcp://")
    with (
        pytest.raises(PfsError, match="is not encrypted, but TLS certificates were given: use tls://"),
        connect(ClusterOptions(scheduler=plain, security=TlsFiles("ca", "cert"))),
    ):
        pass
