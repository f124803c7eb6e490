"""The publish document scanned as it streams (`npm.upload`), and the checks on what it says.

The attacks these stop: a tarball whose bytes are not the ones its `dist` declares, a document
for another package than the URL names, and documents shaped so that the scan and the private
registry's JSON parser would disagree about which bytes are the tarball (escaped or repeated
keys, escaped base64) — each refused, never guessed.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from mirrorgate.npm.names import parse_name
from mirrorgate.npm.upload import UploadError, UploadScan, checked_publish
from tests.servers.packages import make_package

NAME = parse_name("@acme/widget")
VERSION = make_package("@acme/widget", ["1.2.0"]).version("1.2.0")
README = "# widget\n" + 'say "hi" \\ {not: [json]}\n' * 300
"""A readme with quotes, backslashes and brackets: escapes and structure inside strings."""
TARBALL = VERSION.tarball


def npm_document(**changes: Any) -> dict[str, Any]:
    """The document `npm publish` sends, in npm's key order (the attachment last)."""
    manifest = {**VERSION.document("http://127.0.0.1:9/npm/"), "readme": README}
    document: dict[str, Any] = {
        "_id": NAME.full, "name": NAME.full, "description": "a widget",
        "dist-tags": {"latest": "1.2.0"}, "versions": {"1.2.0": manifest}, "access": None,
        "_attachments": {"widget-1.2.0.tgz": {
            "content_type": "application/octet-stream",
            "data": base64.b64encode(TARBALL).decode(), "length": len(TARBALL)}},
    }
    document.update(changes)
    return document


def scan(body: bytes, chunk: int = 65536, max_skeleton: int = 1 << 20) -> UploadScan:
    scanner = UploadScan(max_skeleton=max_skeleton)
    for start in range(0, len(body), chunk):
        scanner.feed(body[start:start + chunk])
    return scanner


@pytest.mark.parametrize("chunk", [1, 3, 7, 4096, 65536])
def test_the_tarball_is_hashed_as_it_streams_and_the_rest_is_kept(chunk: int) -> None:
    body = json.dumps(npm_document()).encode()

    scanned = scan(body, chunk).finish()
    published = checked_publish(NAME, scanned)

    assert scanned.sha512 == hashlib.sha512(TARBALL).digest()
    assert scanned.sha1 == hashlib.sha1(TARBALL).digest()  # noqa: S324 - npm's shasum
    assert scanned.attachment_bytes == len(TARBALL)
    expected = npm_document()
    expected["_attachments"]["widget-1.2.0.tgz"]["data"] = ""
    assert scanned.document == expected
    assert (published.version, published.filename, published.tags) == (
        "1.2.0", "widget-1.2.0.tgz", {"latest": "1.2.0"})


def test_a_tarball_that_does_not_match_its_declared_integrity_is_refused() -> None:
    document = npm_document()
    forged = TARBALL[:-1] + bytes([TARBALL[-1] ^ 1])
    document["_attachments"]["widget-1.2.0.tgz"]["data"] = base64.b64encode(forged).decode()

    with pytest.raises(UploadError, match="does not match its declared sha512"):
        checked_publish(NAME, scan(json.dumps(document).encode()).finish())


def test_a_shasum_that_does_not_match_is_refused_even_with_a_right_integrity() -> None:
    document = npm_document()
    document["versions"]["1.2.0"]["dist"]["shasum"] = "0" * 40

    with pytest.raises(UploadError, match="does not match its declared sha1"):
        checked_publish(NAME, scan(json.dumps(document).encode()).finish())


def test_a_version_without_sha512_integrity_is_refused() -> None:
    document = npm_document()
    del document["versions"]["1.2.0"]["dist"]["integrity"]

    with pytest.raises(UploadError, match=r"no sha512 dist\.integrity"):
        checked_publish(NAME, scan(json.dumps(document).encode()).finish())


@pytest.mark.parametrize(("changes", "says"), [
    ({"name": "@acme/other"}, "is not @acme/widget, the package the URL names"),
    ({"_id": "left-pad"}, "is not @acme/widget, the package the URL names"),
])
def test_a_document_for_another_package_than_the_url_names_is_refused(
        changes: dict[str, Any], says: str) -> None:
    with pytest.raises(UploadError, match=says):
        checked_publish(NAME, scan(json.dumps(npm_document(**changes)).encode()).finish())


def test_a_manifest_naming_another_package_is_refused() -> None:
    document = npm_document()
    document["versions"]["1.2.0"]["name"] = "@acme/other"

    with pytest.raises(UploadError, match="manifest names '@acme/other'"):
        checked_publish(NAME, scan(json.dumps(document).encode()).finish())


def test_dist_tags_may_only_name_the_version_published() -> None:
    document = npm_document(**{"dist-tags": {"latest": "9.9.9"}})

    with pytest.raises(UploadError, match=r"may only name 1\.2\.0"):
        checked_publish(NAME, scan(json.dumps(document).encode()).finish())


def test_an_escaped_attachments_key_is_refused_not_guessed() -> None:
    # Node's JSON.parse reads `_attach\u006dents` as `_attachments`: the scan must not let
    # those bytes pass unhashed
    body = json.dumps(npm_document()).encode().replace(b'"_attachments"',
                                                       b'"_attach\\u006dents"')

    with pytest.raises(UploadError, match=r"exactly one tarball|not where mirrorgate read it"):
        checked_publish(NAME, scan(body, max_skeleton=1 << 22).finish())


def test_a_repeated_attachments_key_is_refused() -> None:
    # the registry keeps the last `_attachments`: here an empty one after the hashed one
    body = json.dumps(npm_document()).encode()
    body = body[:-1] + b', "_attachments": {"widget-1.2.0.tgz": {"data": "AAAA"}}}'

    with pytest.raises(UploadError, match="exactly one tarball"):
        checked_publish(NAME, scan(body).finish())


def test_a_repeated_data_key_is_refused() -> None:
    body = json.dumps(npm_document()).encode().replace(b'"length"', b'"data": "AAAA", "length"')

    with pytest.raises(UploadError, match="exactly one tarball"):
        checked_publish(NAME, scan(body).finish())


@pytest.mark.parametrize(("spoil", "says"), [
    (lambda data: data[:40] + b"\\/" + data[42:], "not plain base64"),
    (lambda data: data[:40] + b"\\n" + data[40:], "not plain base64"),
    (lambda data: data.rstrip(b"="), "not padded base64"),
    (lambda data: b"AA==" + data, "after its base64 padding"),
])
def test_a_tarball_that_is_not_plain_padded_base64_is_refused(spoil: Any, says: str) -> None:
    data = base64.b64encode(TARBALL)
    body = json.dumps(npm_document()).encode().replace(data, spoil(data))

    with pytest.raises(UploadError, match=says):
        scan(body).finish()


def test_a_document_without_its_tarball_larger_than_the_bound_is_refused_while_read() -> None:
    document = npm_document(description="x" * 5000)

    with pytest.raises(UploadError, match="larger than 4096 bytes"):
        scan(json.dumps(document).encode(), chunk=1024, max_skeleton=4096)


def test_a_document_that_is_not_json_is_refused() -> None:
    with pytest.raises(UploadError, match="not valid JSON"):
        scan(b'{"name": "@acme/widget", ').finish()
