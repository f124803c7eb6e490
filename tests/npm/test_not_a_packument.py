"""What a 200 for a packument must be before it counts as public's word on a name's versions.

The attack: a rate limiter's `{"error": "rate limited"}`, an empty `{}` or another package's
document behind a broken cache, read as the packument, lists none of the mirrored versions and
withdraws them all (docs/withdrawals.md).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mirrorgate.npm.names import parse_name
from mirrorgate.npm.packument import not_a_packument
from tests.servers.packages import make_package, make_version

NAME = parse_name("@acme-tools/left-pad")


def packument(name: str) -> dict[str, Any]:
    built = make_package(name, [make_version(name, "1.3.0", size=0)]).packument(
        "http://127.0.0.1:9/")
    loaded: dict[str, Any] = orjson.loads(orjson.dumps(built))
    return loaded


def test_the_packument_of_the_name_asked_counts() -> None:
    assert not_a_packument(NAME, packument(NAME.full)) is None


def test_npms_unpublished_tombstone_counts_though_it_lists_no_versions() -> None:
    tombstone = {"_id": NAME.full, "name": NAME.full, "time": {
        "created": "2020-01-01T00:00:00.000Z", "modified": "2026-12-01T11:00:00.000Z",
        "unpublished": {"time": "2026-12-01T11:00:00.000Z", "versions": ["1.3.0"]}}}
    assert not_a_packument(NAME, tombstone) is None


@pytest.mark.parametrize(("answer", "said"), [
    ({"error": "rate limited"}, "no versions object"),
    ({}, "its keys: none"),
    ({"name": NAME.full, "versions": ["1.3.0"]}, "no versions object"),
    ({"name": NAME.full, "time": {"unpublished": "yes"}}, "no unpublished tombstone"),
], ids=["a rate limiter's error", "an empty object", "versions not an object",
        "a tombstone of the wrong shape"])
def test_an_answer_that_says_nothing_of_the_versions_is_no_packument(
        answer: dict[str, Any], said: str) -> None:
    reason = not_a_packument(NAME, answer)
    assert reason is not None
    assert said in reason


def test_another_packages_document_is_no_packument_of_this_one() -> None:
    # a cache keyed without the scope, or a CDN that answers the last document it held
    reason = not_a_packument(NAME, packument("left-pad"))
    assert reason == "it is the document of 'left-pad', not of @acme-tools/left-pad"
