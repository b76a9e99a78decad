"""Client-side TLS for a secured Dask scheduler: mutual authentication with certificates.

A scheduler started with ``--tls-ca-file/--tls-cert/--tls-key`` (the Helm chart's default) accepts only
peers that present a certificate signed by its CA.  pfs clients give theirs with the CLI options of the
same names, the ``PFS_TLS_CA_FILE``/``PFS_TLS_CERT``/``PFS_TLS_KEY`` variables, the Airflow connection's
extras, or ``ClusterOptions(security=...)``; Dask's own configuration
(``distributed.comm.tls.client.cert`` ...) still applies when none of these is given.  Each value is a
file path or the PEM text itself (how Airflow connections and Kubernetes Secrets carry them).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dask_pfs.errors import PfsError

if TYPE_CHECKING:
    from distributed.security import Security

ENV = {"ca_file": "PFS_TLS_CA_FILE", "cert": "PFS_TLS_CERT", "key": "PFS_TLS_KEY"}


@dataclass(frozen=True)
class TlsFiles:
    """The CA that signed the cluster's certificates, and this client's certificate and key."""

    ca_file: str
    cert: str
    key: str | None = None  # None: the key follows the certificate in ``cert``

    @classmethod
    def from_values(cls, ca_file: str | None, cert: str | None, key: str | None) -> TlsFiles | None:
        """From optional settings: None when none is set, an error when the CA or certificate is missing."""
        if not (ca_file or cert or key):
            return None
        missing = [name for name, value in (("CA file", ca_file), ("certificate", cert)) if not value]
        if missing:
            raise PfsError(
                f"TLS needs a CA file and a client certificate (and key); missing: {', '.join(missing)} "
                "(--tls-ca-file/--tls-cert/--tls-key or PFS_TLS_CA_FILE/PFS_TLS_CERT/PFS_TLS_KEY)"
            )
        return cls(str(ca_file), str(cert), str(key) if key else None)

    @classmethod
    def from_env(cls) -> TlsFiles | None:
        return cls.from_values(*(os.environ.get(var) or None for var in ENV.values()))

    def as_dict(self) -> dict[str, str | None]:
        """Plain values (an Airflow trigger's serialized arguments)."""
        return {"ca_file": self.ca_file, "cert": self.cert, "key": self.key}

    def to_security(self) -> Security:
        """A Dask ``Security`` that requires encryption; unreadable files are a clear error, not a traceback."""
        from distributed.security import Security

        for what, value in (("CA file", self.ca_file), ("certificate", self.cert), ("key", self.key)):
            if value and "\n" not in value and not os.access(value, os.R_OK):
                raise PfsError(f"TLS {what} {value}: not a readable file")
        return Security(
            tls_ca_file=self.ca_file,
            tls_client_cert=self.cert,
            tls_client_key=self.key,
            require_encryption=True,
        )


def scheduler_address(address: str, secured: bool) -> str:
    """The address to dial: ``tls://`` added when certificates are given, a plain ``tcp://`` refused then."""
    scheme, sep, _ = address.partition("://")
    if not sep:
        return f"tls://{address}" if secured else address
    if secured and scheme in ("tcp", "ws"):
        raise PfsError(f"scheduler {address} is not encrypted, but TLS certificates were given: use tls://")
    return address


class InsecureSchedulerWarning(UserWarning):
    """A plain-TCP scheduler reachable from other hosts: whoever reaches it runs code as its workers."""


def warn_if_open(address: str) -> None:
    """Warn (once per address) about a plain ``tcp://``/``ws://`` scheduler that is not on this host's
    loopback: Dask runs whatever a client sends, so anyone who can reach it runs code as pfs's
    workers (root, on shared storage).  ``tls://`` with client certificates is the cure."""
    import ipaddress
    from urllib.parse import urlsplit

    scheme, sep, _ = address.partition("://")
    if sep and scheme not in ("tcp", "ws"):
        return
    host = urlsplit(address if sep else f"tcp://{address}").hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        warnings.warn(
            f"scheduler {address} is plain TCP on a network address: anyone who can reach it can run code as "
            "pfs's workers; use tls:// with client certificates (docs/deploy.md)",
            InsecureSchedulerWarning,
            stacklevel=3,
        )


def check_client_certificate(address: str, security: Security | None) -> None:
    """A ``tls://`` scheduler needs a client certificate; say so instead of Dask's TypeError."""
    if not address.startswith(("tls://", "wss://")):
        return
    if security is None:
        from distributed.security import Security

        security = Security()  # Dask's configuration (distributed.comm.tls.*)
    if not (getattr(security, "tls_ca_file", None) and getattr(security, "tls_client_cert", None)):
        raise PfsError(
            f"scheduler {address} requires TLS: give the cluster's CA and a client certificate "
            "(--tls-ca-file/--tls-cert/--tls-key or PFS_TLS_CA_FILE/PFS_TLS_CERT/PFS_TLS_KEY)"
        )
