"""Reading an OSV export into an `AdvisoryIndex`: a zip, a directory, or an https URL.

Each function here either returns a whole index or raises `SourceError` with a sentence saying
what is wrong; the feed keeps its old index on an error, so a corrupt, truncated or empty copy
never replaces a good one.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import aiohttp
import orjson

from mirrorgate.advisories.index import AdvisoryIndex, IndexBuilder
from mirrorgate.advisories.osv import parse_record
from mirrorgate.errors import MirrorgateError
from mirrorgate.logs import loggable_url

__all__ = ["MAX_EXPORT_BYTES", "MAX_RECORD_BYTES", "Download", "SourceError", "fetch_url",
           "is_url", "local_signature", "probe_local", "probe_url", "read_local", "read_zip"]

MAX_RECORD_BYTES = 4 * 1024 * 1024  # larger members are skipped: a zip bomb would be read whole
MAX_EXPORT_BYTES = 2 * 1024 * 1024 * 1024
_CHUNK = 1024 * 1024


class SourceError(MirrorgateError):
    """An advisory source that could not be read into an index; the text says why."""


def is_url(source: str) -> bool:
    return "://" in source


def _finish(builder: IndexBuilder, where: str) -> AdvisoryIndex:
    # an empty export is far likelier a broken download than a world without advisories
    if builder.records == 0:
        raise SourceError(f"{where} holds no npm OSV records (is it the npm export, complete?)")
    return builder.build()


def _parse_member(builder: IndexBuilder, data: bytes) -> None:
    if builder.malware_only and b'"MAL-' not in data:
        return  # not malware by its id or an alias: left unparsed (most of the export's CPU)
    try:
        builder.add(parse_record(orjson.loads(data)))
    except orjson.JSONDecodeError:
        builder.skipped += 1


def read_zip(file: str | Path | IO[bytes], where: str, *,
             malware_only: bool = False) -> AdvisoryIndex:
    """Every `.json` member of the zip at `file` (a path or an open binary file). A damaged
    directory or member CRC (a truncated download) refuses the whole zip; a member that is
    not JSON is skipped and counted, as the real export may hold odd records."""
    builder = IndexBuilder(malware_only=malware_only)
    try:
        with zipfile.ZipFile(file) as archive:
            for info in archive.infolist():
                if info.is_dir() or not info.filename.endswith(".json"):
                    continue
                if info.file_size > MAX_RECORD_BYTES:
                    builder.skipped += 1
                    continue
                _parse_member(builder, archive.read(info))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as error:
        raise SourceError(f"{where} is not a readable zip ({error}); a truncated or corrupt "
                          "copy is ignored") from None
    except OSError as error:
        raise SourceError(f"cannot read {where}: {error.strerror or error}") from None
    return _finish(builder, where)


def _json_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json") if p.is_file())


def read_directory(root: Path, *, malware_only: bool = False) -> AdvisoryIndex:
    """Every `*.json` file under `root`, one OSV record each."""
    builder = IndexBuilder(malware_only=malware_only)
    try:
        for path in _json_files(root):
            if path.stat().st_size > MAX_RECORD_BYTES:
                builder.skipped += 1
                continue
            _parse_member(builder, path.read_bytes())
    except OSError as error:
        raise SourceError(f"cannot read {root}: {error.strerror or error}") from None
    return _finish(builder, str(root))


def read_local(path: Path, *, malware_only: bool = False) -> AdvisoryIndex:
    if path.is_dir():
        return read_directory(path, malware_only=malware_only)
    return read_zip(path, str(path), malware_only=malware_only)


def local_signature(path: Path) -> tuple[int, int]:
    """What changes when a local source is replaced: (newest mtime in ns, size or file count).
    Raises OSError when it cannot be read."""
    if path.is_dir():
        files = _json_files(path)
        newest = max((f.stat().st_mtime_ns for f in files), default=path.stat().st_mtime_ns)
        return newest, len(files)
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def probe_local(path: Path) -> str:
    """A sentence saying what the local source holds; raises SourceError when unreadable.
    Cheap: a zip's directory is read, not its records."""
    try:
        if path.is_dir():
            return f"a directory of {len(_json_files(path))} JSON files"
        with zipfile.ZipFile(path) as archive:
            count = sum(1 for name in archive.namelist() if name.endswith(".json"))
        return f"a zip of {count} JSON records"
    except (zipfile.BadZipFile, EOFError, ValueError) as error:
        raise SourceError(f"{path} is not a readable zip ({error})") from None
    except OSError as error:
        raise SourceError(f"cannot read {path}: {error.strerror or error}") from None


async def probe_url(url: str, seconds: float = 10.0) -> str:
    """A sentence saying the URL answers a HEAD; raises SourceError when it does not."""
    shown = loggable_url(url)
    try:
        async with aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=seconds)) as session, session.head(
                url, allow_redirects=False) as response:
            if response.status != 200:
                raise SourceError(f"{shown} answered {response.status} to a HEAD request")
            size = response.content_length
            return f"answers 200{f' ({size} bytes)' if size is not None else ''}"
    except (aiohttp.ClientError, TimeoutError) as error:
        raise SourceError(f"cannot reach {shown}: {type(error).__name__}") from None


@dataclass(frozen=True)
class Download:
    """A conditional GET's outcome: `index` None means 304 (unchanged)."""

    index: AdvisoryIndex | None
    etag: str | None
    last_modified: str | None


async def fetch_url(url: str, *, etag: str | None, last_modified: str | None,
                    seconds: float, ssl_context: ssl.SSLContext | None = None,
                    malware_only: bool = False) -> Download:
    """The export at `url` read into an index, or `Download(None, ...)` on a 304.

    The URL must be https; the download is streamed to a temporary file, bounded by
    `MAX_EXPORT_BYTES`, and conditional (If-None-Match, If-Modified-Since), so an unchanged
    export costs one 304. The zip is parsed in a thread, so the event loop keeps serving.
    """
    shown = loggable_url(url)
    if not url.startswith("https://"):
        raise SourceError(f"{shown} is not an https URL; advisories are fetched over https only")
    headers = {"Accept-Encoding": "identity"}
    if etag is not None:
        headers["If-None-Match"] = etag
    if last_modified is not None:
        headers["If-Modified-Since"] = last_modified
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed below, after the thread parses it
    try:
        try:
            async with aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=seconds)) as session, session.get(
                    url, headers=headers, allow_redirects=False,
                    ssl=ssl_context if ssl_context is not None else True) as response:
                if response.status == 304:
                    return Download(None, etag, last_modified)
                if response.status != 200:
                    raise SourceError(f"{shown} answered {response.status}")
                size = 0
                async for chunk in response.content.iter_chunked(_CHUNK):
                    size += len(chunk)
                    if size > MAX_EXPORT_BYTES:
                        raise SourceError(f"{shown} is larger than {MAX_EXPORT_BYTES} bytes")
                    spool.write(chunk)
                declared = response.content_length
                if declared is not None and size != declared:
                    raise SourceError(f"{shown} sent {size} of {declared} bytes")
                new_etag = response.headers.get("ETag")
                new_modified = response.headers.get("Last-Modified")
        except (aiohttp.ClientError, TimeoutError) as error:
            # an error's text may quote the URL, query (a signed URL's token) included
            detail = str(error).replace(url, shown)[:200]
            raise SourceError(f"cannot fetch {shown}: {type(error).__name__} {detail}") from None
        spool.seek(0, os.SEEK_SET)
        index = await asyncio.to_thread(read_zip, spool, shown, malware_only=malware_only)
        return Download(index, new_etag, new_modified)
    finally:
        spool.close()
