"""A listing-only S3 server over a generated key set: the 1,000,000-key listing of ``bench_objstore.py``.

moto answers each ListObjects request by sorting every key of the bucket (O(keys) per page of 1,000),
so a million-key bucket takes it over a second a page and as long to fill; neither tool could be
measured on it.  This stand-in holds ``--keys`` names ``PREFIX/k0000000``... (sizes and times made up,
no bodies) in a sorted list and answers ListObjectsV2 and V1 (``prefix``, ``delimiter``, ``start-after``,
``continuation-token``, ``marker``, ``max-keys``, ``encoding-type=url``) by bisection, so a page costs
the same at any depth; HEAD and GET of an object answer 404, a HEAD of the bucket 200.  It checks no
signature.  One line per request on stderr (the benchmark counts them, as it counts moto's).
Usage: ``python s3_listing_server.py --host 10.201.0.2 --port 9100 --bucket huge --keys 1000000``.
"""

from __future__ import annotations

import argparse
import bisect
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

STAMP = "2026-01-01T00:00:00.000Z"
ETAG = "&quot;d41d8cd98f00b204e9800998ecf8427e&quot;"
TOP = "\U0010ffff"


def make_handler(bucket: str, keys: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args) -> None:
            sys.stderr.write(f"{self.command} {self.path}\n")

        def reply(self, status: int, body: bytes = b"", kind: str = "application/xml") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            parts = urlsplit(self.path).path.strip("/").split("/", 1)
            self.reply(200 if parts == [bucket] else 404)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            parts = url.path.strip("/").split("/", 1)
            if parts[0] != bucket:
                return self.reply(404, b"<Error><Code>NoSuchBucket</Code></Error>")
            if len(parts) > 1 and parts[1]:
                return self.reply(404, b"<Error><Code>NoSuchKey</Code></Error>")
            q = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            if "location" in q:
                return self.reply(200, b"<LocationConstraint/>")
            self.reply(200, self.listing(q).encode())

        def listing(self, q: dict[str, str]) -> str:
            v2 = q.get("list-type") == "2"
            prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
            limit = max(1, min(int(q.get("max-keys") or 1000), 1000))
            after = unquote(q.get("continuation-token", "")) or q.get("start-after", "") or q.get("marker", "")
            enc = q.get("encoding-type") == "url"
            name = (lambda k: quote(k, safe="/")) if enc else (lambda k: k)
            i = max(bisect.bisect_right(keys, after), bisect.bisect_left(keys, prefix))
            out, prefixes, last = [], [], ""
            while i < len(keys) and len(out) + len(prefixes) < limit:
                k = keys[i]
                if not k.startswith(prefix):
                    break
                cut = k.find(delim, len(prefix)) if delim else -1
                if cut >= 0:
                    common = k[: cut + len(delim)]
                    prefixes.append(f"<CommonPrefixes><Prefix>{name(common)}</Prefix></CommonPrefixes>")
                    last = common
                    i = bisect.bisect_left(keys, common + TOP)
                    continue
                out.append(
                    f"<Contents><Key>{name(k)}</Key><LastModified>{STAMP}</LastModified><ETag>{ETAG}</ETag>"
                    f"<Size>{len(k)}</Size><StorageClass>STANDARD</StorageClass></Contents>"
                )
                last = k
                i += 1
            more = i < len(keys) and keys[i].startswith(prefix)
            head = [f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{bucket}</Name>',
                    f"<Prefix>{name(prefix)}</Prefix><MaxKeys>{limit}</MaxKeys>",
                    f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>"]  # fmt: skip
            if enc:
                head.append("<EncodingType>url</EncodingType>")
            if delim:
                head.append(f"<Delimiter>{name(delim)}</Delimiter>")
            if v2:
                head.append(f"<KeyCount>{len(out) + len(prefixes)}</KeyCount>")
                if more:
                    head.append(f"<NextContinuationToken>{quote(last, safe='')}</NextContinuationToken>")
            elif more:
                head.append(f"<NextMarker>{name(last)}</NextMarker>")
            return "".join(head + out + prefixes) + "</ListBucketResult>"

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--bucket", default="huge")
    ap.add_argument("--prefix", default="flat")
    ap.add_argument("--keys", type=int, default=1_000_000)
    a = ap.parse_args()
    keys = [f"{a.prefix}/k{i:07d}" for i in range(a.keys)]  # already sorted
    server = ThreadingHTTPServer((a.host, a.port), make_handler(a.bucket, keys))
    server.daemon_threads = True
    print(f"listening http://{a.host}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
