"""`mirrorgate check LOCKFILE...` as CI runs it: the real command in a subprocess, reading
lockfiles the real clients wrote, judging them with the proxy's rules against a fixture public
registry, or asking a running mirrorgate (`--proxy`).

The attack it stops: a dependency the organisation's rules refuse (a deny-listed version here,
reached through an `npm:` alias too) reaching a build unnoticed until `npm ci` fails halfway;
check names each one with its rule, reason and a version to use instead, before the install.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from mirrorgate.access.tokens import new_token, token_line
from tests.advisories.records import malware, write_directory
from tests.commands.lockfile_projects import LOCKFILES, tree_packages
from tests.servers.availability import serving
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.processes import mirrorgate_argv

Copy = Callable[[str], Path]
KINDS = sorted(LOCKFILES)
# alpha 1.2.0 is locked directly (^1.0.0 admits 1.0.0 too); zeta 1.0.1 is locked through the
# alias zed (npm:zeta@^1.0.0) and by epsilon (1.x)
DENY_RULES = '[deny]\npackages = ["alpha@1.2.0", "zeta@1.0.1"]\n'


@pytest.fixture(scope="module")
def public() -> Iterator[FixtureRegistry]:
    with serving(FixtureRegistry(*tree_packages()), "the fixture registry") as server:
        yield server


def _env(tmp_path: Path, public_url: str, rules: str | None = None,
         **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "LANG": "C.UTF-8",
           "MIRRORGATE_PUBLIC_UPSTREAM": public_url,
           "MIRRORGATE_DATA_DIR": str(tmp_path / "data"), "MIRRORGATE_LOG_FORMAT": "json"}
    if rules is not None:
        rules_file = tmp_path / "rules.toml"
        rules_file.write_text(rules, encoding="utf-8")
        env["MIRRORGATE_RULES_FILE"] = str(rules_file)
    env.update(extra)
    return env


def check(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # the sources under test (PYTHONPATH), not whatever the installed command points at
    if "PYTHONPATH" in os.environ:
        env = {"PYTHONPATH": os.environ["PYTHONPATH"], **env}
    return subprocess.run([*mirrorgate_argv(), "check", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env, check=False,
                          stdin=subprocess.DEVNULL)


def _results(done: subprocess.CompletedProcess[str]) -> dict[tuple[str, str], dict[str, Any]]:
    document = orjson.loads(done.stdout)
    return {(r["package"], r["version"]): r for r in document["results"]}


@pytest.mark.parametrize("kind", KINDS)
def test_a_denied_locked_version_is_reported_with_its_rule_reason_and_what_to_use(
        kind: str, lockfile_copy: Copy, public: FixtureRegistry, tmp_path: Path) -> None:
    lockfile = lockfile_copy(kind)
    done = check(lockfile, "--json", env=_env(tmp_path, public.url, DENY_RULES))
    assert done.returncode == 1, done.stderr
    results = _results(done)
    alpha = results[("alpha", "1.2.0")]
    assert alpha["status"] == "denied"
    assert alpha["finding"] is True
    assert alpha["rule"] == "deny-list"
    assert alpha["reason"].startswith("deny-list: ")
    assert alpha["where"].startswith(f"{lockfile}:")
    # the aliased one is found under its real name; both have an admitted 1.0.0 in range
    zeta = results[("zeta", "1.0.1")]
    assert zeta["status"] == "denied"
    if kind == "npm-v1":  # v1 keeps no ranges for the project's own dependencies
        assert alpha["detail"] == "nearest admitted: 1.0.0"
    else:
        assert alpha["detail"] == "nearest admitted in ^1.0.0: 1.0.0"
        assert zeta["detail"].endswith(": 1.0.0")
    assert {key: r["status"] for key, r in results.items()
            if r["status"] != "admitted"} == {("alpha", "1.2.0"): "denied",
                                              ("zeta", "1.0.1"): "denied"}
    # the URL the client fetches: npm and bun fetch it as written, past a registry setting
    # that names mirrorgate (seen by hand), so a CI step must be able to see it
    if kind in ("npm-v2", "npm-v3", "bun", "yarn-classic"):
        # (yarn 1 appends "#<sha1>")
        assert alpha["resolved"].split("#")[0].endswith("/alpha/-/alpha-1.2.0.tgz"), alpha
    document = orjson.loads(done.stdout)
    assert document["summary"] == {"admitted": len(results) - 2, "denied": 2}
    assert any("git-thing (" in note and ") is a git repository; not checked" in note
               for note in document["notes"])


def test_the_table_names_the_refusal_and_the_version_to_use(
        lockfile_copy: Copy, public: FixtureRegistry, tmp_path: Path) -> None:
    lockfile = lockfile_copy("npm-v3")
    done = check(lockfile, env=_env(tmp_path, public.url, DENY_RULES))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["PACKAGE", "VERSION", "STATUS", "REASON", "DETAIL", "WHERE"]
    alpha = next(line for line in lines if line.startswith("alpha "))
    assert "denied" in alpha
    assert "deny-list: " in alpha
    assert "nearest admitted in ^1.0.0: 1.0.0" in alpha
    written = lockfile.read_text(encoding="utf-8").splitlines()
    entry = written.index('    "node_modules/alpha": {') + 1
    assert alpha.endswith(f"{lockfile}:{entry}")
    assert done.stdout.endswith("check: 2 finding(s) in 8 result(s)\n")
    # notes and progress go to stderr, one plain line per package without a terminal
    assert "check: 7/7 " in done.stderr
    link = written.index('    "node_modules/local-thing": {') + 1
    assert f"note: {lockfile}:{link}: local-thing is a linked folder; not checked" in done.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_a_lockfile_the_rules_admit_entirely_exits_0(kind: str, lockfile_copy: Copy,
                                                      public: FixtureRegistry,
                                                      tmp_path: Path) -> None:
    done = check(lockfile_copy(kind), env=_env(tmp_path, public.url))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check: 0 finding(s) in 8 result(s)" in done.stdout


def test_a_version_the_registry_does_not_have_is_a_finding(
        lockfile_copy: Copy, tmp_path: Path) -> None:
    tree = [p for p in tree_packages() if p.name != "delta"]
    with serving(FixtureRegistry(*tree), "the fixture registry") as public:
        done = check(lockfile_copy("yarn-classic"), "--json", env=_env(tmp_path, public.url))
    assert done.returncode == 1
    delta = _results(done)[("delta", "0.4.2")]
    assert delta["status"] == "missing"
    assert delta["reason"] == "no registry has this package"


def test_an_unreachable_upstream_is_a_finding_not_a_pass(lockfile_copy: Copy,
                                                         tmp_path: Path) -> None:
    with serving(FixtureRegistry(), "an empty registry") as gone:
        url = gone.url  # stopped on leaving: nothing listens there any more
    done = check(lockfile_copy("pnpm-v9"), "--json",
                 env=_env(tmp_path, url, MIRRORGATE_UPSTREAM_TIMEOUT="5"))
    assert done.returncode == 1
    statuses = {r["status"] for r in _results(done).values()}
    assert statuses == {"error"}


def test_a_malformed_lockfile_exits_2_naming_the_file_and_line(lockfile_copy: Copy,
                                                               public: FixtureRegistry,
                                                               tmp_path: Path) -> None:
    lockfile = lockfile_copy("yarn-berry")
    lines = lockfile.read_text(encoding="utf-8").splitlines()
    lines[19] = '  resolution: "alpha@npm:1.2.0'  # an unclosed quote on line 20
    lockfile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = check(lockfile, env=_env(tmp_path, public.url))
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"mirrorgate: {lockfile}:2" in done.stderr
    assert "is not valid YAML" in done.stderr


def test_a_file_that_is_not_a_lockfile_exits_2(tmp_path: Path, public: FixtureRegistry) -> None:
    manifest = tmp_path / "package.json"
    manifest.write_text("{}\n", encoding="utf-8")
    done = check(manifest, env=_env(tmp_path, public.url))
    assert done.returncode == 2
    assert "is not a lockfile mirrorgate reads" in done.stderr


def test_a_rules_file_that_cannot_be_used_exits_2(lockfile_copy: Copy, public: FixtureRegistry,
                                                  tmp_path: Path) -> None:
    done = check(lockfile_copy("npm-v3"), env=_env(tmp_path, public.url, "[deny]\npakages = 1\n"))
    assert done.returncode == 2
    assert "MIRRORGATE_RULES_FILE" in done.stderr


def test_check_policy_answers_for_a_team_s_policy_set_and_the_default_for_everyone_else(
        lockfile_copy: Copy, public: FixtureRegistry, tmp_path: Path) -> None:
    # the payments team's policy set denies what the default rules admit: a build of theirs
    # must hear of it before `npm ci`, the web team's not at all
    rules = '[policy.payments.deny]\npackages = ["alpha@1.2.0"]\n'
    lockfile = lockfile_copy("npm-v3")
    env = _env(tmp_path, public.url, rules)

    payments = check(lockfile, "--json", "--policy", "payments", env=env)
    default = check(lockfile, "--json", env=env)
    unknown = check(lockfile, "--policy", "paymentz", env=env)
    both = check(lockfile, "--policy", "payments", "--proxy", "http://127.0.0.1:9/", env=env)

    assert payments.returncode == 1, payments.stderr
    alpha = _results(payments)[("alpha", "1.2.0")]
    assert (alpha["status"], alpha["rule"]) == ("denied", "deny-list")
    assert default.returncode == 0, default.stderr  # the control: the default rules admit it
    assert _results(default)[("alpha", "1.2.0")]["status"] == "admitted"
    assert unknown.returncode == 2
    assert "--policy paymentz: the policy set 'paymentz' is not defined" in unknown.stderr
    assert both.returncode == 2
    assert "the proxy judges by the policy set of the client" in both.stderr


def test_proxy_mode_asks_a_running_mirrorgate_and_needs_no_upstream(
        lockfile_copy: Copy, public: FixtureRegistry, mirrorgate: MirrorgateFactory,
        tmp_path: Path) -> None:
    rules = tmp_path / "proxy-rules.toml"
    rules.write_text(DENY_RULES, encoding="utf-8")
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                                 "MIRRORGATE_RULES_FILE": str(rules)})
    # the laptop: no rules file, and a public upstream nothing answers at
    with serving(FixtureRegistry(), "an empty registry") as gone:
        nowhere = gone.url
    lockfile = lockfile_copy("npm-v2")
    done = check(lockfile, "--json", "--proxy", proxy.url, env=_env(tmp_path, nowhere))
    assert done.returncode == 1, done.stderr
    results = _results(done)
    alpha = results[("alpha", "1.2.0")]
    assert alpha["status"] == "denied"
    assert alpha["rule"] == "deny-list"
    assert alpha["detail"] == "nearest admitted in ^1.0.0: 1.0.0"
    assert results[("zeta", "1.0.1")]["status"] == "denied"
    assert results[("gamma", "3.1.0")]["status"] == "admitted"
    # the same verdicts, word for word, as the rules judged here with the upstream
    direct = check(lockfile, "--json", env=_env(tmp_path, public.url, DENY_RULES))
    assert {k: (r["status"], r["reason"], r["detail"]) for k, r in _results(direct).items()} \
        == {k: (r["status"], r["reason"], r["detail"]) for k, r in results.items()}


def test_proxy_mode_sends_the_proxy_token(lockfile_copy: Copy, public: FixtureRegistry,
                                          mirrorgate: MirrorgateFactory,
                                          tmp_path: Path) -> None:
    token = new_token()
    tokens = tmp_path / "tokens"
    tokens.write_text(token_line("ci", token) + "\n", encoding="utf-8")
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                                 "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens)})
    lockfile = lockfile_copy("pnpm-v9")
    without = check(lockfile, "--json", "--proxy", proxy.registry_url,
                    env=_env(tmp_path, public.url))
    # a missing token is a setting that cannot be used (exit 2, one message naming the
    # variable), not one "answered 401" finding per locked version
    assert without.returncode == 2, without.stdout
    assert "requires a client token: set MIRRORGATE_PROXY_TOKEN" in without.stderr
    assert without.stdout == ""
    wrong = check(lockfile, "--json", "--proxy", proxy.registry_url,
                  env=_env(tmp_path, public.url, MIRRORGATE_PROXY_TOKEN=new_token()))
    assert wrong.returncode == 2, wrong.stdout
    assert "refused MIRRORGATE_PROXY_TOKEN" in wrong.stderr
    done = check(lockfile, "--json", "--proxy", proxy.registry_url,
                 env=_env(tmp_path, public.url, MIRRORGATE_PROXY_TOKEN=token))
    assert done.returncode == 0, done.stdout
    assert token not in done.stdout + done.stderr


def test_an_advisory_published_after_locking_is_caught_before_the_install(
        lockfile_copy: Copy, public: FixtureRegistry, tmp_path: Path) -> None:
    # the lockfile pinned gamma 3.1.0 while it was clean; a MAL- record for that version lands
    # in the OSV export since: check loads the index as the proxy does and names the record
    osv = tmp_path / "osv"
    write_directory(osv, [malware("MAL-2026-4242", "gamma", ["3.1.0"])])
    rules = f'[advisories]\nsource = "{osv}"\nunavailable = "deny"\n'
    done = check(lockfile_copy("yarn-berry"), "--json", env=_env(tmp_path, public.url, rules))
    assert done.returncode == 1, done.stderr
    gamma = _results(done)[("gamma", "3.1.0")]
    assert gamma["status"] == "denied"
    assert gamma["rule"] == "advisory-malware"
    assert "MAL-2026-4242" in gamma["reason"]
    assert gamma["detail"] == "nearest admitted in ^3.0.0: 3.0.0"


def test_several_lockfiles_are_checked_in_one_run_each_package_asked_once(
        lockfile_copy: Copy, tmp_path: Path) -> None:
    with serving(FixtureRegistry(*tree_packages()), "the fixture registry") as public:
        npm, yarn = lockfile_copy("npm-v3"), lockfile_copy("yarn-classic")
        done = check(npm, yarn, "--json", env=_env(tmp_path, public.url, DENY_RULES))
        asked = [r.path for r in public.requests]
    assert done.returncode == 1
    document = orjson.loads(done.stdout)
    wheres = {r["where"].rsplit(":", 1)[0] for r in document["results"]
              if (r["package"], r["version"]) == ("alpha", "1.2.0")}
    assert wheres == {str(npm), str(yarn)}
    assert document["summary"] == {"admitted": 12, "denied": 4}
    assert asked.count("/alpha") == 1


def test_a_crafted_name_in_a_lockfile_is_refused_and_never_requested(
        lockfile_copy: Copy, tmp_path: Path) -> None:
    # the attack: a lockfile whose entry name walks out of the registry's path space, hoping
    # the checker fetches (with its credentials) a URL the operator never meant to reach
    lockfile = lockfile_copy("npm-v3")
    text = lockfile.read_text(encoding="utf-8")
    lockfile.write_text(text.replace('"node_modules/delta"', '"node_modules/../-/admin"'),
                        encoding="utf-8")
    with serving(FixtureRegistry(*tree_packages()), "the fixture registry") as public:
        done = check(lockfile, "--json", env=_env(tmp_path, public.url))
        asked = [r.path for r in public.requests]
    assert done.returncode == 1
    crafted = _results(done)[("../-/admin", "0.4.2")]
    assert crafted["status"] == "invalid"
    assert crafted["reason"].startswith("not a valid npm name: ")
    assert not [path for path in asked if "admin" in path or ".." in path]


def test_a_public_copy_of_a_name_the_organisation_owns_is_a_finding(
        lockfile_copy: Copy, public: FixtureRegistry, tmp_path: Path) -> None:
    # dependency confusion caught before the install: the lockfile pins @fixture/beta from the
    # public registry, but the rules say the organisation owns @fixture/*; the proxy serves
    # such a name from the private registry alone, so check judges it the same way
    rules = '[private]\nnames = ["@fixture/*"]\n'
    public.clear_requests()
    done = check(lockfile_copy("pnpm-v6"), "--json", env=_env(tmp_path, public.url, rules))
    assert done.returncode == 1
    results = _results(done)
    for version in ("2.1.3", "2.0.0"):
        beta = results[("@fixture/beta", version)]
        assert beta["status"] == "missing"
        assert beta["reason"] == "no registry has this package"
    assert results[("alpha", "1.2.0")]["status"] == "admitted"
    assert not [r for r in public.requests if "fixture" in r.path]


def test_check_names_the_locked_versions_the_license_rule_refuses(
        lockfile_copy: Copy, public: FixtureRegistry, tmp_path: Path) -> None:
    # every fixture version declares MIT: an allow list without it refuses them all, before
    # an install; the control (MIT allowed, GPL denied) finds nothing
    lockfile = lockfile_copy("npm-v3")
    refused = check(lockfile, "--json", env=_env(
        tmp_path, public.url, '[license]\nallow = ["ISC", "Apache-2.0"]\n'))
    admitted = check(lockfile, "--json", env=_env(
        tmp_path, public.url, '[license]\nallow = ["MIT"]\ndeny = ["GPL-*"]\n'))

    assert refused.returncode == 1, refused.stderr
    alpha = _results(refused)[("alpha", "1.2.0")]
    assert alpha["rule"] == "license"
    assert "declares the license MIT: MIT is not on the license allow list" in alpha["reason"]
    assert admitted.returncode == 0, admitted.stdout
