"""Package names are decoded once, strictly, and checked against npm's rules."""

from __future__ import annotations

import pytest

from mirrorgate.npm.names import (
    InvalidNameError,
    PackageName,
    parse_name,
    tarball_filename,
    version_from_filename,
)


@pytest.mark.parametrize(
    ("raw", "full"),
    [
        ("left-pad", "left-pad"),
        ("@acme/widget", "@acme/widget"),
        ("@acme%2fwidget", "@acme/widget"),
        ("@acme%2Fwidget", "@acme/widget"),
        ("lodash.merge", "lodash.merge"),
        ("JSONStream", "JSONStream"),
        ("%40acme%2fwidget", "@acme/widget"),
    ],
)
def test_every_spelling_of_a_valid_name_decodes_to_one_name(raw: str, full: str) -> None:
    assert parse_name(raw).full == full


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("..", "dot"),
        ("%2e%2e", "dot"),
        (".hidden", "dot"),
        ("_private", "underscore"),
        ("a%2fb", "slash"),
        ("a\\b", "backslash"),
        ("a%5cb", "backslash"),
        ("a%00b", "control"),
        ("a%0ab", "control"),
        ("a b", "control"),
        ("x" * 215, "at most 214"),
        ("@acme", "needs a package"),
        ("@acme/", "empty"),
        ("@/widget", "empty"),
        ("@acme/a/b", "exactly one slash"),
        ("caf%C3%A9", "characters"),
        ("a%252fb", "twice"),
        ("node_modules", "not a package name"),
        ("%ff", "UTF-8"),
    ],
)
def test_hostile_or_malformed_names_are_refused_with_a_reason(raw: str, why: str) -> None:
    with pytest.raises(InvalidNameError, match=why):
        parse_name(raw)


def test_a_scoped_name_goes_into_a_url_with_one_encoded_slash() -> None:
    assert parse_name("@acme/widget").url_path() == "@acme%2fwidget"
    assert parse_name("left-pad").url_path() == "left-pad"


def test_a_tarball_filename_belongs_to_its_package_and_version() -> None:
    name = PackageName("acme", "widget")
    assert tarball_filename(name, "1.0.0") == "widget-1.0.0.tgz"
    assert version_from_filename(name, "widget-1.0.0-rc.1.tgz") == "1.0.0-rc.1"
    with pytest.raises(InvalidNameError, match="not a tarball of @acme/widget"):
        version_from_filename(name, "other-1.0.0.tgz")
    with pytest.raises(InvalidNameError):
        version_from_filename(name, "widget-..%2f..tgz")
