"""The publish document: the whole admitted manifest, a dist for the bytes sent, honest tags."""

from __future__ import annotations

import base64

import orjson
import pytest

from mirrorgate.npm.mirrormark import MirrorMark, read_mark
from mirrorgate.npm.names import parse_name
from mirrorgate.npm.publish import (
    NON_LATEST_TAG,
    choose_dist_tags,
    publish_document,
    says_already_exists,
    version_manifest,
)


@pytest.mark.parametrize(("version", "tags", "expected"), [
    ("1.0.0", None, {"latest": "1.0.0"}),
    ("1.0.0", {}, {"latest": "1.0.0"}),
    ("2.0.0-rc.1", {}, {"latest": "2.0.0-rc.1"}),
    ("2.0.0", {"latest": "1.0.0"}, {"latest": "2.0.0"}),
    ("1.0.0", {"latest": "2.0.0"}, {NON_LATEST_TAG: "1.0.0"}),
    ("2.0.0", {"latest": "2.0.0"}, {"latest": "2.0.0"}),
    ("3.0.0-rc.1", {"latest": "2.0.0"}, {NON_LATEST_TAG: "3.0.0-rc.1"}),
    ("3.0.0", {"latest": "3.0.0-rc.1"}, {"latest": "3.0.0"}),
    ("1.0.0", {"latest": "not-a-version"}, {NON_LATEST_TAG: "1.0.0"}),
    ("legacy", {"latest": "1.0.0"}, {NON_LATEST_TAG: "legacy"}),
])
def test_latest_moves_only_forward_to_a_release(version: str, tags: dict[str, str] | None,
                                                expected: dict[str, str]) -> None:
    assert choose_dist_tags(version, tags) == expected


@pytest.mark.parametrize(("status", "body", "exists"), [
    (409, b'{"error":"this package is already present"}', True),
    (409, b"", True),
    (403, b'{"error":"You cannot publish over the previously published versions: 1.0.0."}',
     True),
    (400, b'{"errors":[{"status":400,"message":"Repository does not allow updating assets"}]}',
     True),
    (403, b'{"error":"artifact already exists"}', True),
    (403, b'{"error":"user mirrorgate is not allowed to publish package left-pad"}', False),
    (400, b'{"error":"bad data"}', False),
    (500, b"already exists", False),
])
def test_already_exists_answers_are_recognised_by_status_and_wording(
        status: int, body: bytes, exists: bool) -> None:
    assert says_already_exists(status, body) is exists


ADMITTED = {
    "name": "@acme/widget",
    "version": "1.4.2",
    "description": "a widget",
    "dependencies": {"left-pad": "^1.3.0"},
    "bin": {"widget": "bin/widget.js"},
    "engines": {"node": ">=18"},
    "scripts": {"test": "node test.js"},
    "_npmUser": {"name": "someone"},
    "dist": {
        "tarball": "http://127.0.0.1:1/@acme/widget/-/widget-1.4.2.tgz",
        "integrity": "sha512-public",
        "shasum": "0" * 40,
        "fileCount": 3,
        "unpackedSize": 1234,
        "signatures": [{"keyid": "SHA256:public", "sig": "..."}],
        "attestations": {"url": "http://127.0.0.1:1/-/npm/v1/attestations/x"},
    },
}


def test_the_manifest_keeps_every_admitted_field_and_describes_the_bytes_sent() -> None:
    name = parse_name("@acme/widget")
    manifest = version_manifest(name, "1.4.2", {**ADMITTED, "readme": "# long"},
                                "sha512-verified", "1" * 40,
                                "http://127.0.0.1:2/@acme/widget/-/widget-1.4.2.tgz")
    for key in ("description", "dependencies", "bin", "engines", "scripts", "_npmUser"):
        assert manifest[key] == ADMITTED[key]
    assert "readme" not in manifest
    assert manifest["_id"] == "@acme/widget@1.4.2"
    assert manifest["dist"] == {
        "integrity": "sha512-verified",
        "shasum": "1" * 40,
        "tarball": "http://127.0.0.1:2/@acme/widget/-/widget-1.4.2.tgz",
        "fileCount": 3,
        "unpackedSize": 1234,
        "attestations": {"url": "http://127.0.0.1:1/-/npm/v1/attestations/x"},
    }


def test_registry_signatures_are_kept_when_they_sign_the_integrity_of_the_bytes_sent() -> None:
    # They are made over name@version:integrity: with the same bytes, the same integrity, so
    # they still verify against the public registry's keys (served at /npm/-/npm/v1/keys).
    manifest = version_manifest(parse_name("@acme/widget"), "1.4.2", ADMITTED, "sha512-public",
                                "1" * 40, "http://127.0.0.1:2/@acme/widget/-/widget-1.4.2.tgz")
    assert manifest["dist"]["signatures"] == [{"keyid": "SHA256:public", "sig": "..."}]


def test_the_manifest_carries_the_mirror_mark_with_the_public_time_and_the_verified_bytes(
        ) -> None:
    forged = {**ADMITTED, "_mirrorgate": {"v": 1, "source": "public", "integrity": "sha512-no",
                                          "published": "2001-01-01T00:00:00.000Z"}}
    manifest = version_manifest(parse_name("left-pad"), "1.3.0", forged, "sha512-verified",
                                "1" * 40, "http://127.0.0.1:2/left-pad/-/left-pad-1.3.0.tgz",
                                "2024-02-23T18:01:12.345Z")
    assert read_mark(manifest) == MirrorMark("2024-02-23T18:01:12.345Z", "sha512-verified")


def test_the_name_and_version_come_from_the_job_not_from_the_manifest() -> None:
    manifest = version_manifest(parse_name("left-pad"), "1.3.0",
                                {"name": "evil", "version": "9.9.9"}, "sha512-x", "1" * 40,
                                "http://127.0.0.1:2/left-pad/-/left-pad-1.3.0.tgz")
    assert (manifest["name"], manifest["version"]) == ("left-pad", "1.3.0")


def test_the_document_attaches_the_exact_bytes_with_their_length() -> None:
    tarball = bytes(range(256)) * 3
    name = parse_name("@acme/widget")
    body = publish_document(name, "1.4.2", {"name": "@acme/widget", "version": "1.4.2"},
                            "widget-1.4.2.tgz", tarball, {"latest": "1.4.2"})
    document = orjson.loads(body.render())
    assert document["_id"] == document["name"] == "@acme/widget"
    assert list(document["versions"]) == ["1.4.2"]
    assert document["dist-tags"] == {"latest": "1.4.2"}
    attachment = document["_attachments"]["widget-1.4.2.tgz"]
    assert attachment["content_type"] == "application/octet-stream"
    assert base64.b64decode(attachment["data"]) == tarball
    assert attachment["length"] == len(tarball)


async def test_the_streamed_body_is_the_document_with_its_declared_size() -> None:
    tarball = bytes(range(251)) * 2000  # 502,000 bytes: several chunks, not a multiple of 3
    name = parse_name("left-pad")
    body = publish_document(name, "1.3.0", {"name": "left-pad", "version": "1.3.0"},
                            "left-pad-1.3.0.tgz", tarball, {"latest": "1.3.0"})
    streamed = b"".join([chunk async for chunk in body.chunks()])
    assert streamed == body.render()
    assert len(streamed) == body.size
    attachment = orjson.loads(streamed)["_attachments"]["left-pad-1.3.0.tgz"]
    assert base64.b64decode(attachment["data"]) == tarball
