"""Rights from a CI's identity: the tokens file's issuer lines, and who a verified token names.

`NAME ISSUER CLAIM=VALUE... [publish:NAMES] [policy:NAME]` grants what a `NAME sha256:HEX` line
grants to every ID token from ISSUER whose claims meet every condition (docs/ci-identity.md).
Pure: the signature and the times are `access.oidc`'s; this only reads claims already verified.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from mirrorgate.rules.patterns import PatternList

__all__ = ["ClaimMapping", "Condition", "Identity", "issuer_problem", "parse_conditions"]

MAX_ISSUERS = 16
"""Distinct issuers one tokens file may name: each holds a cached key set and an HTTP client."""
_CLAIM = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")
# verified by `access.oidc` itself, never by a condition: a condition on `exp` would read as a
# check while the real one is elsewhere
_RESERVED = frozenset({"iss", "aud", "exp", "nbf", "iat", "jti", "azp"})
_SHOWN = 120


def _shown(value: object) -> str:
    """A claim's value as a message quotes it: JSON, cut short (claims are not secrets, but
    they come from a token, and a message is no place for kilobytes)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _claim_text(value: Any) -> str | None:
    """A claim as conditions compare it: a string as is, a number or boolean as JSON writes it
    (GitLab's `ref_protected` is the string "true", other issuers send a boolean)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int) and not isinstance(value, float):
        return json.dumps(value)
    return None


def _glob(text: str) -> re.Pattern[str]:
    # `*` stays inside one path segment (`acme/*` is not `acme/team/x`); `**` crosses them
    parts = re.split(r"(\*\*|\*)", text)
    regex = "".join(".*" if part == "**" else "[^/]*" if part == "*" else re.escape(part)
                    for part in parts)
    return re.compile(regex, re.DOTALL)


@dataclass(frozen=True, slots=True)
class Condition:
    """`claim=glob[,glob...]`: the claim is a string one of the globs matches in full."""

    claim: str
    values: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...] = field(repr=False, compare=False)

    @property
    def text(self) -> str:
        return f"{self.claim}={','.join(self.values)}"

    def met_by(self, claims: Mapping[str, Any]) -> bool:
        value = _claim_text(claims.get(self.claim))
        return value is not None and any(p.fullmatch(value) for p in self.patterns)

    def miss(self, claims: Mapping[str, Any]) -> str:
        """Why `claims` do not meet this condition, for a refusal (claims, never the token)."""
        if self.claim not in claims:
            return f"the token has no `{self.claim}` claim"
        return f"the token's {self.claim} is {_shown(claims[self.claim])}"


@dataclass(frozen=True, slots=True)
class ClaimMapping:
    """One issuer line: its name (logs, metrics, `npm whoami`), the issuer whose tokens it
    reads, the conditions every one of which must hold, the names it may write and the policy
    set its jobs are judged by (None: the default rules)."""

    name: str
    issuer: str
    conditions: tuple[Condition, ...]
    publish: PatternList = field(default_factory=PatternList)
    policy: str | None = None

    def unmet(self, claims: Mapping[str, Any]) -> Condition | None:
        """The first condition `claims` do not meet, or None when the mapping applies."""
        return next((c for c in self.conditions if not c.met_by(claims)), None)

    def summary(self) -> dict[str, Any]:
        """For check-config."""
        return {"name": self.name, "issuer": self.issuer,
                "claims": [c.text for c in self.conditions],
                "publish": self.publish.texts(), "policy": self.policy}


def issuer_problem(url: str) -> str | None:
    """What is wrong with an issuer URL, or None: https, or http to a loopback host only (a
    test's issuer, a sidecar); no credentials, query or fragment, no trailing `/` (the `iss`
    claim is compared as written)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "http":
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            return (f"the issuer {url[:100]!r} must be https:// (plain http only to a loopback "
                    "address): its keys decide who may publish")
    elif parts.scheme != "https" or not host:
        return (f"the issuer {url[:100]!r} is not an https:// URL, e.g. "
                "https://token.actions.githubusercontent.com")
    if parts.username or parts.password or parts.query or parts.fragment:
        return f"the issuer {url[:100]!r} must be a plain URL: no credentials, query or fragment"
    if url.endswith("/"):
        return (f"the issuer {url[:100]!r} ends with `/`: write it exactly as the tokens' "
                "`iss` claim does, e.g. https://gitlab.com")
    return None


def parse_conditions(words: list[str]) -> tuple[tuple[Condition, ...], str | None]:
    """The conditions in `words` (`claim=glob[,glob]`), or what is wrong with them."""
    conditions: list[Condition] = []
    for word in words:
        claim, equals, listed = word.partition("=")
        if not equals or _CLAIM.fullmatch(claim) is None:
            return (), (f"{word[:80]!r} is not a condition; write CLAIM=VALUE, e.g. "
                        "repository=acme/payments-* or ref=refs/heads/main")
        if claim in _RESERVED:
            return (), (f"`{claim}` is checked by mirrorgate itself (issuer, audience, times); "
                        "a condition names another claim, e.g. repository=acme/*")
        if any(c.claim == claim for c in conditions):
            return (), f"`{claim}` is named twice; list its values once: {claim}=A,B"
        values = tuple(filter(None, listed.split(",")))
        if not values:
            return (), f"`{claim}=` names no value, e.g. {claim}=acme/payments-*"
        if all(set(value) <= {"*"} for value in values):
            # `repository=**` would admit every repository the issuer signs for: on a shared
            # issuer (GitHub's, gitlab.com's) that is everyone's
            return (), (f"`{word[:80]}` matches any value; a condition must narrow the tokens "
                        "down, e.g. repository=acme/*")
        conditions.append(Condition(claim, values, tuple(_glob(v) for v in values)))
    if not conditions:
        return (), ("an issuer line needs at least one condition, e.g. repository=acme/*: "
                    "without one, every repository the issuer signs for would be let in")
    return tuple(conditions), None


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a verified ID token names, for logs, the status page and the pull log: the issuer,
    the subject, and, where the claims say, the repository, the ref and the workflow (GitHub's
    `repository`, `ref` and `workflow`, GitLab's `project_path`, `ref` and `ref_type`)."""

    issuer: str
    subject: str
    repository: str | None = None
    ref: str | None = None
    workflow: str | None = None

    @classmethod
    def of(cls, issuer: str, claims: Mapping[str, Any]) -> Identity:
        def text(*names: str) -> str | None:
            for name in names:
                value = claims.get(name)
                if isinstance(value, str) and value:
                    return value[:200]
            return None

        ref = text("ref")
        if ref is not None and not ref.startswith("refs/"):
            kind = {"branch": "heads", "tag": "tags"}.get(claims.get("ref_type", ""))
            ref = f"refs/{kind}/{ref}" if kind else ref
        return cls(issuer, text("sub") or "", text("repository", "project_path"), ref,
                   text("workflow"))

    @property
    def branch(self) -> str | None:
        if self.ref is not None and self.ref.startswith("refs/heads/"):
            return self.ref.removeprefix("refs/heads/")
        return None

    def describe(self) -> str:
        """`acme/payments-api, branch main` (or the tag, the ref, the subject)."""
        where = self.repository or self.subject
        if self.branch is not None:
            return f"{where}, branch {self.branch}"
        if self.ref is not None and self.ref.startswith("refs/tags/"):
            return f"{where}, tag {self.ref.removeprefix('refs/tags/')}"
        return f"{where}, ref {self.ref}" if self.ref else where

    def fields(self) -> dict[str, str | None]:
        """The identity in log lines (bound for the request: every line carries it)."""
        return {"identity_issuer": self.issuer, "identity_repository": self.repository,
                "identity_ref": self.ref}
