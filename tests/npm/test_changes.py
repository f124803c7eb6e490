"""A change (npm deprecate, npm unpublish of a version) rebuilt from the private packument.

The attack this stops: a client allowed to deprecate sending back the packument with a
published version's `dist` (its digests, its tarball URL) rewritten; whatever the registry
would accept, mirrorgate forwards only deprecations, removals and tags.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mirrorgate.npm.changes import changed_packument
from mirrorgate.npm.upload import UploadError


def manifest(version: str) -> dict[str, Any]:
    return {"name": "@acme/widget", "version": version,
            "dist": {"integrity": f"sha512-{version}", "shasum": "ab" * 20,
                     "tarball": f"http://registry.internal/@acme/widget/-/widget-{version}.tgz"}}


CURRENT: dict[str, Any] = {
    "_id": "@acme/widget", "_rev": "7-abc", "name": "@acme/widget",
    "dist-tags": {"latest": "1.1.0", "old": "1.0.0"},
    "versions": {"1.0.0": manifest("1.0.0"), "1.1.0": {**manifest("1.1.0"), "deprecated": "x"}},
    "_attachments": {"widget-1.0.0.tgz": {"shasum": "ab" * 20}},
}


def edited(**versions: Any) -> dict[str, Any]:
    incoming = copy.deepcopy(CURRENT)
    incoming["versions"].update(versions)
    return incoming


def test_a_rewritten_dist_is_not_forwarded_only_the_deprecation_is() -> None:
    forged = {**manifest("1.0.0"), "deprecated": "use 1.1.0",
              "dist": {"integrity": "sha512-evil", "tarball": "http://evil.example/x.tgz"}}

    changed = changed_packument(CURRENT, edited(**{"1.0.0": forged}))

    assert changed["versions"]["1.0.0"] == {**manifest("1.0.0"), "deprecated": "use 1.1.0"}
    assert changed["_rev"] == "7-abc"
    assert "_attachments" not in changed


def test_an_empty_message_undeprecates_and_is_forwarded_as_such() -> None:
    changed = changed_packument(CURRENT, edited(**{"1.1.0": {"deprecated": ""}}))

    assert changed["versions"]["1.1.0"]["deprecated"] == ""


def test_a_version_left_out_is_removed_with_the_tags_naming_it() -> None:
    incoming = copy.deepcopy(CURRENT)
    del incoming["versions"]["1.0.0"]

    changed = changed_packument(CURRENT, incoming)

    assert list(changed["versions"]) == ["1.1.0"]
    assert changed["dist-tags"] == {"latest": "1.1.0"}


def test_a_change_cannot_add_a_version() -> None:
    with pytest.raises(UploadError, match="cannot add versions"):
        changed_packument(CURRENT, edited(**{"9.9.9": manifest("9.9.9")}))


def test_a_change_without_versions_is_refused() -> None:
    with pytest.raises(UploadError, match="must be a packument with versions"):
        changed_packument(CURRENT, {"_id": "@acme/widget", "users": {"mallory": True}})
