"""Object stores (S3, GCS, Azure Blob) as ``obstore`` stores: the one mapping of a URL and its options.

Every job that reads or writes ``s3://``, ``gs://`` or ``az://`` (scan, cp) asks :func:`store_of` for its
store; nothing else builds one, so credentials and endpoints mean the same everywhere.  A store is made
once per process for each (protocol, bucket, options) and reused by every task (``obstore`` stores are
thread-safe and hold their own connection pool).

Options are read from, in this order (later wins):

* the environment, as ``obstore`` reads it (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``); for S3 a profile
  (``AWS_PROFILE`` or the option ``profile``) goes through boto3's credential chain, which knows profiles,
  SSO and instance metadata; ``STORAGE_EMULATOR_HOST`` points GCS at an emulator, as gcsfs does;
* fsspec's configuration of the protocol (``FSSPEC_S3_ENDPOINT_URL``..., ``fsspec.config.conf``);
* the fsspec-style ``storage_options`` users already pass (s3fs's ``key``/``secret``/``token``/
  ``endpoint_url``/``client_kwargs``/``anon``, gcsfs's ``token``/``endpoint_url``, adlfs's
  ``account_name``/``account_key``/``sas_token``/``connection_string``/``anon``);
* ``storage_options["obstore"]``: a dict of ``obstore`` config keys passed as they are.

An ``http://`` endpoint turns on ``allow_http`` (emulators, MinIO); nothing else does.

Fork: ``obstore`` runs its requests on a tokio runtime made on first use, whose threads a forked child
does not have: the child's first request hangs for good.  So a process that has used a store says so
(:func:`runtime_started`): ``dask_pfs.clusters.client.start_method`` then starts workers by
``forkserver`` and ``dask_pfs.runtime.here`` forks no helpers; and a child forked after its parent used
one gets an error from :func:`store_of`, never a hang.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

S3 = frozenset({"s3", "s3a"})
GCS = frozenset({"gs", "gcs"})
AZURE = frozenset({"az", "abfs", "abfss"})
PROTOCOLS = S3 | GCS | AZURE


class StoreOptionError(ValueError):
    """Options that do not make a store (unknown protocol, a bad connection string)."""


def is_store(protocol: str | None) -> bool:
    """Whether ``protocol`` is served by ``obstore`` (and not by fsspec)."""
    return protocol in PROTOCOLS


def split(path: str) -> tuple[str, str]:
    """``bucket/key/...`` (a path without its protocol) as bucket and key (no leading or trailing ``/``)."""
    path = path.lstrip("/")
    bucket, _, key = path.partition("/")
    if not bucket:
        raise StoreOptionError(f"no bucket in {path!r}")
    return bucket, key.strip("/")


def _given(source: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """``{obstore's name: value}`` for each of ``names`` (``{the user's name: obstore's}``) given a value."""
    return {theirs: source[ours] for ours, theirs in names.items() if source.get(ours)}


def _s3(bucket: str, options: dict[str, Any]) -> tuple[dict, dict, Any]:
    config: dict[str, Any] = {}
    client_kwargs = dict(options.get("client_kwargs") or {})
    endpoint = (
        options.get("endpoint_url")
        or client_kwargs.get("endpoint_url")
        or os.environ.get("AWS_ENDPOINT_URL_S3")  # botocore's names, which s3fs users set
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    if endpoint:
        config["endpoint"] = endpoint
    region = options.get("region") or client_kwargs.get("region_name")
    if region:
        config["region"] = region
    config.update(_given(options, {"key": "access_key_id", "secret": "secret_access_key", "token": "session_token"}))
    if options.get("anon"):
        config["skip_signature"] = True
    provider = None
    profile = options.get("profile") or (None if "access_key_id" in config else os.environ.get("AWS_PROFILE"))
    if profile and "access_key_id" not in config:
        try:
            import boto3
            from obstore.auth.boto3 import Boto3CredentialProvider
        except ImportError as exc:  # pragma: no cover: boto3 comes with moto and s3fs's botocore
            raise StoreOptionError(f"an AWS profile ({profile!r}) needs boto3: {exc}") from None
        provider = Boto3CredentialProvider(boto3.Session(profile_name=profile))
    if "region" not in config and not os.environ.get("AWS_REGION") and not os.environ.get("AWS_DEFAULT_REGION"):
        config["region"] = "us-east-1"  # what s3fs/botocore assume for a bucket without a region
    return config, {}, provider


def _gcs(bucket: str, options: dict[str, Any]) -> tuple[dict, dict, Any]:
    config: dict[str, Any] = {}
    emulator = options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        base = emulator if "://" in emulator else f"http://{emulator}"
        # an emulator takes no credentials: object_store's own way to say so is a service account key that
        # names the base URL and turns OAuth off (its skip_signature still asks instance metadata for a token)
        config["base_url"] = base
        config["service_account_key"] = json.dumps(
            {"gcs_base_url": base, "disable_oauth": True, "client_email": "", "private_key": "", "private_key_id": ""}
        )
    token = options.get("token")
    if token == "anon":
        config["skip_signature"] = True
    elif isinstance(token, str) and token and os.path.exists(token):
        config["service_account"] = token
    elif isinstance(token, dict):
        config["service_account_key"] = json.dumps(token)
    return config, {}, None


def _azure(bucket: str, options: dict[str, Any]) -> tuple[dict, dict, Any]:
    config: dict[str, Any] = {}
    conn = options.get("connection_string") or (
        None if options.get("account_name") else os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    )
    if conn:
        parts = dict(p.split("=", 1) for p in str(conn).split(";") if "=" in p)
        if "AccountName" not in parts:
            raise StoreOptionError("an Azure connection string without AccountName")
        config["account_name"] = parts["AccountName"]
        config.update(
            _given(parts, {"AccountKey": "account_key", "SharedAccessSignature": "sas_key", "BlobEndpoint": "endpoint"})
        )
    config.update(
        _given(options, {"account_name": "account_name", "account_key": "account_key", "sas_token": "sas_key"})
    )
    if options.get("endpoint_url"):
        config["endpoint"] = options["endpoint_url"]
    if options.get("anon"):
        config["skip_signature"] = True
    return config, {}, None


_MAPPERS = {**dict.fromkeys(S3, _s3), **dict.fromkeys(GCS, _gcs), **dict.fromkeys(AZURE, _azure)}


def store_config(protocol: str, bucket: str, options: dict[str, Any] | None) -> tuple[dict, dict, Any]:
    """``(config, client_options, credential_provider)`` of the store for ``bucket``: the mapping itself,
    separate from making the store so that it can be tested and logged (without secrets) alone."""
    if protocol not in _MAPPERS:
        raise StoreOptionError(f"{protocol!r} is not an object store pfs reaches through obstore")
    from fsspec.config import conf  # fsspec's own defaults (FSSPEC_S3_ENDPOINT_URL, ~/.config/fsspec): s3fs's too

    options = {**conf.get(protocol, {}), **(options or {})}
    config, client, provider = _MAPPERS[protocol](bucket, options)
    config.update(options.get("obstore") or {})
    endpoint = str(config.get("endpoint") or config.get("base_url") or "")
    if endpoint.startswith("http://"):
        client["allow_http"] = True
    client.setdefault("timeout", "300s")  # a 1 GiB ranged GET on a slow link: object_store's default is 30 s
    return config, client, provider


_stores: dict[tuple, Any] = {}
_lock = threading.Lock()
_started = False  # this process has used obstore (its runtime runs)
_inherited = False  # ... and this process is a fork of one that had


def runtime_started() -> bool:
    """Whether this process has used ``obstore``: a fork of it could not (see the module's docstring)."""
    return _started


def _after_fork_in_child() -> None:
    global _inherited, _stores
    _inherited = _inherited or _started
    _stores = {}


os.register_at_fork(after_in_child=_after_fork_in_child)


def _key(protocol: str, bucket: str, options: dict[str, Any] | None) -> tuple:
    return (protocol, bucket, json.dumps(options or {}, sort_keys=True, default=str))


def store_of(protocol: str, bucket: str, options: dict[str, Any] | None = None) -> Any:
    """The ``obstore`` store of ``bucket`` (made once per process for these options)."""
    global _started
    if _inherited:
        raise StoreOptionError(
            "this process was forked after its parent used obstore, whose runtime does not survive a fork; "
            "start workers by spawn or forkserver (PFS_START_METHOD)"
        )
    _started = True
    key = _key(protocol, bucket, options)
    with _lock:
        got = _stores.get(key)
        if got is not None:
            return got
    config, client, provider = store_config(protocol, bucket, options)
    from obstore.store import AzureStore, GCSStore, S3Store  # ~10 ms: only jobs on a store pay it

    cls: Any = S3Store if protocol in S3 else GCSStore if protocol in GCS else AzureStore
    extra = {"credential_provider": provider} if provider is not None else {}
    store = cls(bucket, config=config, client_options=client, **extra)
    with _lock:
        return _stores.setdefault(key, store)


def store_at(protocol: str, path: str, options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """The store of the bucket of ``path`` (``bucket/key``) and the key within it."""
    bucket, key = split(path)
    return store_of(protocol, bucket, options), key


__all__ = [
    "AZURE",
    "GCS",
    "PROTOCOLS",
    "S3",
    "StoreOptionError",
    "is_store",
    "runtime_started",
    "split",
    "store_at",
    "store_config",
    "store_of",
]
