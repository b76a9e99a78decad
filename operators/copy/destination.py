"""What every copy destination does alike: one entry, a chunk of them on the pool, the verdict on
an existing entry.  The kinds: ``copy_local_destination`` (descriptors below a pinned root) and
``copy_fsspec_destination`` (object stores, sftp...); ``operators.copy.tasks.destination_of`` picks one per task.
"""

from __future__ import annotations

import os
from concurrent.futures import Executor

from operators.copy.sources import Source
from operators.copy.spec import CopySpec, Entry
from operators.ratelimit import take_bytes, take_ops
from operators.safety import AncestorCheck


class Destination:
    """What both kinds of destination do alike: one entry, and a chunk of them on the pool."""

    spec: CopySpec
    has_dirs: bool

    def copy_batch(self, src: Source, entries: list[Entry], pool: Executor) -> list[str | BaseException]:
        """Copy a chunk of files, symlinks and special files concurrently: ``file``, ``symlink``,
        ``skip`` or the error, per entry."""
        return list(pool.map(lambda e: self.copy_one(src, e), entries))

    def close(self) -> None:
        """Release what the destination holds open (a local one: its pinned directories)."""

    def copy_one(self, src: Source, e: Entry, retry: bool = True) -> str | BaseException:
        take_ops()
        try:
            if self.spec.check_existing:
                verdict = self.verdict(e)
                if verdict != "copy":
                    return verdict if verdict == "skip" else FileExistsError(verdict)
            kind = e.kind
            if kind == "symlink" and self.spec.follow_symlinks:
                kind = src.kind_followed(e)
            if kind == "symlink":
                return self.symlink(src, e)
            if kind == "other":
                return self.special(src, e)
            if kind == "directory":
                return NotImplementedError("symlink to a directory is not followed (-L copies symlinks to files)")
            if not (src.local and self.local):
                take_bytes(e.size or 0)  # fsspec moves the data itself: charge it up front
            self.write_file(src, e)
            return "file"
        except FileNotFoundError as exc:
            if retry and self.spec.make_parents and self.make_parent(e):
                return self.copy_one(src, e, retry=False)
            return exc
        except Exception as exc:
            return exc

    def verdict(self, e: Entry) -> str:
        """``"copy"``, ``"skip"`` (identical file there) or an error message (exists and differs)."""
        same = self.same(e)
        if same is None:
            return "copy"
        if self.spec.on_exist == "ignore":  # --ignore-existing: never touch what is there
            return "skip"
        if same and self.spec.on_exist != "overwrite":
            return "skip"
        if self.spec.on_exist == "error":
            return self.differs(e)
        return "copy"

    def differs(self, e: Entry) -> str:
        where = os.fsdecode(self.path(e.out_rel))
        return f"exists and differs (size or mtime): {where}; use --update, --ignore-existing or --overwrite"

    # what each kind says --------------------------------------------------

    local: bool

    def path(self, rel: bytes) -> bytes | str:
        raise NotImplementedError

    def same(self, e: Entry) -> bool | None:
        """Whether the destination holds ``e`` already (None: nothing there)."""
        raise NotImplementedError

    def make_parent(self, e: Entry) -> bool:
        raise NotImplementedError

    def ancestors(self) -> AncestorCheck | None:
        """A check that no directory above an entry became a symlink (None: nothing to check)."""
        return None

    def make_dir(self, e: Entry) -> bool:
        """Create the directory of ``e``: True when made, False when a real one was there."""
        raise NotImplementedError

    def set_meta(self, src: Source, e: Entry) -> None:
        raise NotImplementedError

    def write_file(self, src: Source, e: Entry) -> None:
        raise NotImplementedError

    def symlink(self, src: Source, e: Entry) -> str:
        raise NotImplementedError

    def special(self, src: Source, e: Entry) -> str | BaseException:
        raise NotImplementedError


__all__ = ["Destination"]
