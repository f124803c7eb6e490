"""Signing in with a CI's OpenID Connect ID token: PyJWT verifies it against the issuer's keys.

Each issuer the tokens file names gets its discovery document and JWKS fetched over its own
bounded `Upstream`, cached, refreshed on an unknown `kid` at most once per `REFRESH_FLOOR`;
an issuer that cannot be reached fails its own tokens closed, within MIRRORGATE_OIDC_TIMEOUT,
and touches no other request. docs/ci-identity.md tells the whole story.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import jwt
import structlog

from mirrorgate.access.claims import ClaimMapping, Identity
from mirrorgate.access.tokens import Client
from mirrorgate.errors import MirrorgateError
from mirrorgate.metrics import Metrics
from mirrorgate.npm.origins import Origin
from mirrorgate.upstream.client import PoolSizes, Upstream, UpstreamError

__all__ = ["ALGORITHMS", "SignInRefused", "Verifier", "looks_like_jwt"]

log = structlog.get_logger("mirrorgate.oidc")

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
              "EdDSA")
"""Public-key algorithms only: `none` proves nothing, and an HS* token "signed" with the
issuer's public key as the shared secret is the classic forgery."""
SKEW_SECONDS = 60
"""Clock skew allowed on `exp`, `nbf` and `iat` (a CI runner's clock is not ours)."""
KEYS_TTL = 3600.0
"""Seconds a fetched key set is used before it is fetched again; past it, and unreachable,
the issuer's tokens are refused (a withdrawn key must not outlive the issuer's word)."""
REFRESH_FLOOR = 10.0
"""At most one fetch per issuer in this many seconds: a flood of tokens with made-up `kid`s
costs the issuer one request, not one each."""
MAX_KEYS = 32
MAX_DOCUMENT_BYTES = 256 * 1024
_DISCOVERY = "/.well-known/openid-configuration"
_SHOWN = 120


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts, the first a JSON object (`eyJ`): worth verifying as an ID token."""
    return token.startswith("eyJ") and token.count(".") == 2


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


class SignInRefused(MirrorgateError):  # noqa: N818 - an outcome carried to the response
    """An ID token not taken: the status (401 not verified, 403 verified but no issuer line
    applies, 503 the issuer's keys cannot be had), a stable `reason` for logs and metrics, and
    a sentence naming what was wrong (claims and lines, never the token)."""

    def __init__(self, status: int, reason: str, message: str,
                 identity: Identity | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.identity = identity


def _unreachable(issuer: str, detail: str) -> SignInRefused:
    return SignInRefused(503, "issuer keys unavailable",
                         f"mirrorgate cannot fetch the signing keys of {issuer} ({detail}), so "
                         "it cannot verify this ID token; try again shortly")


class IssuerKeys:
    """One issuer's signing keys, from its discovery document's `jwks_uri`, fetched on that
    issuer's own `Upstream` (bounded pool, timeouts, no redirects, origin-locked)."""

    def __init__(self, issuer: str, *, timeout: float, metrics: Metrics | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.issuer = issuer
        parts = urlsplit(issuer)
        self._origin = Origin.of(issuer)
        self._discovery = parts.path.rstrip("/") + _DISCOVERY
        self._timeout = timeout
        self._clock = clock
        self._upstream = Upstream(f"oidc {parts.hostname}", f"{parts.scheme}://{parts.netloc}/",
                                  timeout=timeout, max_metadata_bytes=MAX_DOCUMENT_BYTES,
                                  metrics=metrics, pools=PoolSizes(fills=4, tarballs=1, worker=1))
        self._started = False
        self._keys: dict[str | None, jwt.PyJWK] | None = None
        self._fetched_at = 0.0
        self._attempted_at: float | None = None
        self._failure: SignInRefused | None = None
        self._fetching: asyncio.Task[dict[str | None, jwt.PyJWK]] | None = None

    async def close(self) -> None:
        if self._fetching is not None:
            self._fetching.cancel()
        await self._upstream.close()

    async def key(self, kid: str | None) -> jwt.PyJWK:
        """The key `kid` names (the only key, for a token naming none); raises SignInRefused."""
        now = self._clock()
        fresh = self._keys is not None and now - self._fetched_at < KEYS_TTL
        if fresh and (found := self._find(kid)) is not None:
            return found
        if self._fetching is None:
            if self._attempted_at is not None and now - self._attempted_at < REFRESH_FLOOR:
                # fetched (or tried) moments ago: answer from what that gave, without asking;
                # a try that failed knows nothing of the key: 503, not "unknown"
                if not fresh or self._failure is not None:
                    raise self._failure or _unreachable(self.issuer, "not fetched yet")
                raise self._unknown(kid, now)
            self._attempted_at = now
            self._fetching = asyncio.get_running_loop().create_task(
                self._fetch(), name=f"oidc-keys {self.issuer}")
            self._fetching.add_done_callback(self._fetched)
        # shielded: a client that hangs up does not cancel the fetch others are waiting on;
        # its failure is read from `_failure` (set by `_fetched`, which runs first)
        with contextlib.suppress(Exception):
            await asyncio.shield(self._fetching)
        if self._keys is None or self._clock() - self._fetched_at >= KEYS_TTL:
            raise self._failure or _unreachable(self.issuer, "no key set")
        found = self._find(kid)
        if found is None:
            # the keys held are older than the token's: a refresh that failed (a hung issuer
            # with its keys cached) cannot say the key is not the issuer's (docs/ci-identity.md)
            raise self._failure or self._unknown(kid, self._clock())
        return found

    def _fetched(self, task: asyncio.Task[dict[str | None, jwt.PyJWK]]) -> None:
        self._fetching = None
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, SignInRefused):
            self._failure = error
            log.warning("oidc_keys_unavailable", issuer=self.issuer, reason=error.message)
        elif error is not None:
            self._failure = _unreachable(self.issuer, type(error).__name__)
            log.error("oidc_keys_failed", issuer=self.issuer, error=type(error).__name__)
        else:
            self._keys, self._fetched_at, self._failure = task.result(), self._clock(), None
            log.info("oidc_keys_fetched", issuer=self.issuer, keys=len(self._keys))

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        keys = self._keys or {}
        if kid is None:
            # a token naming no key is verified only by an issuer that has exactly one
            return next(iter(keys.values())) if len(keys) == 1 else None
        return keys.get(kid)

    def _unknown(self, kid: str | None, now: float) -> SignInRefused:
        named = f"key {_shown(kid)}" if kid is not None else "no key (no `kid` header)"
        return SignInRefused(401, "unknown key",
                             f"the ID token names {named}, which {self.issuer} does not publish "
                             f"(its key set was fetched {now - self._fetched_at:.0f} s ago); a "
                             "token signed by anyone else is not this issuer's")

    async def _fetch(self) -> dict[str | None, jwt.PyJWK]:
        if not self._started:
            await self._upstream.start()
            self._started = True
        try:
            async with asyncio.timeout(self._timeout):
                discovery = await self._document(self._discovery)
                if discovery.get("issuer") != self.issuer:
                    raise _unreachable(self.issuer, "its discovery document names another "
                                       f"issuer, {_shown(discovery.get('issuer'))}")
                uri = discovery.get("jwks_uri")
                # the keys come from the issuer's own origin: a discovery document must not
                # point mirrorgate at another host (or an internal address)
                if not isinstance(uri, str) or Origin.of(uri) != self._origin:
                    raise _unreachable(self.issuer, f"its jwks_uri {_shown(uri)} is not on "
                                       "the issuer's own origin")
                parts = urlsplit(uri)
                jwks = await self._document(parts.path + (f"?{parts.query}" if parts.query
                                                          else ""))
        except TimeoutError:
            raise _unreachable(self.issuer, f"no answer within {self._timeout:g} s "
                               "(MIRRORGATE_OIDC_TIMEOUT)") from None
        except UpstreamError as error:
            raise _unreachable(self.issuer, str(error)) from None
        return self._usable(jwks)

    async def _document(self, path: str) -> dict[str, Any]:
        answer = await self._upstream.get_json(path)
        if answer.status != 200 or answer.document is None:
            raise _unreachable(self.issuer, f"{path} answered {answer.status}")
        return answer.document

    def _usable(self, jwks: Mapping[str, Any]) -> dict[str | None, jwt.PyJWK]:
        """The signing keys of a JWKS: public keys only (an `oct` key would make HS* tokens
        verifiable with it), for signatures, with an allowed algorithm; the rest skipped."""
        listed = jwks.get("keys")
        keys: dict[str | None, jwt.PyJWK] = {}
        for entry in (listed if isinstance(listed, list) else [])[:MAX_KEYS]:
            if (not isinstance(entry, dict) or entry.get("kty") not in ("RSA", "EC", "OKP")
                    or entry.get("use", "sig") != "sig"
                    or entry.get("alg", ALGORITHMS[0]) not in ALGORITHMS):
                continue
            try:
                key = jwt.PyJWK(entry)
            except jwt.PyJWTError:
                continue
            kid = entry.get("kid")
            keys[kid if isinstance(kid, str) else None] = key
        if not keys:
            raise _unreachable(self.issuer, "its key set holds no usable signing key")
        return keys


class Verifier:
    """Turns an ID token into a `Client`: verified by PyJWT against its issuer's keys, then
    given the rights of the first issuer line whose conditions its claims meet."""

    def __init__(self, *, audience: str, timeout: float, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.audience = audience
        self._timeout = timeout
        self._metrics = metrics
        self._clock = clock
        self._issuers: dict[str, IssuerKeys] = {}

    async def close(self) -> None:
        issuers, self._issuers = self._issuers, {}
        for keys in issuers.values():
            await keys.close()

    async def _keys_of(self, issuer: str, named: set[str]) -> IssuerKeys:
        keys = self._issuers.get(issuer)
        if keys is None:
            for gone in [i for i in self._issuers if i not in named]:
                # an issuer removed from the tokens file: its client and cached keys go
                await self._issuers.pop(gone).close()
            keys = self._issuers[issuer] = IssuerKeys(issuer, timeout=self._timeout,
                                                      metrics=self._metrics, clock=self._clock)
        return keys

    async def sign_in(self, token: str, mappings: tuple[ClaimMapping, ...]) -> Client:
        """The client `token` signs in as; raises SignInRefused saying why not."""
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise SignInRefused(401, "not a token", "the client token is neither one the tokens "
                                "file lists nor a readable ID token") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise SignInRefused(401, "algorithm not allowed",
                                f"the ID token is signed with {_shown(algorithm)}; mirrorgate "
                                f"takes only {', '.join(ALGORITHMS)} (never `none`, never a "
                                "shared secret)")
        issuer = unverified.get("iss")
        ours = [m for m in mappings if m.issuer == issuer]
        if not isinstance(issuer, str) or not ours:
            raise SignInRefused(401, "unknown issuer",
                                f"the ID token's issuer {_shown(issuer)} is not one this "
                                "mirrorgate trusts: no issuer line of the tokens file names it")
        kid = header.get("kid")
        keys = await self._keys_of(issuer, {m.issuer for m in mappings})
        key = await keys.key(kid if isinstance(kid, str) else None)
        claims = self._verified(token, key, issuer)
        identity = Identity.of(issuer, claims)
        for mapping in ours:
            if mapping.unmet(claims) is None:
                return Client(mapping.name, b"", mapping.publish, identity, mapping.policy)
        missing = "; ".join(f"`{m.name}` needs {unmet.text} ({unmet.miss(claims)})"
                            for m in ours[:3] if (unmet := m.unmet(claims)) is not None)
        raise SignInRefused(403, "no issuer line applies",
                            f"the ID token of {identity.describe()} from {issuer} meets no "
                            f"issuer line of the tokens file: {missing}", identity)

    def _verified(self, token: str, key: jwt.PyJWK, issuer: str) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=list(ALGORITHMS), audience=self.audience, issuer=issuer,
                leeway=SKEW_SECONDS, options={"require": ["exp", "iat", "iss", "aud", "sub"],
                                              "enforce_minimum_key_length": True})
        except jwt.ExpiredSignatureError:
            raise SignInRefused(401, "expired", f"the ID token expired{self._when(token)} "
                                f"(mirrorgate allows {SKEW_SECONDS} s of clock skew); the job "
                                "must ask its CI for a fresh one") from None
        except jwt.ImmatureSignatureError:
            raise SignInRefused(401, "not yet valid", "the ID token is not valid yet (`nbf` "
                                "or `iat` is in the future beyond "
                                f"{SKEW_SECONDS} s of clock skew)") from None
        except jwt.InvalidAudienceError:
            raise SignInRefused(401, "wrong audience",
                                f"the ID token is for the audience "
                                f"{_shown(self._claim(token, 'aud'))}; this mirrorgate takes "
                                f"tokens for {self.audience!r} (MIRRORGATE_OIDC_AUDIENCE): "
                                "request the token with that audience") from None
        except jwt.MissingRequiredClaimError as error:
            raise SignInRefused(401, "missing claim", f"the ID token has no `{error.claim}` "
                                "claim") from None
        except jwt.InvalidAlgorithmError:
            raise SignInRefused(401, "algorithm not allowed", "the ID token's algorithm is not "
                                f"the one its key ({key.algorithm_name}) is for") from None
        except jwt.InvalidKeyError:
            raise SignInRefused(401, "weak key", f"the key {issuer} signed the ID token with "
                                "is too weak to trust (an RSA key under 2048 bits)") from None
        except jwt.InvalidSignatureError:
            raise SignInRefused(401, "bad signature", f"the ID token's signature does not "
                                f"verify with the key {issuer} published for it") from None
        except jwt.PyJWTError as error:
            raise SignInRefused(401, "invalid token", f"the ID token cannot be used "
                                f"({type(error).__name__})") from None
        return claims

    @staticmethod
    def _claim(token: str, name: str) -> object:
        return jwt.decode(token, options={"verify_signature": False}).get(name)

    @classmethod
    def _when(cls, token: str) -> str:
        exp = cls._claim(token, "exp")
        if isinstance(exp, int | float) and not isinstance(exp, bool):
            return f" at {datetime.fromtimestamp(exp, UTC):%Y-%m-%d %H:%M:%S} UTC"
        return ""
