"""Who may use the proxy: the client tokens file, parsed, matched and re-read when it changes.

`MIRRORGATE_CLIENT_TOKENS_FILE` holds one client per line, `NAME sha256:HEX [publish:NAMES]
[policy:NAME]`. Only digests are stored, so the file (a Kubernetes Secret) never holds a usable
token. A line `NAME ISSUER CLAIM=VALUE... [publish:NAMES] [policy:NAME]` grants the same to a
CI's ID tokens (`claims`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from mirrorgate.access.claims import (
    MAX_ISSUERS,
    ClaimMapping,
    Identity,
    issuer_problem,
    parse_conditions,
)
from mirrorgate.errors import MirrorgateError
from mirrorgate.rules.patterns import PatternList, parse_pattern
from mirrorgate.rules.policy import POLICY_NAME, Rules

__all__ = [
    "POLICY",
    "PUBLISH",
    "Client",
    "ClientTokens",
    "ClientTokensError",
    "TokensFile",
    "name_problem",
    "new_token",
    "parse_clients",
    "parse_tokens_file",
    "policy_problem",
    "token_line",
]

log = structlog.get_logger("mirrorgate.clients")

PUBLISH = "publish"
"""The optional third column, `publish:@team/*,team-*`: the package names (patterns, as
`[publish] names` takes them) this client may publish, deprecate, tag and unpublish
(`serve.publishing`). A grant always names its packages: a bare `publish`, which reached every
name `[publish] names` covers, let one leaked CI token rewrite every team's packages."""

POLICY = "policy"
"""The optional `policy:NAME` column: the rules file's `[policy.NAME]` judges what this client
installs (docs/configuration.md#policy-sets); a client without one gets the default rules."""

POLL_SECONDS = 2.0
"""How often the file's identity is checked: a rotated Secret is in force within 10 s."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_DIGEST = re.compile(r"sha256:([0-9a-fA-F]{64})")
_MAX_FILE_BYTES = 1024 * 1024


class ClientTokensError(MirrorgateError, ValueError):
    """A tokens file that cannot be used; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class Client:
    """One client: its name (in logs and `npm whoami`), its token's digest, the names it may
    write (none: a reader) and the policy set it is judged by (None: the default rules). A
    client signed in with an ID token has the name of the issuer line that let it in, no
    digest, and the `identity` its claims name."""

    name: str
    digest: bytes
    publish: PatternList = field(default_factory=PatternList)
    identity: Identity | None = None
    policy: str | None = None

    def may_write(self, package: str) -> bool:
        return self.publish.covers_name(package)

    @property
    def who(self) -> str:
        """The client as events name it: `ci`, or `payments-ci (acme/payments-api, branch
        main)` for a CI job signed in with its ID token."""
        if self.identity is None:
            return self.name
        return f"{self.name} ({self.identity.describe()})"


def name_problem(name: str) -> str | None:
    """What is wrong with a client name, or None when it is usable."""
    if _NAME.fullmatch(name) is None:
        return (f"the name {name[:70]!r} must be 1 to 64 letters, digits, `.`, `_`, `@` or "
                "`-`, starting with a letter or digit")
    return None


@dataclass(frozen=True, slots=True)
class TokensFile:
    """What a tokens file holds: the static clients and the issuer lines, in file order (the
    first issuer line whose conditions a token meets is the one that applies)."""

    clients: tuple[Client, ...] = ()
    mappings: tuple[ClaimMapping, ...] = ()

    @property
    def issuers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m.issuer for m in self.mappings))

    def summary(self) -> dict[str, Any]:
        """For check-config: names and grants only (the file holds digests, and check-config
        prints none of them)."""
        return {"static": [{"name": c.name, "publish": c.publish.texts(), "policy": c.policy}
                           for c in self.clients],
                "issuers": list(self.issuers),
                "issuer_lines": [m.summary() for m in self.mappings]}

    def policies(self) -> dict[str, list[str]]:
        """Each policy set a line names, with the names of the lines that name it: the static
        clients', then the issuer lines', each in file order."""
        named: dict[str, list[str]] = {}
        lines: list[Client | ClaimMapping] = [*self.clients, *self.mappings]
        for line in lines:
            if line.policy is not None:
                named.setdefault(line.policy, []).append(line.name)
        return named


def policy_problem(found: TokensFile, rules: Rules, tokens: str) -> str | None:
    """Why the tokens file `found` (read from `tokens`) cannot be used beside `rules` (None:
    it can): a line names a policy set the rules file does not define. Checked at start and
    whenever either file is read again, so a client is never judged by rules nobody wrote."""
    missing = {policy: lines for policy, lines in found.policies().items()
               if policy not in rules.policies}
    if not missing:
        return None
    source = ("no rules file (MIRRORGATE_RULES_FILE is unset)" if rules.source == "<defaults>"
              else f"the rules file {rules.source}")
    named = "; ".join(f"policy:{policy} (on the line of {', '.join(lines)})"
                      for policy, lines in sorted(missing.items()))
    defined = ", ".join(sorted(rules.policies)) or "none"
    return (f"the tokens file {tokens} names {named}, which {source} does not define "
            f"(its policy sets: {defined}); add [policy.NAME] tables there, or take the "
            "policy: column off those lines")


def parse_clients(text: str, source: str) -> tuple[Client, ...]:
    """The static clients a tokens file lists; raises ClientTokensError naming the first bad
    line (issuer lines are checked too)."""
    return parse_tokens_file(text, source).clients


def parse_tokens_file(text: str, source: str) -> TokensFile:
    """The clients and issuer lines of a tokens file (`#` starts a comment); raises
    ClientTokensError naming the first bad line."""
    clients: list[Client] = []
    mappings: list[ClaimMapping] = []
    names: set[str] = set()
    digests: set[bytes] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source} line {number}"
        words = line.split()
        if len(words) < 2:
            raise ClientTokensError(f"{where}: expected `NAME sha256:HEX [publish:NAMES] "
                                    "[policy:NAME]`, "
                                    "e.g. `ci-builds sha256:<64 hex digits>` (`mirrorgate token "
                                    "new NAME` prints one)")
        name, digest_text, *grants = words
        problem = name_problem(name)
        if problem is not None:
            raise ClientTokensError(f"{where}: {problem}")
        if name in names:
            raise ClientTokensError(f"{where}: the client {name!r} is listed twice")
        if digest_text.startswith(("https://", "http://")):
            mappings.append(_mapping(where, name, digest_text, grants))
            names.add(name)
            if len({m.issuer for m in mappings}) > MAX_ISSUERS:
                raise ClientTokensError(f"{where}: more than {MAX_ISSUERS} issuers")
            continue
        match = _DIGEST.fullmatch(digest_text)
        if match is None:
            # the text is not echoed: someone may have pasted the token itself here
            raise ClientTokensError(f"{where}: the second column must be `sha256:` and 64 hex "
                                    "digits (the digest of the token, never the token itself), "
                                    "or an issuer's https:// URL")
        publish, policy = _grants(where, grants)
        digest = bytes.fromhex(match.group(1))
        if digest in digests:
            raise ClientTokensError(f"{where}: this digest is already another client's; give "
                                    "every client a token of its own")
        names.add(name)
        digests.add(digest)
        clients.append(Client(name, digest, publish, policy=policy))
    return TokensFile(tuple(clients), tuple(mappings))


def _mapping(where: str, name: str, issuer: str, words: list[str]) -> ClaimMapping:
    """An issuer line's mapping (`NAME ISSUER CLAIM=VALUE... [publish:NAMES] [policy:NAME]`)."""
    problem = issuer_problem(issuer)
    if problem is not None:
        raise ClientTokensError(f"{where}: {problem}")
    grants = [word for word in words if "=" not in word]
    conditions, problem = parse_conditions([word for word in words if "=" in word])
    if problem is not None:
        raise ClientTokensError(f"{where}: {problem}")
    if grants and any("=" in word for word in words[words.index(grants[0]):]):
        raise ClientTokensError(f"{where}: the grant comes last, after the conditions: "
                                "`NAME ISSUER repository=acme/* publish:@acme/*`")
    publish, policy = _grants(where, grants)
    return ClaimMapping(name, issuer, conditions, publish, policy)


def _grants(where: str, words: list[str]) -> tuple[PatternList, str | None]:
    """What a line's last columns say: the names it may publish (`publish:@team/*,team-*`) and
    its policy set (`policy:payments`), each at most once; raises ClientTokensError saying what
    to write instead."""
    publish: PatternList | None = None
    policy: str | None = None
    for word in words:
        kind, _colon, value = word.partition(":")
        if kind == POLICY and policy is None:
            policy = _policy(where, value)
        elif kind == PUBLISH and publish is None:
            publish = _grant(where, word)
        elif kind in (POLICY, PUBLISH):
            raise ClientTokensError(f"{where}: `{kind}:` is given twice; a line has one "
                                    f"`publish:NAMES` and one `policy:NAME` at most")
        else:
            raise ClientTokensError(f"{where}: unknown permission {kind[:40]!r}; after the "
                                    "digest (or the conditions) a line may hold "
                                    "`publish:@team-a/*,team-a-*` and `policy:NAME`")
    return publish if publish is not None else PatternList(), policy


def _policy(where: str, name: str) -> str:
    if POLICY_NAME.fullmatch(name) is None:
        raise ClientTokensError(f"{where}: `policy:` names a policy set of the rules file "
                                f"([policy.NAME]), e.g. `policy:payments`; {name[:40]!r} is "
                                "not one (lowercase letters, digits, `-` and `_`)")
    return name


def _grant(where: str, word: str) -> PatternList:
    """The names a `publish:@team/*,team-*` column grants; raises ClientTokensError saying
    what to write instead."""
    example = "publish:@team-a/*,team-a-*"
    _kind, colon, listed = word.partition(":")
    if not colon or not listed.strip(","):
        raise ClientTokensError(f"{where}: `publish` must name the packages this client may "
                                f"write, e.g. `{example}` (patterns as [publish] names takes "
                                "them): one token with a bare `publish` could rewrite every "
                                "team's packages")
    patterns = []
    for text in filter(None, listed.split(",")):
        try:
            pattern = parse_pattern(text)
        except ValueError as error:
            raise ClientTokensError(f"{where}: {text[:80]!r} {error}") from None
        if pattern.range is not None:
            raise ClientTokensError(f"{where}: {text[:80]!r} names versions; a grant names "
                                    "whole packages, like \"@team-a/*\" or \"team-a-*\"")
        patterns.append(pattern)
    return PatternList.of(tuple(patterns))


def new_token() -> str:
    """A fresh random client token (256 bits, URL-safe, so it fits every npmrc syntax)."""
    return "mgc_" + secrets.token_urlsafe(32)


def token_line(name: str, token: str) -> str:
    """The tokens-file line for `token` under `name`."""
    return f"{name} sha256:{hashlib.sha256(token.encode()).hexdigest()}"


_Identity = tuple[int, int, int, int]


def _identity(path: Path) -> _Identity:
    # stat follows symlinks: a Kubernetes Secret rotates by swapping the `..data` symlink,
    # which changes the inode here even when size and mtime happen to match
    found = os.stat(path)
    return (found.st_dev, found.st_ino, found.st_mtime_ns, found.st_size)


def _read(path: Path) -> tuple[_Identity, TokensFile]:
    try:
        identity = _identity(path)
        with path.open("rb") as handle:
            data = handle.read(_MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ClientTokensError(f"cannot read {path}: {error.strerror}") from None
    if len(data) > _MAX_FILE_BYTES:
        raise ClientTokensError(f"{path} is larger than {_MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ClientTokensError(f"{path} is not UTF-8 text") from None
    return identity, parse_tokens_file(text, str(path))


def _ignore(_reason: str) -> None:
    return None


class ClientTokens:
    """The clients in force, matched in constant time, re-read when the file changes: a file
    unusable at start refuses start-up, a bad rewrite later leaves the last good set in force
    (logged, and counted through `on_reload_failed`). `check` says what else makes a file
    unusable (the process: a policy set the rules do not define, `policy_problem`)."""

    def __init__(self, path: Path, *, on_reload_failed: Callable[[str], None] = _ignore,
                 check: Callable[[TokensFile], str | None] = lambda _file: None) -> None:
        """Reads `path` now; raises ClientTokensError when it cannot be used."""
        self.path = path
        self._on_reload_failed = on_reload_failed
        self._identity, self._file = _read(path)
        self.check = check
        problem = check(self._file)
        if problem is not None:
            raise ClientTokensError(problem)
        self._failed: _Identity | None = None
        self._problem: str | None = None

    @property
    def clients(self) -> tuple[Client, ...]:
        return self._file.clients

    @property
    def file(self) -> TokensFile:
        """What the file in force holds."""
        return self._file

    @property
    def mappings(self) -> tuple[ClaimMapping, ...]:
        """The issuer lines in force, in file order (`access.oidc` reads them per request, so
        a reload applies to the next token)."""
        return self._file.mappings

    def match(self, token: str) -> Client | None:
        """The client whose token this is, or None. Every digest is compared, each with
        hmac.compare_digest, so the time taken says nothing about which bytes matched."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: Client | None = None
        for client in self._file.clients:
            if hmac.compare_digest(client.digest, digest):
                found = client
        return found

    def refresh(self) -> bool:
        """Re-read the file if its identity changed; True when a new set took effect. A file
        that cannot be used is logged once per bad version, and the set in force is kept."""
        identity: _Identity | None = None
        try:
            identity = _identity(self.path)
            if identity in (self._identity, self._failed):
                return False
            identity, read = _read(self.path)
            unusable = self.check(read)
            if unusable is not None:
                raise ClientTokensError(unusable)
        except OSError as error:
            problem = f"cannot read {self.path}: {error.strerror}"
        except ClientTokensError as error:
            problem = str(error)
        else:
            self._identity, self._file = identity, read
            self._failed = self._problem = None
            log.info("client_tokens_reloaded", path=str(self.path), clients=len(read.clients),
                     issuer_lines=len(read.mappings))
            return True
        if problem != self._problem or identity != self._failed:
            log.error("client_tokens_reload_failed", path=str(self.path), reason=problem,
                      kept=len(self._file.clients))
            self._on_reload_failed(problem)
        self._failed, self._problem = identity, problem
        return False

    async def watch(self, interval: float = POLL_SECONDS) -> None:
        """Poll the file until cancelled."""
        while True:
            await asyncio.sleep(interval)
            self.refresh()  # a stat, and a read of a small file when it changed
