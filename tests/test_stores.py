"""The one mapping of a URL and its options to an obstore store (operators.stores), on real servers."""

from __future__ import annotations

import obstore
import pytest

from operators.stores import StoreOptionError, split, store_at, store_config, store_of


def test_s3fs_options_map_to_the_store_config():
    config, client, provider = store_config(
        "s3",
        "b",
        {
            "key": "K",
            "secret": "S",
            "token": "T",
            "client_kwargs": {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"},
        },
    )
    assert config == {
        "endpoint": "http://127.0.0.1:9",
        "region": "eu-west-1",
        "access_key_id": "K",
        "secret_access_key": "S",
        "session_token": "T",
    }
    assert client["allow_http"] is True
    assert provider is None


def test_https_endpoint_does_not_allow_http_and_native_keys_win():
    config, client, _ = store_config("s3", "b", {"endpoint_url": "https://minio:9000", "obstore": {"region": "x"}})
    assert "allow_http" not in client
    assert config["region"] == "x"


def test_endpoint_from_the_environment_allows_http(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    config, client, _ = store_config("s3", "b", {})
    assert config["endpoint"] == "http://127.0.0.1:9" and client["allow_http"] is True


def test_anonymous_and_profile(monkeypatch, tmp_path):
    assert store_config("s3", "b", {"anon": True})[0]["skip_signature"] is True
    creds = tmp_path / "credentials"
    creds.write_text("[other]\naws_access_key_id = P\naws_secret_access_key = Q\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    _, _, provider = store_config("s3", "b", {"profile": "other"})
    assert provider is not None and provider()["access_key_id"] == "P"


def test_azure_connection_string():
    conn = "DefaultEndpointsProtocol=http;AccountName=acc;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:10000/acc;"
    config, client, _ = store_config("az", "c", {"connection_string": conn})
    assert config == {"account_name": "acc", "account_key": "a2V5", "endpoint": "http://127.0.0.1:10000/acc"}
    assert client["allow_http"] is True
    with pytest.raises(StoreOptionError, match="AccountName"):
        store_config("az", "c", {"connection_string": "AccountKey=x"})


def test_split_and_unknown_protocol():
    assert split("/bkt/a/b/") == ("bkt", "a/b")
    assert split("bkt") == ("bkt", "")
    with pytest.raises(StoreOptionError):
        split("/")
    with pytest.raises(StoreOptionError):
        store_config("sftp", "h", {})


def test_round_trip_on_moto_and_one_store_per_options(s3_server, s3fs_fs):
    s3fs_fs.mkdir("stores-rt")
    store, key = store_at("s3", "stores-rt/a/b", s3_server)
    assert key == "a/b"
    obstore.put(store, "a/b/x.txt", b"hello")
    assert s3fs_fs.cat_file("stores-rt/a/b/x.txt") == b"hello"  # the same object through s3fs
    assert store_of("s3", "stores-rt", dict(s3_server)) is store  # mapped once per process


def test_round_trip_on_azurite(azurite):
    store = store_of("az", azurite.container, azurite.options)
    obstore.put(store, "d/x.txt", b"hi")
    assert bytes(obstore.get(store, "d/x.txt").bytes()) == b"hi"
    assert [m["path"] for m in obstore.list(store, "d").collect()] == ["d/x.txt"]


def test_a_fork_after_use_errs_instead_of_hanging(s3_server, s3fs_fs):
    """obstore's runtime does not survive a fork: the child's first request would hang for good."""
    import os

    from dask_pfs.clusters.client import start_method
    from operators.stores import runtime_started

    s3fs_fs.mkdir("stores-fork")
    obstore.list_with_delimiter(store_of("s3", "stores-fork", s3_server), None)
    assert runtime_started() and start_method() == "forkserver"  # workers are not forked from this process
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            store_of("s3", "stores-fork", s3_server)
            os.write(w, b"no error")
        except StoreOptionError as exc:
            os.write(w, str(exc).encode()[:200])
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert b"forked after its parent used obstore" in os.read(r, 300) and status == 0


def test_fsspec_config_of_the_protocol_is_read(monkeypatch):
    from fsspec.config import conf

    monkeypatch.setitem(conf, "s3", {"endpoint_url": "http://127.0.0.1:7"})
    config, client, _ = store_config("s3", "b", {})
    assert config["endpoint"] == "http://127.0.0.1:7" and client["allow_http"] is True
