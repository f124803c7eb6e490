"""Builders for the rules tests: a version manifest and a verdict, each stating only what the
test is about. The clock is a fixed `NOW`; `OLD` is a publish time far enough before it to pass
any minimum release age the tests set."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from mirrorgate.rules import DEFAULT_RULES, Rules, Verdict, evaluate, parse_rules
from tests.sri import sri

NOW = datetime(2026, 12, 1, 15, 0, 0, tzinfo=UTC)
OLD = "2020-01-01T00:00:00.000Z"


TARBALL = b"tarball"


def shasum(data: bytes = b"tarball") -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


def manifest(name: str = "left-pad", version: str = "1.3.0", **overrides: Any) -> dict[str, Any]:
    """A public version object as a packument carries it, with sha512 integrity and a shasum."""
    made: dict[str, Any] = {
        "name": name,
        "version": version,
        "dist": {
            "integrity": sri("sha512", TARBALL),
            "shasum": shasum(),
            "tarball": f"http://127.0.0.1:9/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz",
        },
    }
    made.update(overrides)
    return made


def verdict(
    rules: Rules | str = DEFAULT_RULES,
    name: str = "left-pad",
    version: str = "1.3.0",
    published: str | None = OLD,
    now: datetime = NOW,
    **manifest_overrides: Any,
) -> Verdict:
    """The verdict for one version; `rules` may be the TOML text of a rules file."""
    compiled = parse_rules(rules) if isinstance(rules, str) else rules
    return evaluate(
        compiled, name, version, manifest(name, version, **manifest_overrides), published, now
    )
