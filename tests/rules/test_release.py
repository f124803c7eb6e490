"""The release signals as pure checks, each stated as the attack it stops (`rules.release`),
and the `[release]` table that sets them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mirrorgate.npm.contents import Contents, contents_of
from mirrorgate.npm.jsmarks import marks_of
from mirrorgate.rules import RulesError, parse_rules
from mirrorgate.rules.release import (
    Dependency,
    Release,
    check_dependencies,
    check_install,
    check_obfuscation,
    check_typosquat,
    judge,
)
from mirrorgate.rules.releasetable import RELEASE_SIGNALS
from mirrorgate.rules.typosquat import NameIndex, distance, popular_names
from tests.servers.incidents import (
    chalk_shape,
    entry_file,
    minified_bundle,
    obfuscated_blob,
    shai_hulud_shape,
)
from tests.servers.packages import build_tarball

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAYS_30 = timedelta(days=30)
QUARANTINE = parse_rules("[release]\n", "rules.toml")


def release(version: str, files: dict[str, bytes], *, runs: tuple[str, ...] = (),
            dependencies: dict[str, str] | None = None) -> Release:
    return Release(version, contents_of(build_tarball({"package.json": b"{}", **files})), runs,
                   dependencies or {})


# --- new-install-script -----------------------------------------------------------------------


def test_shai_hulud_a_patch_release_adding_a_postinstall_fires() -> None:
    package = shai_hulud_shape()
    new, old = package.versions["1.4.3"], package.versions["1.4.2"]
    found = check_install(
        Release("1.4.3", contents_of(new.tarball), ("postinstall (node bundle.js)",)),
        Release("1.4.2", contents_of(old.tarball)))
    assert found is not None
    assert found.signal == "new-install-script"
    assert found.evidence == ("it runs code at install (postinstall (node bundle.js)); 1.4.2 "
                              "ran nothing at install")


def test_a_postinstall_only_the_tarballs_package_json_declares_fires() -> None:
    # manifest confusion: the registry's manifest shows nothing, the tarball runs setup.js
    inner = b'{"name": "x", "version": "1.0.1", "scripts": {"preinstall": "node setup.js"}}'
    new = Release("1.0.1", contents_of(build_tarball({"package.json": inner})))
    found = check_install(new, release("1.0.0", {}))
    assert found is not None
    assert found.details == ("preinstall (node setup.js)",)


def test_a_binding_gyp_or_a_bundled_dependencys_script_new_in_a_release_fires() -> None:
    bundled = b'{"name": "inner", "scripts": {"install": "node x.js"}}'
    new = release("1.0.1", {"binding.gyp": b"{}", "node_modules/inner/package.json": bundled})
    found = check_install(new, release("1.0.0", {}))
    assert found is not None
    assert set(found.details) == {"binding.gyp", "node_modules/inner: install"}


def test_a_release_that_keeps_the_install_script_it_had_does_not_fire() -> None:
    runs = ("install (node-gyp rebuild)",)
    assert check_install(release("2.0.1", {}, runs=runs), release("2.0.0", {}, runs=runs)) \
        is None


# --- obfuscated-code --------------------------------------------------------------------------


def test_chalk_an_obfuscated_blob_appended_to_the_entry_file_fires_with_its_line() -> None:
    package = chalk_shape()
    found = check_obfuscation(
        Release("5.6.1", contents_of(package.versions["5.6.1"].tarball)),
        Release("5.6.0", contents_of(package.versions["5.6.0"].tarball)))
    assert found is not None
    line = len(entry_file("colour-kit").splitlines()) + 1
    offset = len(entry_file("colour-kit"))
    assert (f"index.js: a very long line (24,301 characters) at line {line}, byte {offset} "
            "(not in the same file of 5.6.0)") in found.details
    assert {detail.split(" (")[0].split(": ", 1)[1] for detail in found.details} == {
        "a very long line", "a density of hex or unicode escapes",
        "obfuscator-style `_0x` identifiers"}


def test_eval_over_a_decoded_string_fires() -> None:
    code = entry_file("x") + b"\neval(atob('Y29uc29sZS5sb2coMSk='));\n"
    found = check_obfuscation(release("1.0.1", {"index.js": code}),
                              release("1.0.0", {"index.js": entry_file("x")}))
    assert found is not None
    assert "eval or Function over a decoded string (`eval(atob(`)" in found.evidence
    new_function = b"new Function(Buffer.from(s, 'base64').toString())()"
    assert "eval-decoded" in marks_of(new_function, len(new_function)).kinds


def test_a_large_base64_literal_in_a_new_file_fires() -> None:
    blob = b"module.exports = '" + b"QUJD" * 2000 + b"';\n"
    found = check_obfuscation(release("1.0.1", {"lib/data.js": blob}), release("1.0.0", {}))
    assert found is not None
    assert found.details == ("lib/data.js: a large base64 literal (8,000 characters) at line 1, "
                             "byte 17 (not in 1.0.0)",)


def test_a_new_minified_build_is_not_obfuscation() -> None:
    # a bundler's output: long lines, short names, no obfuscator's marks
    new = release("1.0.1", {"dist/bundle.min.js": minified_bundle(200_000)})
    assert check_obfuscation(new, release("1.0.0", {})) is None


def test_marks_the_previous_version_already_had_do_not_fire() -> None:
    # a package that has always shipped obfuscated code (a licence-checker, say)
    code = entry_file("x") + obfuscated_blob("x")
    assert check_obfuscation(release("3.0.1", {"index.js": code}),
                             release("3.0.0", {"index.js": code})) is None


def test_a_data_uri_is_not_a_base64_payload() -> None:
    css = b"const icon = 'data:image/png;base64," + b"iVBORw0KGgo" * 1000 + b"';"
    assert "base64-blob" not in marks_of(css, len(css)).kinds


# --- new-dependency-young ---------------------------------------------------------------------


def test_axios_a_new_dependency_first_published_the_day_before_fires() -> None:
    old = release("1.14.0", {}, dependencies={"follow-redirects": "^1.15.0"})
    new = release("1.14.1", {}, dependencies={"follow-redirects": "^1.15.0",
                                              "plain-crypto-js": "^4.2.1"})
    first = {"plain-crypto-js": Dependency(NOW - timedelta(days=1), frozenset({"attacker"}))}
    found = check_dependencies(new, old, first, DAYS_30, "30 days", NOW)
    assert found is not None
    assert found.details == ("`plain-crypto-js` was first published 2026-11-30T12:00:00Z, "
                             "less than 30 days ago",)


def test_a_young_dependency_built_from_the_releases_own_repository_does_not_fire() -> None:
    # esbuild's and typescript's platform packages: new, and the project's own, both built
    # with provenance by the same repository's CI (rules.kinship)
    old = release("6.0.3", {})
    new = Release("7.0.2", Contents(), (), {"@typescript/typescript-linux-x64": "7.0.2"},
                  NOW, frozenset({"typescript-bot"}),
                  provenance="github.com/microsoft/typescript")
    first = {"@typescript/typescript-linux-x64": Dependency(
        NOW, frozenset({"typescript-bot"}), frozenset({"github.com/microsoft/typescript"}))}
    assert check_dependencies(new, old, first, DAYS_30, "30 days", NOW) is None


def test_a_young_dependency_the_same_stolen_token_published_still_fires() -> None:
    # the thief publishes the payload and the release from one account: a shared publisher
    # is exactly what one stolen token mints, so it exempts nothing any more
    old = release("1.14.0", {})
    new = Release("1.14.1", Contents(), (), {"plain-crypto-js": "^4.2.1"}, NOW,
                  frozenset({"maintainer"}))
    first = {"plain-crypto-js": Dependency(NOW - timedelta(days=1), frozenset({"maintainer"}))}
    found = check_dependencies(new, old, first, DAYS_30, "30 days", NOW)
    assert found is not None
    assert found.details == ("`plain-crypto-js` was first published 2026-11-30T12:00:00Z, "
                             "less than 30 days ago",)


def test_a_new_dependency_missing_from_the_public_registry_fires() -> None:
    # dependency confusion's mirror image: a name public does not have, waiting to be taken
    found = check_dependencies(release("1.0.1", {}, dependencies={"ghost": "1"}),
                               release("1.0.0", {}), {"ghost": None}, DAYS_30, "30 days", NOW)
    assert found is not None
    assert found.details == ("`ghost` is not on the public registry",)


def test_an_old_new_dependency_or_one_kept_from_before_does_not_fire() -> None:
    old = release("1.0.0", {}, dependencies={"young-but-kept": "1"})
    new = release("1.0.1", {}, dependencies={"young-but-kept": "1", "lodash": "4"})
    first = {"young-but-kept": Dependency(NOW), "lodash": Dependency(NOW - timedelta(days=4000))}
    assert check_dependencies(new, old, first, DAYS_30, "30 days", NOW) is None


# --- typosquat --------------------------------------------------------------------------------


def test_a_young_name_one_edit_from_a_widely_used_package_fires() -> None:
    found = check_typosquat("lodahs", NOW - timedelta(days=2), False, NameIndex(()),
                            popular_names(), DAYS_30, "30 days", NOW)
    assert found is not None
    assert "one edit away from `lodash` (a widely used package)" in found.evidence


def test_a_young_name_one_edit_from_a_name_the_organisation_installs_often_fires() -> None:
    often = NameIndex(["acme-logger-core"])
    found = check_typosquat("acme-loger-core", NOW, False, often, NameIndex(()),
                            DAYS_30, "30 days", NOW)
    assert found is not None
    assert "(a name this organisation installs often)" in found.evidence


def test_a_name_installed_before_an_old_name_or_a_popular_one_does_not_fire() -> None:
    popular = popular_names()
    assert check_typosquat("lodahs", NOW, True, NameIndex(()), popular,
                           DAYS_30, "30 days", NOW) is None
    assert check_typosquat("lodahs", NOW - timedelta(days=400), False, NameIndex(()),
                           popular, DAYS_30, "30 days", NOW) is None
    assert check_typosquat("lodash", NOW, False, NameIndex(()), popular, DAYS_30,
                           "30 days", NOW) is None


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("lodash", "lodahs", 1), ("lodash", "lodash", 0), ("express", "expres", 1),
    ("react", "preact", 1), ("chalk", "chulk", 1), ("debug", "bugged", 3)])
def test_distance_counts_insertions_deletions_substitutions_and_transpositions(
        a: str, b: str, expected: int) -> None:
    assert distance(a, b) == expected


def test_separators_do_not_hide_a_squat() -> None:
    assert NameIndex(["cross-env"]).near("crossenv") == "cross-env"
    assert NameIndex(["ms"]).near("ns") is None  # too short to compare


# --- the verdict and the table ----------------------------------------------------------------


def test_a_quarantine_runs_from_publication_and_names_the_version_compared_with() -> None:
    fired = [check_install(release("1.0.1", {}, runs=("postinstall (x)",)),
                           release("1.0.0", {}))]
    verdict = judge(QUARANTINE, "p", "1.0.1", NOW, [f for f in fired if f], NOW, "1.0.0")
    assert verdict.rule == "new-install-script"
    assert verdict.until == NOW + timedelta(days=7)
    assert verdict.reason is not None
    assert verdict.reason.startswith("quarantined until 2026-12-08T12:00:00Z (7 days after "
                                     "publication) because it runs code at install")
    assert "(compared with 1.0.0)" in verdict.reason
    assert not verdict.in_force(NOW + timedelta(days=8))


def test_deny_outranks_quarantine_and_report_mode_only_reports() -> None:
    install = check_install(release("1.0.1", {}, runs=("postinstall (x)",)),
                            release("1.0.0", {}))
    dependency = check_dependencies(release("1.0.1", {}, dependencies={"g": "1"}),
                                    release("1.0.0", {}), {"g": None}, DAYS_30, "30 d", NOW)
    assert install is not None
    assert dependency is not None
    rules = parse_rules('[release]\nnew_dependency_young = "deny"\n', "r.toml")
    assert judge(rules, "p", "1.0.1", NOW, [install, dependency], NOW, "1.0.0").rule == \
        "new-dependency-young"
    reported = parse_rules('[release]\nmode = "report"\n', "r.toml")
    verdict = judge(reported, "p", "1.0.1", NOW, [install], NOW, "1.0.0")
    assert not verdict.denied
    assert [rule for rule, _ in verdict.reported] == ["new-install-script"]


def test_an_allow_entry_or_an_exception_releases_the_version() -> None:
    fired = check_install(release("1.0.1", {}, runs=("postinstall (x)",)), release("1.0.0", {}))
    assert fired is not None
    allowed = parse_rules('[release]\nallow = ["p@1.0.1"]\n', "r.toml")
    assert not judge(allowed, "p", "1.0.1", NOW, [fired], NOW, "1.0.0").denied
    excepted = parse_rules('[release]\n\n[[exception]]\npackage = "p"\nuntil = 2027-01-01\n'
                           'reason = "our build"\nby = "ops"\nrules = ["new-install-script"]\n',
                           "r.toml")
    verdict = judge(excepted, "p", "1.0.1", NOW, [fired], NOW, "1.0.0")
    assert not verdict.denied
    assert verdict.excepted[0].startswith("new-install-script lifted by the exception for p")


def test_the_table_turns_every_signal_on_as_quarantine_unless_it_says_otherwise() -> None:
    rules = parse_rules('[release]\ntyposquat = "off"\nyoung = "10d"\nquarantine = "3d"\n'
                        'unavailable = "deny"\n', "r.toml").release
    assert dict(rules.actions) == {"new-capability": "quarantine",
                                   "young-package-capability": "quarantine",
                                   "new-install-script": "quarantine",
                                   "new-dependency-young": "quarantine",
                                   "obfuscated-code": "quarantine", "typosquat": "off",
                                   "new-dependency-outside": "deny",
                                   "unreadable-release": "deny",
                                   "young-package-install-script": "quarantine"}
    assert (rules.young, rules.quarantine, rules.unavailable) == (
        timedelta(days=10), timedelta(days=3), "deny")
    # without the table, what a release's code can do (issue 55's default), and what it
    # cannot read refused (issue 53)
    default = parse_rules("", "r.toml").release
    assert [s for s in RELEASE_SIGNALS if default.action(s) != "off"] == [
        "new-capability", "young-package-capability", "unreadable-release"]
    assert default.compares  # the release before is read: what its code could do


def test_the_worked_example_in_the_docs_loads() -> None:
    text = (Path(__file__).parents[2] / "docs" / "serving.md").read_text(encoding="utf-8")
    section = text[text.index("\n### Release signals\n"):]
    match = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    assert match is not None
    rules = parse_rules(match.group(1), "serving.md").release
    assert rules.action("new-install-script") == "deny"
    assert rules.action("typosquat") == "report"
    assert rules.allow.texts() == ["esbuild", "sharp@0.33.5"]


def test_a_bad_action_is_refused_naming_its_key() -> None:
    with pytest.raises(RulesError) as raised:
        parse_rules('[release]\nobfuscated_code = "block"\n', "r.toml")
    assert raised.value.problems == ['release.obfuscated_code: "block" is not one of "deny", '
                                     '"quarantine", "report" or "off"']


def test_contents_that_cannot_be_read_say_why() -> None:
    assert contents_of(b"\x1f\x8b not gzip").problem is not None
    assert Contents().problem is None


def test_a_renamed_chunk_carrying_marks_the_previous_version_had_does_not_fire() -> None:
    # bundlers hash chunk names: the same code moves to a new file every release
    code = entry_file("x") + obfuscated_blob("x")
    assert check_obfuscation(release("2.0.1", {"dist/chunk-B2.js": code}),
                             release("2.0.0", {"dist/chunk-A1.js": code})) is None
