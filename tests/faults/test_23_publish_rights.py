"""Row 23 of the faults table: one team's publishing token used on another team's package.

> | 23 | a client granted `publish:@team-b/*` publishes into, deprecates, re-tags and unpublishes
> `@team-a/widget`, which team A's client published | each is refused (403 naming the grant)
> and Verdaccio keeps team A's versions, tags and words; team A's own client does all four |

The attack: `publish` was one permission for every name `[publish] names` covers, so one
leaked CI token with it could rewrite every team's packages (all four writes answered 201).
Real `mirrorgate serve`, real Verdaccio, the real npm client.
"""

from __future__ import annotations

from pathlib import Path

from mirrorgate.access.tokens import new_token, token_line
from tests.access.rig import SecretDir, auth_npmrc, start_guarded
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.publish.stack import npm_package
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.verdaccio import Verdaccio

NAME = "@team-a/widget"


def test_a_teams_token_cannot_write_another_teams_package(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, tmp_path: Path,
) -> None:
    team_a, team_b = new_token(), new_token()
    secrets = SecretDir(tmp_path / "client-tokens")
    secrets.write(f"{token_line('team-a-ci', team_a)} publish:@team-a/*\n"
                  f"{token_line('team-b-ci', team_b)} publish:@team-b/*,team-b-*\n")
    rules = tmp_path / "rules.toml"
    rules.write_text('[publish]\nnames = ["@team-a/*", "@team-b/*", "team-b-*"]\n',
                     encoding="utf-8")
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, secrets.path, team_a,
                          team_b, MIRRORGATE_RULES_FILE=str(rules))
    registry = proxy.registry_url
    owner = NpmClient(tmp_path / "owner")
    intruder = NpmClient(tmp_path / "intruder")
    auth_npmrc(owner, registry, token=team_a)
    auth_npmrc(intruder, registry, token=team_b)
    published = owner.run("publish", registry=registry,
                          cwd=npm_package(tmp_path / "a", NAME, "1.0.0"))
    assert published.returncode == 0, published.stderr

    attempts = {
        "publish": intruder.run("publish", registry=registry,
                                cwd=npm_package(tmp_path / "b", NAME, "1.0.1")),
        "deprecate": intruder.run("deprecate", f"{NAME}@1.0.0", "pwned", registry=registry),
        "dist-tag": intruder.run("dist-tag", "add", f"{NAME}@1.0.0", "evil",
                                 registry=registry),
        "unpublish": intruder.run("unpublish", f"{NAME}@1.0.0", "--force",
                                  registry=registry),
    }

    for operation, done in attempts.items():
        guard.seen(done.stderr, f"npm {operation}'s output")
        assert done.returncode != 0, operation
        assert "E403" in done.stderr, (operation, done.stderr)
        assert "may not write @team-a/widget" in done.stderr, operation
        assert "publish:@team-b/*,team-b-*" in done.stderr, operation
    stored = verdaccio.packument(NAME)
    assert stored is not None
    assert sorted(stored["versions"]) == ["1.0.0"]
    assert "deprecated" not in stored["versions"]["1.0.0"]
    assert "evil" not in stored["dist-tags"]
    # the grant's owner writes its own package
    own = owner.run("dist-tag", "add", f"{NAME}@1.0.0", "stable", registry=registry)
    assert own.returncode == 0, own.stderr
    assert verdaccio.packument(NAME)["dist-tags"]["stable"] == "1.0.0"  # type: ignore[index]
    assert {line["reason"] for line in proxy.events("publish_refused")} == {"not its name"}
