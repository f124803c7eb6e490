"""The embedded directory store: a private registry in a folder, for `file:///path` URLs.

It lets `mirrorgate serve` on a fresh machine proxy, gate and mirror with no other server: the
worker writes what it verified here, and the serve path reads the same directory as its private
upstream. File I/O runs in a thread, so the event loop never waits on a disk: the small reads of
one loop tick in one thread hand-off (`offload.batched`), a packument's and the fsync'd writes
each on its own.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from mirrorgate.errors import MirrorgateError
from mirrorgate.npm.mirrormark import read_mark
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.versions import highest, is_version_string
from mirrorgate.offload import batched

__all__ = ["FileStore", "Incoming", "StoreError", "StoredTarball"]

CHUNK = 256 * 1024


class StoreError(MirrorgateError):
    """The store cannot hold what it was given (bad version string, disk failure)."""


def _check_version(version: str) -> str:
    if not is_version_string(version):
        raise StoreError(f"{version!r} is not a version the file store can hold")
    return version


def _atomic_write(path: Path, data: bytes) -> None:
    """A temporary file in the same directory, flushed and fsynced, then `os.replace`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".incoming-", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _link(unnamed: int, path: Path) -> bool:
    """Link the unnamed file `unnamed` (the handoff's, holding the very bytes checked) in at
    `path`: fsynced, linked under a temporary name beside it, then `os.replace`d, like
    `_atomic_write` without writing the bytes again. False when this file cannot be linked
    here (another filesystem, no O_TMPFILE, no /proc): the caller writes the bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = f".incoming-{os.urandom(6).hex()}"
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(unnamed)
        try:
            # linkat(AT_SYMLINK_FOLLOW) through /proc: an O_TMPFILE file opened without O_EXCL
            # may be given a name (CPython uses linkat only with a directory descriptor)
            os.link(f"/proc/self/fd/{unnamed}", temporary, dst_dir_fd=directory)
        except OSError:
            return False
        try:
            os.replace(temporary, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            os.unlink(temporary, dir_fd=directory)
            raise
    finally:
        os.close(directory)
    return True


class Incoming:
    """A tarball arriving in the store: a temporary file, written in a thread chunk by chunk."""

    def __init__(self, path: Path, handle: BinaryIO) -> None:
        self.path = path
        self._handle = handle
        self._landed = False

    async def write(self, data: bytes) -> None:
        await asyncio.to_thread(self._handle.write, data)

    def land(self, path: Path) -> None:
        """Flush, fsync and move the file to `path` (atomic: `os.replace` in one directory)."""
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        os.replace(self.path, path)
        self._landed = True

    def discard(self) -> None:
        if not self._landed:
            self._handle.close()
            self.path.unlink(missing_ok=True)


class StoredTarball:
    """A stored tarball being read: its size, its first bytes, and the open file the rest is
    read from (None once read whole)."""

    def __init__(self, size: int, head: bytes, handle: BinaryIO | None) -> None:
        self.size = size
        self._head = head
        self._handle = handle

    async def chunks(self) -> AsyncIterator[bytes]:
        if self._head:
            yield self._head
        while self._handle is not None and (
                chunk := await batched(self._handle.read, CHUNK)):
            yield chunk

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class FileStore:
    """`<root>/<name>/tarballs/<file>.tgz` and `<root>/<name>/versions/<version>.json` (the
    manifest as admitted, with its `dist`). `<name>` (`pkg` or `@scope/pkg`) is built only from
    a validated `PackageName` and versions are checked (`_check_version`), so nothing from a
    request or a job can walk out of the root."""

    label = "private"

    def __init__(self, root: Path) -> None:
        self.root = root

    def _package_dir(self, name: PackageName) -> Path:
        if name.scope:
            return self.root / f"@{name.scope}" / name.bare
        return self.root / name.bare

    def _manifest_path(self, name: PackageName, version: str) -> Path:
        return self._package_dir(name) / "versions" / f"{_check_version(version)}.json"

    def check(self, name: PackageName, version: str, filename: str) -> None:
        """Raise StoreError unless the store can hold `version` under `filename`."""
        self._manifest_path(name, version)
        self.tarball_path(name, filename)

    def tarball_path(self, name: PackageName, filename: str) -> Path:
        if "/" in filename or "\\" in filename or filename.startswith("."):
            raise StoreError(f"{filename!r} is not a tarball filename")
        return self._package_dir(name) / "tarballs" / filename

    # --- reading -------------------------------------------------------------------------

    def _read_packument(self, name: PackageName) -> dict[str, Any] | None:
        """Assembled from the stored manifests on each read (the serve path caches it):
        `latest` is the highest stable version (else prerelease), a version's `time` its mirror
        mark's public publish time, else the manifest file's modification time."""
        directory = self._package_dir(name) / "versions"
        try:
            # os.scandir, not Path.glob: a fill of an offline install reads every name's
            # directory, and glob's selectors cost more than the reads they select
            with os.scandir(directory) as found:
                paths = sorted(entry.path for entry in found if entry.name.endswith(".json"))
        except OSError:
            return None
        versions: dict[str, Any] = {}
        times: dict[str, str] = {}
        for path in paths:
            try:
                with open(path, "rb") as handle:
                    manifest = orjson.loads(handle.read())
            except (OSError, orjson.JSONDecodeError):
                continue
            if not isinstance(manifest, dict) or not isinstance(manifest.get("version"), str):
                continue
            mark = read_mark(manifest)  # a mirrored version keeps its public publish time
            if mark is not None and mark.published:
                published = mark.published
            else:  # the file's own time, asked only of a version with no publish time
                try:
                    stamp = os.stat(path).st_mtime
                except OSError:
                    continue
                published = dt.datetime.fromtimestamp(stamp, dt.UTC).isoformat(
                    timespec="milliseconds").replace("+00:00", "Z")
            version = manifest["version"]
            versions[version] = manifest
            times[version] = published
        if not versions:
            return None
        latest = highest(list(versions))
        ordered = sorted(times.values())
        return {
            "_id": name.full,
            "name": name.full,
            "dist-tags": {"latest": latest} if latest else {},
            "versions": versions,
            "time": {"created": ordered[0], "modified": ordered[-1], **times},
        }

    async def packument(self, name: PackageName) -> dict[str, Any] | None:
        # on its own: every manifest of the name, too long a call to make others wait for
        return await asyncio.to_thread(self._read_packument, name)

    def _names(self) -> list[str]:
        found: list[str] = []
        try:
            tops = sorted(self.root.iterdir())
        except OSError:
            return found
        for top in tops:
            inner = sorted(top.iterdir()) if top.name.startswith("@") and top.is_dir() else [top]
            found.extend(f"{top.name}/{p.name}" if p is not top else p.name
                         for p in inner if (p / "versions").is_dir())
        return found

    async def names(self) -> list[str]:
        """Every package name the store holds a directory of versions for (`mirrorgate
        audit` walks these); unvalidated: a caller parses each before using it."""
        return await asyncio.to_thread(self._names)

    async def manifest(self, name: PackageName, version: str) -> dict[str, Any] | None:
        path = self._manifest_path(name, version)

        def read() -> dict[str, Any] | None:
            try:
                data = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                return None
            return data if isinstance(data, dict) else None

        return await batched(read)

    async def open_tarball(self, name: PackageName, filename: str) -> StoredTarball | None:
        """The stored tarball, opened, sized and its first `CHUNK` read in one thread
        hand-off (most tarballs are smaller: the whole of them); None when it is not there."""
        path = self.tarball_path(name, filename)

        def opened() -> StoredTarball | None:
            try:
                handle = path.open("rb")
            except OSError:
                return None
            try:
                size = os.fstat(handle.fileno()).st_size  # the file opened, whatever replaces it
                head = handle.read(CHUNK)
            except BaseException:
                handle.close()
                raise
            if len(head) >= size:
                handle.close()
                return StoredTarball(size, head, None)
            return StoredTarball(size, head, handle)

        return await batched(opened)

    async def tarball_chunks(self, name: PackageName, filename: str) -> AsyncIterator[bytes]:
        stored = await self.open_tarball(name, filename)
        if stored is None:
            raise FileNotFoundError(self.tarball_path(name, filename))
        try:
            async for chunk in stored.chunks():
                yield chunk
        finally:
            stored.close()

    # --- writing -------------------------------------------------------------------------

    def _write(self, name: PackageName, version: str, filename: str, manifest: dict[str, Any],
               tarball: bytes, unnamed: int | None) -> bool:
        def place(path: Path) -> None:
            if unnamed is None or not _link(unnamed, path):
                _atomic_write(path, tarball)

        return self._land(name, version, filename, manifest, place)

    def _land(self, name: PackageName, version: str, filename: str, manifest: dict[str, Any],
              place: Callable[[Path], None]) -> bool:
        manifest_path = self._manifest_path(name, version)
        if manifest_path.exists():
            return False
        # the tarball first: the manifest's presence makes the version exist, so a reader
        # never sees a version whose bytes are missing
        place(self.tarball_path(name, filename))
        _atomic_write(manifest_path, orjson.dumps(manifest))
        return True

    @asynccontextmanager
    async def incoming(self, name: PackageName) -> AsyncIterator[Incoming]:
        """A tarball being received for `name` (a client's publish), written as it arrives
        into a temporary file beside where it lands; removed unless `commit` took it."""
        directory = self._package_dir(name) / "tarballs"

        def open_temporary() -> Incoming:
            directory.mkdir(parents=True, exist_ok=True)
            handle, path = tempfile.mkstemp(prefix=".incoming-", dir=directory)
            return Incoming(Path(path), os.fdopen(handle, "wb"))

        receiving = await asyncio.to_thread(open_temporary)
        try:
            yield receiving
        finally:
            await asyncio.to_thread(receiving.discard)

    async def commit(self, name: PackageName, version: str, filename: str,
                     manifest: dict[str, Any], received: Incoming) -> bool:
        """Store the version whose tarball `received` holds, once; False when it was already
        there (nothing is overwritten)."""
        try:
            return await asyncio.to_thread(self._land, name, version, filename, manifest,
                                           received.land)
        except OSError as error:
            raise StoreError(f"cannot write {name.full}@{version} under {self.root}: "
                             f"{error.strerror}") from None

    async def put(self, name: PackageName, version: str, filename: str,
                  manifest: dict[str, Any], tarball: bytes, *,
                  unnamed: int | None = None) -> bool:
        """Store one version once; False when it was already there (nothing is overwritten),
        like a registry's 409. `unnamed`: an unnamed file holding exactly `tarball`, linked
        in as the stored tarball where it can be (`_link`): the bytes are not written again."""
        try:
            return await asyncio.to_thread(self._write, name, version, filename, manifest,
                                           tarball, unnamed)
        except OSError as error:
            raise StoreError(f"cannot write {name.full}@{version} under {self.root}: "
                             f"{error.strerror}") from None
