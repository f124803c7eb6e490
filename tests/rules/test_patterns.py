"""The package pattern syntax: names, scopes, ranges, what each covers and what is refused."""

from __future__ import annotations

import re

import pytest

from mirrorgate.rules import PackagePattern, PatternList, parse_pattern
from tests.rules.builders import verdict


@pytest.mark.parametrize(
    ("text", "name", "scope", "range_text"),
    [
        ("left-pad", "left-pad", None, None),
        ("@acme/tools", "@acme/tools", None, None),
        ("@acme/*", None, "@acme", None),
        ("lodash@<4.17.21", "lodash", None, "<4.17.21"),
        ("@acme/x@^1.2.0", "@acme/x", None, "^1.2.0"),
        ("@acme/*@>=2", None, "@acme", ">=2"),
        ("  lodash@ >=1.0.0 <2.0.0  ", "lodash", None, ">=1.0.0 <2.0.0"),
        ("JSONStream", "JSONStream", None, None),
        ("lodash.merge@1.2.3 - 2.0.0", "lodash.merge", None, "1.2.3 - 2.0.0"),
        ("left-pad@*", "left-pad", None, "*"),
    ],
)
def test_a_pattern_is_a_name_or_a_scope_with_an_optional_range(
    text: str, name: str | None, scope: str | None, range_text: str | None
) -> None:
    pattern = parse_pattern(text)
    assert isinstance(pattern, PackagePattern)
    assert (pattern.name, pattern.scope) == (name, scope)
    assert (pattern.range.text if pattern.range else None) == range_text
    assert pattern.text == text.strip()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "is empty; write a pattern such as"),
        ("   ", "is empty; write a pattern such as"),
        ("*", '"*" is not a pattern: a wildcard is a whole scope ("@acme/*") or a trailing'),
        ("@*/*", '"@*/*" is not a pattern: a wildcard is a whole scope'),
        ("left*pad", '"left*pad" is not a pattern: a wildcard is a whole scope'),
        ("@acme/*tool", '"@acme/*tool" is not a pattern: a wildcard is a whole scope'),
        ("@acme", '"@acme" is not a package name, a scope wildcard or a name and range'),
        ("@acme/", '"@acme/" is not a package name'),
        ("left pad", '"left pad" is not a package name'),
        (".hidden", '".hidden" is not a package name'),
        ("_private", '"_private" is not a package name'),
        ("a/b", '"a/b" is not a package name'),
        ("../etc", '"../etc" is not a package name'),
        ("x" * 215, "is not a package name"),
        ("lodash@", '"lodash@" has an @ but no range after it; write it like "lodash@<4.17.21", '
                    'or "lodash" for every version'),
        ("lodash@latest", '"lodash@latest" is not a valid semver range; write it like'),
        ("lodash@<<4", '"lodash@<<4" is not a valid semver range; write it like "lodash@<4.17.21"'),
        ("lodash@1.x.3", '"lodash@1.x.3" is not a usable semver range: "1.x.3" puts a number '
                         "after a wildcard"),
        ("lodash@^1 ||", '"lodash@^1 ||" is not a usable semver range: "^1 ||" has an empty '
                         "alternative around ||, which npm reads as any version"),
        ("lodash@\u22654.0.0", "holds characters other than printable ASCII"),
        ("lodash@>=12345678901234567", "holds the number 12345678901234567, larger than npm"),
        ("lodash@" + "1" * 300, "is longer than 256 characters"),
    ],
)
def test_a_bad_pattern_is_refused_with_a_sentence_saying_what_to_write(
    text: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_pattern(text)


def test_a_name_prefix_wildcard_covers_every_name_with_that_prefix_only() -> None:
    listed = PatternList.of((parse_pattern("acme-*"), parse_pattern("@acme/ui-*")))
    assert listed.covers_name("acme-utils")
    assert listed.covers_name("@acme/ui-button")
    assert not listed.covers_name("acme")
    assert not listed.covers_name("left-pad")
    assert not listed.covers_name("@acme/tools")
    assert not listed.covers_name("@other/ui-button")


def test_a_scope_wildcard_covers_its_scope_only() -> None:
    rules = '[deny]\npackages = ["@acme/*"]'
    assert not verdict(rules, "@acme/x").admitted
    assert not verdict(rules, "@acme/y.z").admitted
    assert verdict(rules, "@acmex/y").admitted
    assert verdict(rules, "acme").admitted
    assert verdict(rules, "acme-x").admitted


def test_a_scope_wildcard_with_a_range_covers_that_range_in_every_package_of_the_scope() -> None:
    rules = '[deny]\npackages = ["@acme/*@<2"]'
    assert not verdict(rules, "@acme/x", "1.9.0").admitted
    assert verdict(rules, "@acme/x", "2.0.0").admitted


def test_a_name_is_matched_exactly_and_with_its_case() -> None:
    rules = '[deny]\npackages = ["JSONStream", "left-pad"]'
    assert not verdict(rules, "JSONStream").admitted
    assert verdict(rules, "jsonstream").admitted
    assert verdict(rules, "left-pad-extra").admitted
    assert verdict(rules, "@scope/left-pad").admitted


def test_a_name_without_a_range_covers_prereleases_and_non_semver_versions() -> None:
    rules = '[deny]\npackages = ["left-pad"]'
    for version in ("1.3.0", "2.0.0-rc.1", "not-semver"):
        assert not verdict(rules, "left-pad", version).admitted


def test_a_star_range_covers_releases_but_not_prereleases_as_in_npm() -> None:
    rules = '[deny]\npackages = ["left-pad@*"]'
    assert not verdict(rules, "left-pad", "1.3.0").admitted
    assert verdict(rules, "left-pad", "2.0.0-rc.1").admitted


@pytest.mark.parametrize(
    ("version", "covered"),
    [
        ("0.1.2", True), ("0.1.9", True), ("0.2.0", False), ("0.1.2-beta.1", False),
        ("0.1.3-beta.1", False),
    ],
)
def test_a_caret_on_0x_covers_only_that_minor(version: str, covered: bool) -> None:
    rules = '[deny]\npackages = ["tiny@^0.1.2"]'
    assert verdict(rules, "tiny", version).admitted is not covered


def test_several_entries_for_one_package_each_count() -> None:
    rules = '[deny]\npackages = ["lodash@<4.17.21", "lodash@4.17.23", "lodash@>=5 <5.0.2"]'
    denied = [v for v in ("4.17.20", "4.17.21", "4.17.23", "5.0.1", "5.0.2")
              if not verdict(rules, "lodash", v).admitted]
    assert denied == ["4.17.20", "4.17.23", "5.0.1"]
