"""Big files to an object store: one multipart upload whose parts are uploaded by parallel range tasks.

A POSIX destination takes the byte ranges of a big file into one preallocated temp file
(``copy.copy_part``).  An object store has no such file; a multipart upload plays its part:

* :func:`start_upload` creates the upload (CreateMultipartUpload) once per file;
* each :func:`upload_range` task uploads the parts of one byte range (UploadPart, or
  UploadPartCopy when source and destination are the same store, so no data crosses the
  worker); a retried task uploads the same part numbers again, which replaces them;
* :func:`complete_upload` joins the parts in part-number order (CompleteMultipartUpload): the
  object appears whole and at once, so there is no temp name and nothing to rename.

A failed file is aborted (AbortMultipartUpload), in the task or by the driver, so its parts do
not keep using storage.  A resumed run hands :func:`start_upload` the upload id its journal
recorded: if that upload is still open its parts (ListParts) are reused, else a new one starts.
Every call goes through s3fs (``fs.call_s3``: its credentials, retries and extra arguments).

Left open, at worst: an upload whose start task died after creating it (the engine's retry makes
another; the orphan holds no parts), and parts still in flight when the driver aborted (S3 may
keep those).  A bucket lifecycle rule ``AbortIncompleteMultipartUpload`` cleans up both.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, NamedTuple

from operators.copy.attrs import MetadataRefused
from operators.copy.fsspec_destination import FsspecDestination, object_metadata
from operators.copy.sources import LocalSource, source_of
from operators.copy.spec import CopySpec, Entry, Outcome, remote_path
from operators.ratelimit import take_bytes, take_ops

MiB = 1 << 20
MIN_PART = 5 * MiB  # S3: every part but the last is at least this big
PART_SIZE = 8 * MiB  # parts a range is cut into (the AWS CLI's default chunk size)
MAX_PARTS = 10_000  # S3: part numbers run from 1 to 10,000
MULTIPART_PROTOCOLS = frozenset({"s3", "s3a"})


class Part(NamedTuple):
    number: int  # S3 part number: ascending with the offset, gaps allowed
    offset: int
    length: int


def has_multipart(spec: CopySpec) -> bool:
    """True when the destination takes big files as multipart uploads (s3fs)."""
    return spec.dst_protocol in MULTIPART_PROTOCOLS


def plan_parts(size: int, split_size: int, part_size: int = PART_SIZE) -> list[list[Part]]:
    """The parts of each range task.

    Every part but the file's last has the same size (some S3-compatible stores demand it):
    ``part_size``, or the whole range when ranges are under two parts; at least 5 MiB; larger
    when the file would need more than 10,000 parts.  A range is a whole number of parts, as
    close to ``split_size`` as that allows.  Part numbers follow the offset (``offset // part
    + 1``), so a retried range uploads the same numbers.
    """
    span = max(split_size, MIN_PART)
    part = span if span < 2 * max(part_size, MIN_PART) else max(part_size, MIN_PART)
    if -(-size // part) > MAX_PARTS:
        need = -(-size // MAX_PARTS)
        part = -(-need // MiB) * MiB  # whole MiB
    per = max(1, span // part)
    parts = [Part(i + 1, off, min(part, size - off)) for i, off in enumerate(range(0, size, part))]
    return [parts[i : i + per] for i in range(0, len(parts), per)] or [[Part(1, 0, 0)]]


def _where(spec: CopySpec, e: Entry) -> tuple[Any, str, str]:
    dst = FsspecDestination(spec)
    bucket, key, _ = dst.fs.split_path(dst.path(e.out_rel))
    return dst.fs, bucket, key


def start_upload(spec: CopySpec, e: Entry, previous: str | None = None) -> dict:
    """Begin (or, with ``previous`` still open, go on with) the upload of ``e``.

    Returns ``{"status": "copy", "upload_id", "parts": {number: part header}}`` (the parts the
    open upload already holds), ``{"status": "skip"}`` or ``{"status": "error", "message"}``
    when the destination already exists.
    """
    take_ops()
    fs, bucket, key = _where(spec, e)
    if spec.check_existing:
        verdict = FsspecDestination(spec).verdict(e)
        if verdict != "copy":
            if previous:
                abort_upload(spec, e, previous)
            return {"status": "skip"} if verdict == "skip" else {"status": "error", "message": verdict}
    if previous:
        parts = _list_parts(fs, bucket, key, previous)
        if parts is not None:
            return {"status": "copy", "upload_id": previous, "parts": parts}
    source = source_of(spec)
    try:
        meta, refused = object_metadata(spec, source, e)  # reported once the upload completes
    finally:
        source.close()
    mpu = fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key, **({"Metadata": meta} if meta else {}))
    return {"status": "copy", "upload_id": mpu["UploadId"], "parts": {}, "refused": refused}


def _list_parts(fs, bucket: str, key: str, upload_id: str) -> dict[int, dict] | None:
    """Parts an open upload holds (number -> header with its size), None when it is gone."""
    parts: dict[int, dict] = {}
    marker = 0
    try:
        while True:
            out = fs.call_s3(
                "list_parts", Bucket=bucket, Key=key, UploadId=upload_id, PartNumberMarker=marker, MaxParts=1000
            )
            for p in out.get("Parts", []):
                parts[p["PartNumber"]] = _header(p["PartNumber"], p) | {"Size": p["Size"]}
            if not out.get("IsTruncated"):
                return parts
            marker = out["NextPartNumberMarker"]
    except FileNotFoundError:  # NoSuchUpload: aborted, completed or expired
        return None


def _header(number: int, response: dict) -> dict:
    """What CompleteMultipartUpload needs of a part (as s3fs does: the ETag, a SHA-256 if there is one)."""
    head = {"PartNumber": number, "ETag": response["ETag"]}
    if "ChecksumSHA256" in response:
        head["ChecksumSHA256"] = response["ChecksumSHA256"]
    return head


def _server_side(spec: CopySpec) -> bool:
    """Source and destination in the same store: UploadPartCopy moves the bytes inside it."""
    return spec.src_protocol in MULTIPART_PROTOCOLS and has_multipart(spec) and spec.src_options == spec.dst_options


COPY_MAX = 5 << 30  # S3: the biggest object one CopyObject copies


def one_copy(spec: CopySpec, e: Entry) -> bool:
    """A big file the store copies in one request: within one bucket (one ``obstore`` store, so
    ``operators.copy.obstore_destination`` copies it with CopyObject) and at most ``COPY_MAX`` bytes;
    a multipart upload of ``UploadPartCopy`` parts only makes more requests of the same copy."""
    if not (_server_side(spec) and (e.size or 0) <= COPY_MAX):
        return False
    return spec.src_root.lstrip("/").split("/", 1)[0] == spec.dst_root.lstrip("/").split("/", 1)[0]


def upload_range(spec: CopySpec, e: Entry, upload: dict, parts: list[Part]) -> list[dict]:
    """Upload the parts of one byte range; returns their headers for the complete call.

    Parts the upload already holds with the right size (a resumed run) are not sent again.
    Raises on any error, so the engine retries the task (same part numbers: idempotent).
    """
    if upload["status"] != "copy":
        return []
    fs, bucket, key = _where(spec, e)
    have = upload.get("parts") or {}
    ids = {"Bucket": bucket, "Key": key, "UploadId": upload["upload_id"]}
    out = []
    with contextlib.ExitStack() as stack:
        read = None
        for p in parts:
            known = have.get(p.number)
            if known is not None and known["Size"] == p.length:
                out.append({k: v for k, v in known.items() if k != "Size"})
                continue
            take_bytes(p.length)
            if _server_side(spec):
                sbucket, skey, _ = fs.split_path(remote_path(spec.src_root, e.rel))
                r = fs.call_s3(
                    "upload_part_copy",
                    **ids,
                    PartNumber=p.number,
                    CopySource={"Bucket": sbucket, "Key": skey},
                    CopySourceRange=f"bytes={p.offset}-{p.offset + p.length - 1}",
                )
                out.append(_header(p.number, r["CopyPartResult"]))
                continue
            if read is None:
                read = stack.enter_context(_reader(spec, e))
            r = fs.call_s3("upload_part", **ids, PartNumber=p.number, Body=read(p.offset, p.length))
            out.append(_header(p.number, r))
    return out


@contextlib.contextmanager
def _reader(spec: CopySpec, e: Entry):
    """A ``read(offset, length) -> bytes`` on the source file; a short read raises (the file shrank)."""
    source = source_of(spec)
    src = source.path(e.rel)
    if isinstance(source, LocalSource):
        try:
            fd = source.open(e.rel, os.O_RDONLY | (0 if spec.follow_symlinks else os.O_NOFOLLOW))
        finally:
            source.close()  # the file is open: its directories are no longer needed
        try:

            def read(offset: int, length: int) -> bytes:
                chunks, pos, end = [], offset, offset + length
                while pos < end:
                    data = os.pread(fd, end - pos, pos)
                    if not data:
                        break
                    chunks.append(data)
                    pos += len(data)
                return _whole(b"".join(chunks), offset, length, src)

            yield read
        finally:
            os.close(fd)
    else:
        yield lambda offset, length: _whole(source.read_bytes(e, offset, length), offset, length, src)


def _whole(data: bytes, offset: int, length: int, src) -> bytes:
    if len(data) != length:
        raise OSError(
            f"{os.fsdecode(src)}: read {len(data)} of {length} bytes at offset {offset}; "
            "the source changed during the copy"
        )
    return data


def complete_upload(spec: CopySpec, e: Entry, upload: dict, *ranges: list[dict]) -> Outcome:
    """Runs once every range is uploaded: CompleteMultipartUpload, or an abort when that fails."""
    out = Outcome()
    if upload["status"] == "skip":
        out.skipped += 1
        return out
    if upload["status"] != "copy":
        out.fail(e.out_rel, upload["message"])
        return out
    fs, bucket, key = _where(spec, e)
    parts = sorted((p for r in ranges for p in r), key=lambda p: p["PartNumber"])
    try:
        try:
            fs.call_s3(
                "complete_multipart_upload",
                Bucket=bucket,
                Key=key,
                UploadId=upload["upload_id"],
                MultipartUpload={"Parts": parts},
            )
        except FileNotFoundError:
            # NoSuchUpload: an earlier attempt of this task completed it (then the object is there) or it was aborted
            fs.invalidate_cache(remote_path(spec.dst_root, e.out_rel))
            if fs.info(remote_path(spec.dst_root, e.out_rel)).get("size") != e.size:
                raise
        fs.invalidate_cache(remote_path(spec.dst_root, e.out_rel))
        if upload.get("refused"):
            out.fail(e.out_rel, MetadataRefused(upload["refused"]))  # written, without some attributes
            return out
        out.files += 1
        out.bytes += e.size or 0
    except Exception as exc:
        abort_upload(spec, e, upload["upload_id"])
        out.fail(e.out_rel, exc)
    return out


def abort_upload(spec: CopySpec, e: Entry, upload_id: str) -> BaseException | None:
    """AbortMultipartUpload, quietly: an upload already gone is fine; other errors are returned."""
    fs, bucket, key = _where(spec, e)
    try:
        fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id)
    except FileNotFoundError:
        pass
    except Exception as exc:
        return exc
    return None
