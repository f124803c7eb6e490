"""The private upstream as the serve path sees it: a packument and a tarball, or nothing.

The organisation's registry may be a real npm registry over HTTP(S) or the embedded directory
store; the serve path asks both the same two questions through `PrivateSource`, so it never
checks which one it has.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from mirrorgate.npm.names import PackageName
from mirrorgate.upstream.client import FILLS, TARBALLS, Upstream, UpstreamError
from mirrorgate.upstream.filestore import FileStore, StoreError

__all__ = ["HttpPrivate", "PrivateSource", "StorePrivate", "TarballBody", "open_private"]


@dataclass(frozen=True, slots=True)
class TarballBody:
    size: int | None
    chunks: AsyncIterator[bytes]


AbstractTarball = AbstractAsyncContextManager[TarballBody | None]


class PrivateSource(Protocol):
    """A miss is None; a failure raises UpstreamError, and the serve path falls back to public:
    a private registry that is down must not stop builds."""

    label: str

    async def packument(self, name: PackageName) -> dict[str, Any] | None: ...

    def tarball(self, name: PackageName, filename: str) -> AbstractTarball: ...


class HttpPrivate:
    label = "private"

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    async def packument(self, name: PackageName) -> dict[str, Any] | None:
        # the full form (get_json's default Accept): the abbreviated one drops the mirror mark,
        # and without it every mirrored version would read as first-party
        answer = await self.upstream.get_json(name.url_path(), pool=FILLS)
        return answer.document if answer.status == 200 else None

    @asynccontextmanager
    async def _tarball(self, name: PackageName, filename: str) -> AsyncIterator[TarballBody | None]:
        # the npm-standard path (`name/-/file.tgz`), which Verdaccio, Artifactory, Nexus and
        # CodeArtifact all serve: a private hit costs one request and no packument read
        url = self.upstream.url(name.tarball_path(filename))
        async with self.upstream.stream(url, pool=TARBALLS) as response:
            if response is None:
                yield None
                return
            yield TarballBody(response.size, response.chunks)

    def tarball(self, name: PackageName, filename: str) -> AbstractTarball:
        return self._tarball(name, filename)


class StorePrivate:
    label = "private"

    def __init__(self, store: FileStore) -> None:
        self.store = store

    async def packument(self, name: PackageName) -> dict[str, Any] | None:
        return await self.store.packument(name)

    @asynccontextmanager
    async def _tarball(self, name: PackageName, filename: str) -> AsyncIterator[TarballBody | None]:
        try:
            size = await self.store.tarball_size(name, filename)
        except StoreError:
            size = None
        if size is None:
            yield None
            return
        yield TarballBody(size, self.store.tarball_chunks(name, filename))

    def tarball(self, name: PackageName, filename: str) -> AbstractTarball:
        return self._tarball(name, filename)


def store_root(url: str) -> Path:
    return Path(urlsplit(url).path)


def open_private(url: str, upstream: Upstream | None) -> PrivateSource:
    """The private source for a configured URL: the file store for file://, else HTTP."""
    if url.startswith("file://"):
        return StorePrivate(FileStore(store_root(url)))
    if upstream is None:
        raise UpstreamError("private", "refused", "an HTTP private upstream needs a client")
    return HttpPrivate(upstream)
