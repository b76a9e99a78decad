"""dask_pfs.runtime.allowed: what "under an allowed root" means, and the engine's own check
(``JobSpec.call``), which an Airflow operator's check cannot replace (it does not read manifests)."""

from __future__ import annotations

import pytest

from dask_pfs.errors import PfsError
from dask_pfs.remote.driver import JobSpec
from dask_pfs.runtime.allowed import check_allowed, normalise_roots, place_key


def test_places_resolve_dotdot_and_links(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    (root / "link").symlink_to(outside)
    check_allowed({"a": str(root), "b": f"{root}/x/../y", "c": f"file://{root}/new/dir"}, [str(root)])
    for bad in (f"{root}/../outside", str(root / "link"), str(root / "link" / "deeper"), f"{root}x"):
        with pytest.raises(PfsError, match="outside the allowed roots"):
            check_allowed({"path": bad}, [str(root)])


def test_every_set_must_allow_a_place(tmp_path):
    """The operator's roots and the connection's: both apply."""
    check_allowed({"p": str(tmp_path / "a" / "b")}, [str(tmp_path / "a")], [str(tmp_path)])
    with pytest.raises(PfsError, match="outside"):
        check_allowed({"p": str(tmp_path / "c")}, [str(tmp_path)], [str(tmp_path / "a")])


def test_urls_compare_by_place_not_credentials():
    assert place_key("sftp://bob:Pa55w0rdXYZ@host:22/data/../x") == "sftp://host:22/x"
    check_allowed({"p": "s3://bucket/data/part/x"}, ["s3://bucket/data"])
    with pytest.raises(PfsError, match="outside") as exc:
        check_allowed({"p": "sftp://bob:Pa55w0rdXYZ@host/data/../etc"}, ["sftp://host/data"])
    assert "Pa55w0rdXYZ" not in str(exc.value)
    with pytest.raises(PfsError, match="outside"):
        check_allowed({"p": "s3://other/data/x"}, ["s3://bucket/data"])


def test_roots_as_given():
    assert normalise_roots("/a, /b") == ("/a", "/b")
    assert normalise_roots(None) == ()
    for bad in ("relative", ["/a", ""], ","):
        with pytest.raises(PfsError):
            normalise_roots(bad)


def test_engine_refuses_a_manifest_that_recorded_a_tree_outside(tmp_path, dask_client):
    """The manifest lies inside the roots, the tree it recorded does not: the engine refuses before
    removing anything (the operator could not know without reading the manifest)."""
    from dask_pfs import scan
    from dask_pfs.runtime.progress import NullProgress

    allowed, victim = tmp_path / "allowed", tmp_path / "victim"
    allowed.mkdir(), victim.mkdir()
    (victim / "precious").write_text("x")
    scan(victim, allowed / "forged", client=dask_client)
    spec = JobSpec("remove", (), {"manifest": str(allowed / "forged")}, allowed_roots=((str(allowed),),))
    with pytest.raises(PfsError, match=r"the root recorded in manifest: .* outside the allowed roots"):
        spec.call(dask_client, NullProgress())
    assert (victim / "precious").exists()


def test_manifest_urls_take_only_the_protocols_pfs_keeps_manifests_on(tmp_path):
    """``http://`` (a GET its query string steers) and other fsspec protocols are refused in one line,
    before any request; the URL's credentials are not in the message (issue 44, items 5 and 6)."""
    import http.server
    import threading

    from dask_pfs.manifests.manifest import open_manifest

    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for url in (f"http://127.0.0.1:{server.server_port}/plain?x=", "ftp://bob:Pa55w0rdXYZ@host/m", "memory://m"):
            with pytest.raises(PfsError, match="is not one pfs keeps manifests on") as exc:
                open_manifest(url)
            assert "\n" not in str(exc.value) and "Pa55w0rdXYZ" not in str(exc.value)
    finally:
        server.shutdown()
    assert hits == []
