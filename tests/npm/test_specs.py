"""A dependency spec as npm installs it (`npm.specs`): where an alias, a peer, a git or URL
spec makes npm fetch from, stated as the doors an attacker would use."""

from __future__ import annotations

import pytest

from mirrorgate.npm.specs import installed_as, installed_dependencies


def test_an_alias_installs_its_target_whatever_its_key() -> None:
    # `"left-pad": "npm:young-payload@1.0.0"` puts young-payload under node_modules/left-pad
    assert installed_as("left-pad", "npm:young-payload@1.0.0").package == "young-payload"
    assert installed_as("x", "npm:@evil/payload@^2").package == "@evil/payload"
    assert installed_as("x", "npm:young-payload").package == "young-payload"


@pytest.mark.parametrize("spec", ["^1.2.3", "1.0.0", "latest", ">=1 <2 || 3.x", "*", ""])
def test_a_range_a_version_or_a_tag_is_the_registrys_package_under_its_key(spec: str) -> None:
    found = installed_as("lodash", spec)
    assert (found.package, found.outside) == ("lodash", None)


@pytest.mark.parametrize(("spec", "kind"), [
    ("git+https://github.com/evil/payload.git", "git repository"),
    ("git+ssh://git@github.com/evil/payload.git#main", "git repository"),
    ("git://github.com/evil/payload", "git repository"),
    ("github:evil/payload", "git repository"),
    ("evil/payload", "git repository"),
    ("evil/payload#v1.0.0", "git repository"),
    ("git@github.com:evil/payload.git", "git repository"),
    ("https://example.test/payload-1.0.0.tgz", "URL"),
    ("http://127.0.0.1:9/payload.tgz", "URL"),
    ("file:../payload", "path"),
    ("./vendor/payload.tgz", "path"),
    ("link:../payload", "path"),
    ("workspace:*", "workspace"),
])
def test_git_url_and_path_specs_are_fetched_outside_any_registry(spec: str, kind: str) -> None:
    found = installed_as("payload", spec)
    assert (found.package, found.outside) == (None, kind)


def test_npm_installs_peers_but_not_the_peers_marked_optional() -> None:
    manifest = {"dependencies": {"a": "1"}, "optionalDependencies": {"b": "2"},
                "peerDependencies": {"react": "^19", "young-payload": "^1", "maybe": "^3"},
                "peerDependenciesMeta": {"maybe": {"optional": True}}}
    found = installed_dependencies(manifest)
    assert sorted(found) == ["a", "b", "react", "young-payload"]


def test_a_dependency_spec_wins_over_the_peer_range_of_the_same_key() -> None:
    found = installed_dependencies({"peerDependencies": {"x": "^1"},
                                    "dependencies": {"x": "npm:young-payload@1.0.0"}})
    assert found["x"].package == "young-payload"
