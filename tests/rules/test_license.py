"""The license rule: SPDX expressions as SPDX reads them, the list grammar, unknown
declarations, report mode and exceptions, and the tarball's license against the manifest's.

Each refusal has its control beside it: the same shape with the license that is admitted.
"""

from __future__ import annotations

from typing import Any

import pytest

from mirrorgate.rules import RulesError, parse_rules
from mirrorgate.rules.license import tarball_license_finding
from tests.rules.builders import verdict

DENY_COPYLEFT = '[license]\ndeny = ["GPL-*", "AGPL-3.0-only", "SSPL-1.0"]\n'
ALLOW_LIST = ('[license]\nallow = ["MIT", "ISC", "Apache-2.0", '
              '"GPL-2.0-only WITH Classpath-exception-2.0"]\ndeny = ["GPL-*"]\n')


def judged(rules: str, **fields: Any) -> tuple[str | None, str | None]:
    found = verdict(rules, **fields)
    return found.rule, found.reason


@pytest.mark.parametrize(("declared", "admitted"), [
    ("MIT", True),
    ("mit", True),  # SPDX identifiers match whatever their case
    ("GPL-3.0-only", False),
    ("GPL-2.0", False),  # deprecated: SPDX reads it as GPL-2.0-only, which GPL-* covers
    ("GPL-2.0+", False),  # GPL-2.0-or-later
    ("MIT OR GPL-3.0-only", True),  # the licensee chooses MIT
    ("(GPL-3.0-only OR AGPL-3.0-only)", False),  # both sides denied
    ("MIT AND GPL-3.0-only", False),  # both apply: GPL is denied
    ("MIT AND Apache-2.0", True),
    ("LGPL-2.1-only", True),  # GPL-* does not reach LGPL: *GPL-* would
    ("GPL-2.0-only WITH Classpath-exception-2.0", False),  # a plain entry covers a WITH term
    ("SSPL-1.0 OR (MIT AND ISC)", True),
])
def test_an_expression_is_judged_as_spdx_reads_it(declared: str, admitted: bool) -> None:
    rule, reason = judged(DENY_COPYLEFT, license=declared)
    assert (rule is None) == admitted, reason
    if not admitted:
        assert rule == "license"
        assert reason is not None
        assert reason.startswith("left-pad@1.3.0 declares the license ")


def test_a_refusal_names_the_declared_license_and_every_entry_that_denied_it() -> None:
    _, reason = judged(DENY_COPYLEFT, license="(GPL-3.0-only OR AGPL-3.0-only)")
    assert reason == ('left-pad@1.3.0 declares the license GPL-3.0-only OR AGPL-3.0-only: '
                      'GPL-3.0-only matches the license deny list entry "GPL-*"; '
                      'AGPL-3.0-only matches the license deny list entry "AGPL-3.0-only"')


def test_a_deprecated_identifier_is_said_as_written_too() -> None:
    _, reason = judged(DENY_COPYLEFT, license="GPL-2.0+")
    assert reason is not None
    assert 'GPL-2.0-or-later (written "GPL-2.0+")' in reason


@pytest.mark.parametrize(("declared", "rule"), [
    ("MIT", None),
    ("Apache-2.0", None),
    ("GPL-2.0-only WITH Classpath-exception-2.0", None),  # the entry naming it outranks GPL-*
    ("GPL-2.0-only", "license"),  # the control: without the exception, GPL-* denies it
    ("GPL-3.0-only WITH Classpath-exception-2.0", "license"),  # another license: not allowed
    ("BSD-3-Clause", "license"),  # not on the allow list
    ("BSD-3-Clause OR MIT", None),
    ("BSD-3-Clause AND MIT", "license"),
])
def test_an_allow_list_admits_only_what_it_names(declared: str, rule: str | None) -> None:
    assert judged(ALLOW_LIST, license=declared)[0] == rule


def test_a_license_off_the_allow_list_is_named_with_the_list() -> None:
    _, reason = judged(ALLOW_LIST, license="Zlib")
    assert reason == ("left-pad@1.3.0 declares the license Zlib: Zlib is not on the license "
                      "allow list (MIT, ISC, Apache-2.0 and 1 more)")


@pytest.mark.parametrize(("fields", "said"), [
    ({}, "declares no license"),
    ({"license": "UNLICENSED"}, "declares UNLICENSED, npm's word for a package nobody may use"),
    ({"license": "SEE LICENSE IN LICENSE.md"},
     'declares "SEE LICENSE IN LICENSE.md": a license of its own'),
    ({"license": "Apache 2.0"}, "Apache 2.0 is not an SPDX license identifier"),
    ({"license": "MIT/X11"}, "which is not an SPDX expression"),
    ({"license": "MIT AND Foo-1.0"}, "Foo-1.0 is not an SPDX license identifier"),
    ({"license": "MIT WITH Foo-exception"}, "Foo-exception is not an SPDX exception identifier"),
    ({"license": "x" * 201}, "longer than any SPDX expression mirrorgate reads"),
    ({"license": {"url": "https://example.com"}}, "declares no license"),  # no `type`
])
def test_what_cannot_be_read_as_spdx_is_unknown_and_denied_by_default(
        fields: dict[str, Any], said: str) -> None:
    rule, reason = judged(DENY_COPYLEFT, **fields)
    assert rule == "license-unknown"
    assert reason is not None
    assert said in reason
    assert reason.endswith('([license] unknown = "deny")')


def test_one_readable_side_that_is_admitted_decides_an_or() -> None:
    assert judged(DENY_COPYLEFT, license="MIT OR Foo-1.0")[0] is None
    assert judged(DENY_COPYLEFT, license="GPL-3.0-only AND Foo-1.0")[0] == "license"


@pytest.mark.parametrize(("fields", "rule"), [
    ({"licenses": [{"type": "MIT", "url": "x"}, {"type": "GPL-3.0-only"}]}, None),  # an OR
    ({"licenses": [{"type": "GPL-3.0-only"}]}, "license"),
    ({"license": {"type": "GPL-3.0-only", "url": "x"}}, "license"),
    ({"license": "MIT", "licenses": [{"type": "GPL-3.0-only"}]}, None),  # npm reads `license`
])
def test_legacy_declarations_are_read_as_npm_reads_them(fields: dict[str, Any],
                                                        rule: str | None) -> None:
    assert judged(DENY_COPYLEFT, **fields)[0] == rule


def test_unknown_allow_admits_and_report_serves_with_a_would_deny() -> None:
    allowed = verdict(DENY_COPYLEFT + 'unknown = "allow"\n', license="UNLICENSED")
    assert allowed.admitted
    assert not allowed.reported
    reported = verdict(DENY_COPYLEFT + 'unknown = "report"\n', license="UNLICENSED")
    assert reported.admitted
    [(rule, reason)] = reported.reported
    assert rule == "license-unknown"
    assert reason.endswith('([license] unknown = "report")')
    # the control: unknown = "report" leaves a denied license denied
    assert not verdict(DENY_COPYLEFT + 'unknown = "report"\n', license="GPL-3.0-only").admitted


def test_the_table_in_report_mode_serves_a_denied_license_and_says_so() -> None:
    found = verdict(DENY_COPYLEFT + 'mode = "report"\n', license="GPL-3.0-only")
    assert found.admitted
    assert [rule for rule, _ in found.reported] == ["license"]


def test_an_exception_lifts_the_license_rule_for_one_version_only() -> None:
    lifted = DENY_COPYLEFT + ('\n[[exception]]\npackage = "left-pad@1.3.0"\n'
                              'rules = ["license"]\nuntil = 2099-01-01\n'
                              'reason = "legal approved GPL for this tool"\nby = "legal"\n')
    assert verdict(lifted, license="GPL-3.0-only").admitted
    assert not verdict(lifted, version="1.3.1", license="GPL-3.0-only").admitted


def test_without_a_license_table_no_license_is_judged() -> None:
    assert verdict(license="GPL-3.0-only").admitted
    assert verdict().admitted  # no license at all


@pytest.mark.parametrize(("entry", "problem"), [
    ("GPL-3.0-onyl", '"GPL-3.0-onyl" is not an SPDX license identifier'),
    ("GLP-*", '"GLP-*" matches no SPDX license identifier'),
    ("MIT OR ISC", '"MIT OR ISC" is an expression: list each license on its own'),
    ("UNLICENSED", "UNLICENSED and SEE LICENSE IN are no SPDX licenses: `unknown` decides"),
    ("GPL-2.0-only WITH Classpath", '"Classpath" is not an SPDX exception identifier'),
    ("", "is not a license"),
])
def test_an_entry_that_is_no_spdx_identifier_stops_the_file(entry: str, problem: str) -> None:
    with pytest.raises(RulesError) as raised:
        parse_rules(f'[license]\ndeny = ["{entry}"]\n', "rules.toml")
    assert problem in str(raised.value)
    assert "license.deny[0]" in str(raised.value)


def test_the_organisations_own_identifiers_may_be_listed() -> None:
    rules = '[license]\nallow = ["MIT", "LicenseRef-Acme-*"]\n'
    assert verdict(rules, license="LicenseRef-Acme-Internal-1.0").admitted
    # the control: a LicenseRef nobody listed is no license the rules can read
    assert verdict(rules, license="LicenseRef-Other").rule == "license-unknown"


def test_unknown_takes_deny_report_or_allow() -> None:
    with pytest.raises(RulesError, match=r'license\.unknown: "maybe" is not one of'):
        parse_rules('[license]\nunknown = "maybe"\n')


# --- the tarball's package.json against the manifest -------------------------------------

RULE = parse_rules(DENY_COPYLEFT).license


def test_a_tarball_declaring_what_its_manifest_declares_is_served() -> None:
    assert tarball_license_finding(RULE, "MIT", {"license": "MIT"}, None) is None
    # the same expression written otherwise, and a legacy array read as npm reads it
    assert tarball_license_finding(RULE, "(ISC OR MIT)", {"license": "MIT OR ISC"}, None) is None
    assert tarball_license_finding(RULE, "MIT", {"licenses": [{"type": "MIT"}]}, None) is None


def test_a_tarball_declaring_another_license_is_refused_with_both_named() -> None:
    found = tarball_license_finding(RULE, "MIT", {"license": "GPL-3.0-only"}, None)
    assert found == ("the registry's manifest declares MIT, but the package.json in its "
                     "tarball, which npm installs, declares GPL-3.0-only, where GPL-3.0-only "
                     'matches the license deny list entry "GPL-*"')


def test_a_difference_is_refused_even_between_two_admitted_licenses() -> None:
    # the manifest is the publisher's word beside the bytes: it said another thing
    found = tarball_license_finding(RULE, "MIT", {"license": "ISC"}, None)
    assert found is not None
    assert found.endswith("declares ISC")


def test_a_tarball_without_a_license_under_a_manifest_with_one_is_refused() -> None:
    found = tarball_license_finding(RULE, "MIT", {"name": "x"}, None)
    assert found is not None
    assert "declares no license" in found
    assert tarball_license_finding(RULE, "MIT", None, None) is not None  # no package.json


def test_a_tarball_that_cannot_be_read_is_refused() -> None:
    found = tarball_license_finding(RULE, "MIT", None, "a package.json is a link")
    assert found == "its tarball cannot be read for its license: a package.json is a link"
