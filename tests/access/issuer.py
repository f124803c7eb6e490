"""An OpenID Connect issuer on loopback: a discovery document, a JWKS, and ID tokens it signs.

It plays GitHub Actions' token service: RS256 keys of its own (2048-bit, made with
`cryptography`), `/.well-known/openid-configuration` naming `/.well-known/jwks`, and `mint`
for the token a job would get. `rotate()` replaces the key (the old one leaves the JWKS);
`stall` makes both documents hang, as an issuer behind a dead network path does. The
forgeries (`alg: none`, HS256 keyed with the public key) are built by hand: no library signs
them, which is the point.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.servers.threaded import ThreadedApp

__all__ = ["AUDIENCE", "LoopbackIssuer", "SigningKey", "forged_hs256", "unsigned"]

AUDIENCE = "mirrorgate-tests"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SigningKey:
    kid: str
    private: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def jwk(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(
            self.private.public_key()))
        return {**found, "kid": self.kid, "alg": "RS256", "use": "sig"}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def unsigned(claims: dict[str, Any], kid: str) -> str:
    """The `alg: none` token: claims with no signature at all."""
    header = {"alg": "none", "typ": "JWT", "kid": kid}
    return (f"{_b64(json.dumps(header).encode())}."
            f"{_b64(json.dumps(claims).encode())}.")


def forged_hs256(claims: dict[str, Any], key: SigningKey) -> str:
    """HS256 "signed" with the issuer's public key (PEM) as the shared secret: what a verifier
    that lets the token choose its algorithm accepts."""
    header = {"alg": "HS256", "typ": "JWT", "kid": key.kid}
    signing_input = (f"{_b64(json.dumps(header).encode())}."
                     f"{_b64(json.dumps(claims).encode())}")
    mac = hmac.new(key.public_pem(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(mac)}"


class LoopbackIssuer(ThreadedApp):
    """The issuer; `url` (no trailing slash) is what its tokens' `iss` says."""

    def __init__(self) -> None:
        super().__init__(self._build, name="oidc-issuer")
        self.keys = [SigningKey("key-1")]
        self.stall = False
        self.requests: list[str] = []

    @property
    def issuer(self) -> str:
        return self.url.rstrip("/")

    @property
    def key(self) -> SigningKey:
        return self.keys[-1]

    def rotate(self) -> SigningKey:
        """A new key replaces the old one in the JWKS; returns the old one."""
        old = self.keys[-1]
        self.keys = [SigningKey(f"key-{len(self.keys) + 1}")]
        return old

    def claims(self, repository: str, ref: str = "refs/heads/main", *,
               lifetime: float = 300.0, **changes: Any) -> dict[str, Any]:
        """The claims GitHub Actions puts in a job's token, for `repository` at `ref`."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer, "aud": AUDIENCE, "iat": now, "nbf": now,
            "exp": int(now + lifetime), "jti": _b64(hashlib.sha256(
                f"{repository}{ref}{time.monotonic_ns()}".encode()).digest()[:12]),
            "sub": f"repo:{repository}:ref:{ref}", "repository": repository,
            "repository_owner": repository.split("/", 1)[0], "ref": ref, "ref_type": "branch",
            "workflow": "release", "event_name": "push", "runner_environment": "github-hosted",
        }
        claims.update(changes)
        return claims

    def mint(self, repository: str, ref: str = "refs/heads/main", *,
             key: SigningKey | None = None, kid: str | None = None, **changes: Any) -> str:
        """An ID token for `repository` at `ref`, signed with the current key (or `key`)."""
        lifetime = changes.pop("lifetime", 300.0)
        signer = key or self.key
        return jwt.encode(self.claims(repository, ref, lifetime=lifetime, **changes),
                          signer.private, algorithm="RS256",
                          headers={"kid": kid or signer.kid})

    def _build(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/.well-known/jwks", self._jwks)
        return app

    async def _hold(self, request: web.Request) -> None:
        self.requests.append(request.path)
        # polled: `stall` is set from the test's thread, an asyncio.Event is this loop's
        while self.stall:  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    async def _discovery(self, request: web.Request) -> web.Response:
        await self._hold(request)
        return web.json_response({
            "issuer": self.issuer, "jwks_uri": f"{self.issuer}/.well-known/jwks",
            "subject_types_supported": ["public"], "response_types_supported": ["id_token"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "claims_supported": ["sub", "aud", "exp", "iat", "iss", "jti", "nbf", "ref",
                                 "repository", "repository_owner", "workflow"]})

    async def _jwks(self, request: web.Request) -> web.Response:
        await self._hold(request)
        return web.json_response({"keys": [key.jwk() for key in self.keys]},
                                 content_type="application/jwk-set+json")
