"""Where advisories come from: a zip, a directory, an https URL with ETag; and what a bad new
copy does (nothing: the old index stays in force and the failure is logged and counted).

The attack a corrupt copy stands for: a truncated download, or a copy replaced by junk, must not
switch the gate off by replacing a full index with an empty one.
"""

from __future__ import annotations

import asyncio
import io
import zipfile
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
import structlog

from mirrorgate.advisories import AdvisoryFeed
from mirrorgate.advisories.source import SourceError, read_zip
from tests.advisories.builders import touch
from tests.advisories.https_server import ExportServer
from tests.advisories.records import (
    fixture_records,
    malware,
    write_directory,
    write_zip,
    zip_bytes,
)
from tests.rules.builders import NOW

HOUR = timedelta(hours=1)


def feed_for(source: Path | str, **options: object) -> AdvisoryFeed:
    return AdvisoryFeed(str(source), HOUR, now=lambda: NOW, **options)  # type: ignore[arg-type]


async def test_a_zip_export_loads_into_the_index(tmp_path: Path) -> None:
    feed = feed_for(write_zip(tmp_path / "osv.zip", fixture_records()))
    assert await feed.refresh() == "loaded"
    assert feed.index is not None
    assert feed.index.records == 7
    assert [h.advisory.id for h in feed.index.hits("adv-evil", "1.0.0")] == ["MAL-2026-1001"]


async def test_a_directory_of_records_loads_into_the_same_index(tmp_path: Path) -> None:
    feed = feed_for(write_directory(tmp_path / "osv", fixture_records()))
    assert await feed.refresh() == "loaded"
    assert feed.index is not None
    assert feed.index.records == 7
    assert [h.advisory.id for h in feed.index.hits("@adv/scoped", "1.3.9")] == [
        "GHSA-scop-0000-0006"]


async def test_an_unchanged_local_copy_is_not_parsed_again(tmp_path: Path) -> None:
    feed = feed_for(write_zip(tmp_path / "osv.zip", fixture_records()))
    await feed.refresh()
    first = feed.index
    assert await feed.refresh() == "unchanged"
    assert feed.index is first


async def test_a_new_local_copy_is_swapped_in_whole(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "osv.zip", fixture_records())
    touch(path, NOW - 2 * HOUR)
    feed = feed_for(path)
    await feed.refresh()
    write_zip(path, [*fixture_records(), malware("MAL-2026-2000", "newly-bad")])
    touch(path, NOW - HOUR)
    assert await feed.refresh() == "loaded"
    assert feed.index is not None
    assert feed.index.records == 8
    assert feed.state.generation == 2
    assert feed.age(NOW) == HOUR


@pytest.mark.parametrize("damage", ["truncated", "junk", "empty zip", "missing"])
async def test_a_bad_new_copy_keeps_the_old_index_and_is_logged(
    tmp_path: Path, damage: str,
) -> None:
    path = write_zip(tmp_path / "osv.zip", fixture_records())
    outcomes: list[str] = []
    feed = feed_for(path, on_outcome=outcomes.append)
    await feed.refresh()
    good = feed.index
    whole = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(whole[: len(whole) // 2])
    elif damage == "junk":
        path.write_bytes(b"<html>503 Service Unavailable</html>")
    elif damage == "empty zip":
        write_zip(path, [])
    else:
        path.unlink()
    with structlog.testing.capture_logs() as logs:
        assert await feed.refresh() == "failed"
    assert feed.index is good
    assert feed.state.generation == 1
    assert outcomes == ["loaded", "failed"]
    (line,) = [entry for entry in logs if entry["event"] == "advisories_load_failed"]
    assert line["kept_records"] == 7
    assert line["log_level"] == "error"


def test_a_member_that_is_not_json_is_skipped_and_the_rest_load(tmp_path: Path) -> None:
    path = tmp_path / "osv.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("MAL-1.json", orjson.dumps(malware("MAL-1", "bad")))
        archive.writestr("broken.json", b"{not json")
    index = read_zip(path, str(path))
    assert index.records == 1
    assert index.skipped == 1


def test_an_http_url_is_refused_before_anything_is_fetched() -> None:
    from mirrorgate.rules import RulesError, parse_rules

    with pytest.raises(RulesError, match="https only"):
        parse_rules('[advisories]\nsource = "http://127.0.0.1:9/osv.zip"\n')


async def test_a_zip_read_in_one_piece_that_is_cut_short_is_a_source_error(
    tmp_path: Path,
) -> None:
    whole = zip_bytes(fixture_records())
    with pytest.raises(SourceError, match="not a readable zip"):
        read_zip(io.BytesIO(whole[:-40]), "cut")


# --- https ---------------------------------------------------------------------------------


@pytest.fixture
async def export_server(tmp_path: Path) -> AsyncIterator[ExportServer]:
    server = ExportServer(tmp_path, zip_bytes(fixture_records()))
    await server.start()
    yield server
    await server.stop()


async def test_an_https_export_loads_then_a_refresh_is_one_304(
    export_server: ExportServer,
) -> None:
    feed = feed_for(export_server.url, ssl_context=export_server.client_context())
    assert await feed.refresh() == "loaded"
    assert await feed.refresh() == "unchanged"
    assert export_server.statuses == [200, 304]
    assert export_server.requests[1]["If-None-Match"] == export_server.etag
    assert export_server.requests[1]["If-Modified-Since"] == "Mon, 30 Nov 2026 12:00:00 GMT"
    assert feed.state.generation == 1


async def test_a_new_https_export_is_swapped_in_and_a_truncated_one_is_not(
    export_server: ExportServer,
) -> None:
    feed = feed_for(export_server.url, ssl_context=export_server.client_context())
    await feed.refresh()
    newer = zip_bytes([*fixture_records(), malware("MAL-2026-3000", "fresh-bad")])
    export_server.replace(newer)
    assert await feed.refresh() == "loaded"
    assert feed.index is not None
    assert feed.index.hits("fresh-bad", "1.0.0")
    export_server.replace(newer[: len(newer) - 100])
    assert await feed.refresh() == "failed"
    assert feed.index.hits("fresh-bad", "1.0.0")
    assert feed.state.generation == 2


async def test_a_certificate_the_client_does_not_trust_is_a_failed_load(
    export_server: ExportServer,
) -> None:
    feed = feed_for(export_server.url)  # the system's trust store: the test CA is not in it
    with structlog.testing.capture_logs() as logs:
        assert await feed.refresh() == "failed"
    assert feed.index is None
    assert any("ClientConnectorCertificateError" in entry.get("reason", "")
               for entry in logs)


async def test_the_refresh_loop_retries_a_failed_first_load_soon_and_stops_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mirrorgate.advisories import feed as feed_module

    monkeypatch.setattr(feed_module, "RETRY_AFTER_FAILURE", 0.05)
    path = tmp_path / "osv.zip"  # not synced yet
    outcomes: list[str] = []
    seen = {"failed": asyncio.Event(), "loaded": asyncio.Event()}

    def record_outcome(outcome: str) -> None:
        outcomes.append(outcome)
        seen[outcome].set()

    feed = feed_for(path, on_outcome=record_outcome)  # refresh: one hour
    stop = asyncio.Event()
    task = asyncio.create_task(feed.run(stop))
    async with asyncio.timeout(10):
        await seen["failed"].wait()
        write_zip(path, fixture_records())
        await seen["loaded"].wait()
    assert outcomes == ["failed", "loaded"]
    stop.set()
    async with asyncio.timeout(5):
        await task


async def test_a_signed_urls_query_never_reaches_the_log(tmp_path: Path) -> None:
    secret = "X-Goog-Signature=s3cr3t"  # noqa: S105 - a fake token, to be kept out of logs
    feed = feed_for(f"https://127.0.0.1:9/osv/all.zip?{secret}")
    with structlog.testing.capture_logs() as logs:
        assert await feed.refresh() == "failed"
    assert secret not in repr(logs)
    assert logs[0]["source"] == "https://127.0.0.1:9/osv/all.zip"
